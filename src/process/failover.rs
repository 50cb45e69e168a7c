//! Worker processes that share the store of record (`quorate worker --store etcd://...`, cargo
//! features `etcd` and `nats`): the scripted world's effects and the tasks' action books live on
//! the etcd cluster, so an action commits once across every worker process and a worker that
//! takes a task over reads what the lost one committed (docs/distributed.md, "A lost worker").
//! Peer processes (`quorate peer --store etcd://...`) keep their own workers' world and books
//! here the same way ([`Shared::for_peer`]; a peer's agent id names its books).
//!
//! Keys, below the etcd URL's prefix (`/PREFIX/kv/...`, see `quorate_state::Etcd`):
//!
//! ```text
//! world/RUN/TASK/STEP/VERSION            the effect committed under that action (StoredEffect)
//! world/RUN/TASK/STEP/VERSION/again/N    a non-idempotent tool called again: a duplicate
//! book/WORKER/RUN/TASK                   WORKER's action book of the task (StoredBook)
//! fence/RUN/TASK                         the attempt that owns the task: with a supervisor,
//!                                        if later than the first (written by the supervisor
//!                                        only: fence.rs); with peers, every attempt's (raised
//!                                        by CAS by the claim's holder: peer/shell.rs)
//! ```
//!
//! A worker writes only its own books (its etcd role grants nothing else under `book/`); it
//! reads every worker's, to import the book of a task it takes over. An effect is an etcd create
//! (`create_revision == 0`). A book write is one transaction on the key's `mod_revision` that
//! also requires the task's fence to name the writing attempt (absent for attempt 1), so a
//! worker whose attempt was taken over is refused at its next write ([`Fenced`]) without any
//! other worker writing its keys. Its new value passed `StoredBook::write`'s (or `claim`'s) check
//! against the book read before: the worker's own, or the newest attempt's of any worker.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorate_protocols::{ActionId, AgentId, RunId, TaskId};
use quorate_state::{CasOutcome, Etcd, EtcdStore, Guarded, Store, StoreError, Versioned};
use quorate_workers::scripted::{CommittedEffect, EffectStore};
use quorate_workers::{BookStore, Fenced, StoredBook};
use serde::{Deserialize, Serialize};

/// How long a store call is tried again while the cluster does not answer, before the worker
/// process gives up (exit 8): acting on a write it could not make would break exactly-once,
/// and its lease lapses meanwhile, so its tasks go to other workers.
const GIVE_UP: Duration = Duration::from_secs(15);

/// An effect as the store of record keeps it: the effect, and the worker process that committed
/// it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredEffect {
    /// The effect.
    pub effect: CommittedEffect,
    /// The worker that committed it.
    pub by: AgentId,
}

/// The key of `action`'s effect in run `run` (in the `world` store).
#[must_use]
pub fn effect_key(run: RunId, action: &ActionId) -> String {
    format!("{run}/{action}")
}

/// The key of worker `worker`'s book of `task` in run `run` (in the `book` store).
#[must_use]
pub fn book_key(worker: AgentId, run: RunId, task: TaskId) -> String {
    format!("{worker}/{run}/{task}")
}

/// The key of `task`'s fence in run `run` (in the `fence` store): the attempt that owns the
/// task, written by the supervisor before it assigns any attempt after the first.
#[must_use]
pub fn fence_key(run: RunId, task: TaskId) -> String {
    format!("{run}/{task}")
}

/// The newest book of `task` in run `run` among every worker's (`book` is the `book` store):
/// the one of the highest attempt, with the worker that wrote it.
///
/// # Errors
/// As [`Store::scan`].
pub async fn newest_book(
    book: &EtcdStore<StoredBook>,
    run: RunId,
    task: TaskId,
) -> Result<Option<(String, Versioned<StoredBook>)>, StoreError> {
    let tail = format!("/{run}/{task}");
    let all = book.scan("").await?;
    Ok(all
        .into_iter()
        .filter(|(k, _)| k.ends_with(&tail))
        .max_by_key(|(_, v)| v.value.owner))
}

/// The store-backed world and books of one worker process (or peer process).
#[derive(Clone, Debug)]
pub struct Shared {
    world: EtcdStore<StoredEffect>,
    books: EtcdStore<StoredBook>,
    fences: EtcdStore<u32>,
    run: RunId,
    me: AgentId,
    handle: tokio::runtime::Handle,
    fenced: Arc<AtomicU64>,
    /// `worker` or `peer`: what `me` is, in messages.
    what: &'static str,
    /// Every attempt writes under a fence naming it, the first too (peers, which raise the
    /// fence before each attempt); otherwise attempt 1 writes while no fence exists.
    first_fenced: bool,
}

impl Shared {
    /// The world and books of worker `me` of run `run` on `etcd`; store calls run on `handle`'s
    /// runtime (the caller waits on a channel: it may be inside actix's runtime).
    #[must_use]
    pub fn new(etcd: &Etcd, run: RunId, me: AgentId, handle: tokio::runtime::Handle) -> Self {
        Self {
            world: etcd.store("world"),
            books: etcd.store("book"),
            fences: etcd.store("fence"),
            run,
            me,
            handle,
            fenced: Arc::new(AtomicU64::new(0)),
            what: "worker",
            first_fenced: false,
        }
    }

    /// The world and books of peer `me` of run `run` on `etcd` (its books under its agent id,
    /// as a worker's): every attempt, the first too, writes only while the task's fence names
    /// it, because a peer raises the fence before each attempt it runs (no supervisor does).
    #[must_use]
    pub fn for_peer(etcd: &Etcd, run: RunId, me: AgentId, handle: tokio::runtime::Handle) -> Self {
        Self {
            what: "peer",
            first_fenced: true,
            ..Self::new(etcd, run, me, handle)
        }
    }

    /// Book writes and claims the store refused so far (this worker was fenced off).
    #[must_use]
    pub fn fenced(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }

    /// Runs `make()`'s request until the cluster answers; ends the process after [`GIVE_UP`].
    fn call<T, F>(&self, what: &str, make: impl Fn() -> F) -> T
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let started = Instant::now();
        loop {
            let (tx, rx) = std::sync::mpsc::channel();
            let request = make();
            self.handle.spawn(async move {
                let _ = tx.send(request.await);
            });
            let error = match rx.recv() {
                Ok(Ok(done)) => return done,
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the runtime stopped".to_owned(),
            };
            if started.elapsed() > GIVE_UP {
                eprintln!(
                    "quorate: {} {}: {what}: {error}; giving up after {GIVE_UP:?}",
                    self.what, self.me
                );
                std::process::exit(i32::from(quorate_coordinator::StopReason::EXIT_RUNTIME));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl EffectStore for Shared {
    fn create(&self, effect: &CommittedEffect) -> bool {
        let key = effect_key(self.run, &effect.action);
        let stored = StoredEffect {
            effect: effect.clone(),
            by: self.me,
        };
        let world = self.world.clone();
        let outcome = self.call("committing an effect", || {
            let (world, key, stored) = (world.clone(), key.clone(), stored.clone());
            async move { world.cas(&key, None, stored).await }
        });
        match outcome {
            CasOutcome::Committed(_) => true,
            // A create tried again after an answer was lost may find its own first try.
            CasOutcome::Conflict { current } => current.is_some_and(|c| c.value == stored),
        }
    }

    fn again(&self, effect: &CommittedEffect) {
        let base = effect_key(self.run, &effect.action);
        let stored = StoredEffect {
            effect: effect.clone(),
            by: self.me,
        };
        for n in 1.. {
            let key = format!("{base}/again/{n}");
            let world = self.world.clone();
            let outcome = self.call("committing an effect again", || {
                let (world, key, stored) = (world.clone(), key.clone(), stored.clone());
                async move { world.cas(&key, None, stored).await }
            });
            if outcome.is_committed() {
                return;
            }
        }
    }

    fn find(&self, action: &ActionId) -> Option<CommittedEffect> {
        let key = effect_key(self.run, action);
        let world = self.world.clone();
        let found = self.call("reading an effect", || {
            let (world, key) = (world.clone(), key.clone());
            async move { world.get(&key).await }
        });
        found.map(|v| v.value.effect)
    }
}

impl Shared {
    /// What a write of `task`'s book is checked against: this worker's own book (with its
    /// version, to write over), and the book to check (its own, or the newest attempt's of any
    /// worker when the fence names an attempt newer than its own book's), owned by at least the
    /// fence's attempt.
    fn read_book(&self, task: TaskId) -> (Option<Versioned<StoredBook>>, Option<StoredBook>) {
        let (books, fences) = (self.books.clone(), self.fences.clone());
        let (run, me) = (self.run, self.me);
        self.call("reading an action book", move || {
            let (books, fences) = (books.clone(), fences.clone());
            async move {
                let fence = fences.get(&fence_key(run, task)).await?.map(|f| f.value);
                let own = books.get(&book_key(me, run, task)).await?;
                let own_owner = own.as_ref().map_or(0, |b| b.value.owner);
                let mut check = own.as_ref().map(|b| b.value.clone());
                if fence.is_some_and(|f| f > own_owner) {
                    // A takeover (or this worker's attempt was taken over): the newest book.
                    if let Some((_, newest)) = newest_book(&books, run, task).await? {
                        if newest.value.owner > own_owner {
                            check = Some(newest.value);
                        }
                    }
                }
                if let (Some(book), Some(f)) = (check.as_mut(), fence) {
                    book.owner = book.owner.max(f);
                }
                Ok((own, check))
            }
        })
    }
}

impl BookStore for Shared {
    fn update(
        &self,
        task: TaskId,
        change: &mut dyn FnMut(&mut Option<StoredBook>) -> Result<(), Fenced>,
    ) -> Result<(), Fenced> {
        let key = book_key(self.me, self.run, task);
        let fence = fence_key(self.run, task);
        loop {
            let (own, mut book) = self.read_book(task);
            let before = book.clone();
            if let Err(fenced) = change(&mut book) {
                return Err(self.fenced_off(fenced));
            }
            let Some(new) = book.filter(|b| Some(b) != before.as_ref()) else {
                return Ok(());
            };
            let attempt = new.owner;
            // Attempt 1 of a worker writes while no fence exists; any other while the fence
            // names it.
            let named = self.first_fenced || attempt > 1;
            let guard = self
                .fences
                .guard(&fence, named.then_some(&attempt))
                .expect("an attempt number encodes");
            let version = own.map(|b| b.version);
            let books = self.books.clone();
            let outcome = self.call("writing an action book", || {
                let (books, key, new, guard) =
                    (books.clone(), key.clone(), new.clone(), guard.clone());
                async move { books.cas_guarded(&key, version, new, &guard).await }
            });
            match outcome {
                Guarded::Held(CasOutcome::Committed(_)) => return Ok(()),
                // Another write of this worker came between: read again and check again.
                Guarded::Held(CasOutcome::Conflict { .. }) => continue,
                Guarded::Unmet => {
                    let fences = self.fences.clone();
                    let owner = self.call("reading a fence", || {
                        let (fences, fence) = (fences.clone(), fence.clone());
                        async move { fences.get(&fence).await }
                    });
                    let owner = owner.map_or(u32::from(!self.first_fenced), |f| f.value);
                    return Err(self.fenced_off(Fenced {
                        task,
                        attempt,
                        owner,
                    }));
                }
            }
        }
    }
}

impl Shared {
    /// Counts and reports a refused write.
    fn fenced_off(&self, fenced: Fenced) -> Fenced {
        self.fenced.fetch_add(1, Ordering::Relaxed);
        eprintln!("quorate: {} {}: {fenced}", self.what, self.me);
        fenced
    }
}
