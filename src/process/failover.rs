//! Worker processes that share the store of record (`quorate worker --store etcd://...`, cargo
//! features `etcd` and `nats`): the scripted world's effects and the tasks' action books live on
//! the etcd cluster, so an action commits once across every worker process and a worker that
//! takes a task over reads what the lost one committed (docs/distributed.md, "A lost worker").
//!
//! Keys, below the etcd URL's prefix (`/PREFIX/kv/...`, see `quorate_state::Etcd`):
//!
//! ```text
//! world/RUN/TASK/STEP/VERSION            the effect committed under that action (StoredEffect)
//! world/RUN/TASK/STEP/VERSION/again/N    a non-idempotent tool called again: a duplicate
//! books/RUN/TASK                         the task's action book (StoredBook), fenced by attempt
//! ```
//!
//! An effect is an etcd create (`create_revision == 0`); a book write is a transaction on the
//! key's `mod_revision` whose new value passed `StoredBook::write`'s (or `claim`'s) check against
//! the value read at that revision.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorate_protocols::{ActionId, AgentId, RunId, TaskId};
use quorate_state::{CasOutcome, Etcd, EtcdStore, Store, StoreError, Versioned};
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

/// The key of `task`'s book in run `run` (in the `books` store).
#[must_use]
pub fn book_key(run: RunId, task: TaskId) -> String {
    format!("{run}/{task}")
}

/// The store-backed world and books of one worker process.
#[derive(Clone, Debug)]
pub struct Shared {
    world: EtcdStore<StoredEffect>,
    books: EtcdStore<StoredBook>,
    run: RunId,
    me: AgentId,
    handle: tokio::runtime::Handle,
    fenced: Arc<AtomicU64>,
}

impl Shared {
    /// The world and books of worker `me` of run `run` on `etcd`; store calls run on `handle`'s
    /// runtime (the caller waits on a channel: it may be inside actix's runtime).
    #[must_use]
    pub fn new(etcd: &Etcd, run: RunId, me: AgentId, handle: tokio::runtime::Handle) -> Self {
        Self {
            world: etcd.store("world"),
            books: etcd.store("books"),
            run,
            me,
            handle,
            fenced: Arc::new(AtomicU64::new(0)),
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
                    "quorate: worker {}: {what}: {error}; giving up after {GIVE_UP:?}",
                    self.me
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

impl BookStore for Shared {
    fn update(
        &self,
        task: TaskId,
        change: &mut dyn FnMut(&mut Option<StoredBook>) -> Result<(), Fenced>,
    ) -> Result<(), Fenced> {
        let key = book_key(self.run, task);
        loop {
            let books = self.books.clone();
            let current = self.call("reading an action book", || {
                let (books, key) = (books.clone(), key.clone());
                async move { books.get(&key).await }
            });
            let (mut book, version) = match current {
                Some(Versioned { value, version }) => (Some(value), Some(version)),
                None => (None, None),
            };
            let before = book.clone();
            if let Err(fenced) = change(&mut book) {
                self.fenced.fetch_add(1, Ordering::Relaxed);
                eprintln!("quorate: worker {}: {fenced}", self.me);
                return Err(fenced);
            }
            let Some(new) = book.filter(|b| Some(b) != before.as_ref()) else {
                return Ok(());
            };
            let outcome = self.call("writing an action book", || {
                let (books, key, new) = (books.clone(), key.clone(), new.clone());
                async move { books.cas(&key, version, new).await }
            });
            match outcome {
                CasOutcome::Committed(_) => return Ok(()),
                // Another writer came between: read again and check again.
                CasOutcome::Conflict { .. } => continue,
            }
        }
    }
}
