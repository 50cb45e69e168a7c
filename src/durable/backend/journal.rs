//! The [`Journal`] of one run on a [`RunStore`]: the hooks the runtime writes the run through,
//! each a durable write (with the etcd retries of module `retry`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use quorate_coordinator::{Event, RunJournal};
use quorate_protocols::RunId;
use quorate_state::{RunLog, Store, StoreError};
use quorate_workers::scripted::CommittedEffect;
use quorate_workers::{ActionIntent, ActionJournal};

#[cfg(feature = "etcd")]
use super::retry;
use super::{block, Backend, RunStore};
use crate::durable::CRASH_AFTER_WRITES;

impl RunStore {
    /// The journal the runtime writes `run` through.
    #[must_use]
    pub fn journal(&self, run: RunId) -> Journal {
        let crash_after = std::env::var(CRASH_AFTER_WRITES)
            .ok()
            .and_then(|n| n.parse().ok());
        Journal {
            store: self.clone(),
            run,
            lock: Mutex::new(()),
            results: Mutex::new(Vec::new()),
            writes: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            retried: AtomicU64::new(0),
            #[cfg(feature = "etcd")]
            event_tail: retry::Tail::new(),
            #[cfg(feature = "etcd")]
            effect_tail: retry::Tail::new(),
            crash_after,
        }
    }
}

/// [`RunJournal`] and [`ActionJournal`] of one run on a [`RunStore`]. Events, intents and
/// effects are durable when their call returns; an accepted result is written with the next
/// events (the supervisor writes the events of an input before it acts on any of them: group
/// commit, one fsync per input rather than one per result). In a redb file the results and the
/// events are one commit; on etcd the results are one transaction made before the events' (a
/// crash between them leaves a result without the events of its completion: the resumed run
/// sends the task again, and its new result loses to the kept one, first writer wins). On etcd
/// a write the cluster left unanswered (a lost member) is made again, safely (module `retry`);
/// a write that fails for good ends the process with exit code 8 (the runtime cannot go on
/// without it).
#[derive(Debug)]
pub struct Journal {
    store: RunStore,
    run: RunId,
    /// One journal write at a time (their order is the order the runtime acted in).
    lock: Mutex<()>,
    /// Accepted results waiting for the next events (key in the store, value).
    results: Mutex<Vec<(String, serde_json::Value)>>,
    writes: AtomicU64,
    commits: AtomicU64,
    /// Writes made again after the store did not answer (etcd: a lost leader).
    retried: AtomicU64,
    /// Where this run's next event goes (etcd).
    #[cfg(feature = "etcd")]
    event_tail: retry::Tail,
    /// Where this run's next effect goes (etcd).
    #[cfg(feature = "etcd")]
    effect_tail: retry::Tail,
    crash_after: Option<u64>,
}

impl Journal {
    /// Records written so far (events, results, intents, effects).
    #[must_use]
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Writes made again after the store did not answer in time (on etcd: a member, usually the
    /// leader, was lost with the write in flight; the retry cannot apply it twice).
    #[must_use]
    pub fn retried(&self) -> u64 {
        self.retried.load(Ordering::SeqCst)
    }

    /// Durable commits made so far: redb commits (one fsync each), or etcd transactions.
    #[must_use]
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    fn write<F>(&self, count: u64, commits: u64, fut: F)
    where
        F: std::future::Future<Output = Result<(), StoreError>> + Send,
    {
        let _one = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = block(fut) {
            eprintln!("quorate: the run's store failed: {e}");
            std::process::exit(i32::from(quorate_coordinator::StopReason::EXIT_RUNTIME));
        }
        self.commits.fetch_add(commits, Ordering::SeqCst);
        let done = self.writes.fetch_add(count, Ordering::SeqCst) + count;
        if self.crash_after.is_some_and(|n| done >= n) {
            // Test-only crash point (CRASH_AFTER_WRITES).
            std::process::abort();
        }
    }
}

/// Transactions of an etcd batch of `n` writes (at most 100 per transaction).
#[cfg(feature = "etcd")]
fn batches(n: usize) -> u64 {
    n.div_ceil(100) as u64
}

impl RunJournal for Journal {
    fn events(&self, events: &[Event]) {
        let results = std::mem::take(
            &mut *self
                .results
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let count = (results.len() + events.len()) as u64;
        let run = self.run;
        match &self.store.backend {
            Backend::Redb {
                events: log,
                results_deferred: store,
                ..
            } => self.write(count, 1, async move {
                // The results (first writer wins, as in the run's own store) and the events,
                // queued together as deferred writes, then one durable commit for all of them:
                // the writer thread commits them in one transaction and one fsync.
                if !results.is_empty() {
                    store
                        .cas_all(results.into_iter().map(|(k, v)| (k, None, v)))
                        .await?;
                }
                log.append_all(run, events).await?;
                log.flush().await
            }),
            #[cfg(feature = "etcd")]
            Backend::Etcd {
                events: log,
                results: store,
                ..
            } => {
                let commits = batches(results.len()) + batches(events.len());
                let tail = &self.event_tail;
                self.write(
                    count,
                    commits,
                    retry::retrying(&self.retried, move |n| {
                        let results = results.clone();
                        async move {
                            // Results first (creates: first writer wins, so a retry writes
                            // none twice), then the events: each batch is one transaction,
                            // committed by the cluster when it answers.
                            if !results.is_empty() {
                                store
                                    .cas_all(results.into_iter().map(|(k, v)| (k, None, v)))
                                    .await?;
                            }
                            tail.append(log, run, events, n > 0).await
                        }
                    }),
                );
            }
        }
    }

    fn result(&self, key: &str, value: &serde_json::Value) {
        // Written with the next events: the supervisor calls `events` before it acts on it.
        self.results
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((format!("{}/{key}", self.run), value.clone()));
    }
}

impl ActionJournal for Journal {
    fn intent(&self, intent: &ActionIntent) {
        let a = intent.action;
        let key = format!("{}/{}/{}/{}", self.run, a.task, a.step, a.intent_version);
        match &self.store.backend {
            Backend::Redb { intents, .. } => self.write(1, 1, async move {
                match intents.get(&key).await? {
                    Some(_) => Ok(()),
                    None => intents.cas(&key, None, intent.clone()).await.map(|_| ()),
                }
            }),
            // One round trip: a create that finds the intent kept already changes nothing (a
            // retry after a commit finds its own intent: done).
            #[cfg(feature = "etcd")]
            Backend::Etcd { intents, .. } => {
                let key = &key;
                self.write(
                    1,
                    1,
                    retry::retrying(&self.retried, move |_| async move {
                        intents.cas(key, None, intent.clone()).await.map(|_| ())
                    }),
                );
            }
        }
    }

    fn effect(&self, effect: &CommittedEffect) {
        let run = self.run;
        match &self.store.backend {
            Backend::Redb { effects, .. } => self.write(1, 1, async move {
                effects.append(run, effect.clone()).await.map(|_| ())
            }),
            #[cfg(feature = "etcd")]
            Backend::Etcd { effects, .. } => {
                let tail = &self.effect_tail;
                self.write(
                    1,
                    1,
                    retry::retrying(&self.retried, move |n| async move {
                        tail.append(effects, run, std::slice::from_ref(effect), n > 0)
                            .await
                    }),
                );
            }
        }
    }
}
