//! `quorate run --store FILE`, `runs`, `resume` and `show`: star runs kept in one redb file
//! (docs/durable.md, "Durable runs").
//!
//! The file holds, per run: its record (plan file text and path, when it started, the approvals
//! given, the final report once it stopped), its log of events, its accepted results (and
//! `[data]`), the actions its workers sent to tools and the effects the scripted world
//! committed. Every write is a durable commit made before the runtime acts on it (the hooks
//! [`RunJournal`] and [`ActionJournal`] block until it is on disk).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use quorate_coordinator::{Event, EventKind, RunJournal};
use quorate_protocols::RunId;
use quorate_state::{Commit, RedbDb, RedbLog, RedbStore, RunLog, Seq, Store, StoreError};
use quorate_workers::scripted::CommittedEffect;
use quorate_workers::{ActionIntent, ActionJournal};
use serde::{Deserialize, Serialize};

/// Test-only: after this many durable journal writes (events, results, intents, effects) the
/// process aborts, as a crash would end it. Used by `tests/durable_crash.rs`.
pub const CRASH_AFTER_WRITES: &str = "QUORATE_CRASH_AFTER_WRITES";

/// One approval answer given to a run (`--approve` of `run` or `resume`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalGiven {
    /// The `--approve` value.
    pub approve: String,
    /// When it was given (milliseconds since the Unix epoch).
    pub at_unix_ms: u64,
}

/// One top-up answer given to a run (`--grant` or `--reject` of `resume`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopUpGiven {
    /// The task.
    pub task: String,
    /// The answer.
    pub answer: quorate_coordinator::TopUp,
    /// When it was given (milliseconds since the Unix epoch).
    pub at_unix_ms: u64,
}

/// What the file keeps about one run besides its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub run_id: RunId,
    /// The plan file's path, as given.
    pub plan_path: String,
    /// The plan file's text (the run resumes from it, not from the path).
    pub plan_text: String,
    /// When the run started (milliseconds since the Unix epoch).
    pub started_unix_ms: u64,
    /// Approval answers given, in order.
    pub approvals: Vec<ApprovalGiven>,
    /// Top-up answers given, in order (the run log has the `top-up-decided` events of those
    /// that found their task waiting).
    #[serde(default)]
    pub top_ups: Vec<TopUpGiven>,
    /// The report (as `run --json` prints it) once the run stopped.
    pub report: Option<serde_json::Value>,
    /// Its exit code once it stopped.
    pub exit_code: Option<u8>,
}

impl RunRecord {
    /// The run's stop reason once it stopped.
    #[must_use]
    pub fn stop_reason(&self) -> Option<&str> {
        self.report.as_ref()?.get("stop_reason")?.as_str()
    }

    /// Its status as `runs` and `show` print it: its stop reason once it stopped,
    /// `interrupted` before (its process ended mid-run).
    #[must_use]
    pub fn status(&self) -> &str {
        self.stop_reason().unwrap_or("interrupted")
    }

    /// Whether `resume` may continue it: it never stopped (interrupted), or stopped waiting
    /// for an approval.
    #[must_use]
    pub fn resumable(&self) -> bool {
        matches!(self.stop_reason(), None | Some("waiting-approval"))
    }
}

/// The log a resumed run continues from: its kept `events`, less a final `run-stopped` (a
/// run that stopped waiting for an approval continues: its stop is taken back).
#[must_use]
pub fn resume_events(mut events: Vec<Event>) -> Vec<Event> {
    if matches!(
        events.last().map(|e| &e.kind),
        Some(EventKind::RunStopped { .. })
    ) {
        events.pop();
    }
    events
}

/// The store file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// Opening, reading or writing the file failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No run with this id is in the file.
    #[error("no run {run} in {path}")]
    UnknownRun {
        /// The id given.
        run: String,
        /// The file.
        path: PathBuf,
    },
    /// `--store` was given with a peer plan.
    #[error(
        "{path}: durable runs (--store) are star-only for now; this plan has topology = \"peer\""
    )]
    PeerPlan {
        /// The plan file.
        path: PathBuf,
    },
}

/// The store file's handles.
#[derive(Clone, Debug)]
pub struct RunStore {
    db: RedbDb,
    runs: RedbStore<RunRecord>,
    results: RedbStore<serde_json::Value>,
    /// The same table, written by the journal with deferred commits made durable by the flush
    /// of the events that follow them (group commit).
    results_deferred: RedbStore<serde_json::Value>,
    intents: RedbStore<ActionIntent>,
    events: RedbLog<Event>,
    effects: RedbLog<CommittedEffect>,
}

impl RunStore {
    /// Opens (or creates) the file.
    ///
    /// # Errors
    /// [`StoreError::File`]: it cannot be opened (missing directory, locked by another process).
    pub fn open(path: &Path) -> Result<Self, DurableError> {
        let db = RedbDb::open(path)?;
        Ok(Self {
            runs: db.store("runs"),
            results: db.store("results"),
            results_deferred: db.store("results").with_commit(Commit::Deferred),
            intents: db.store("intents"),
            events: db.log("events").with_commit(Commit::Deferred),
            effects: db.log("effects"),
            db,
        })
    }

    /// The file.
    #[must_use]
    pub fn path(&self) -> &Path {
        self.db.path()
    }

    /// Every run, oldest first.
    ///
    /// # Errors
    /// The read failed.
    pub fn runs(&self) -> Result<Vec<RunRecord>, DurableError> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .scan_now("")?
            .into_iter()
            .map(|(_, v)| v.value)
            .collect();
        runs.sort_by_key(|r| (r.started_unix_ms, r.run_id.to_string()));
        Ok(runs)
    }

    /// The run `id`.
    ///
    /// # Errors
    /// [`DurableError::UnknownRun`], or the read failed.
    pub fn run(&self, id: &str) -> Result<RunRecord, DurableError> {
        self.runs
            .get_now(id.trim())?
            .map(|v| v.value)
            .ok_or_else(|| DurableError::UnknownRun {
                run: id.to_string(),
                path: self.db.path().to_path_buf(),
            })
    }

    /// Writes `record` durably.
    ///
    /// # Errors
    /// The write failed.
    pub fn put_run(&self, record: &RunRecord) -> Result<(), DurableError> {
        let key = record.run_id.to_string();
        block(async {
            let current = self.runs.get(&key).await?.map(|v| v.version);
            // The file is locked to this process: nothing else writes the record.
            let _ = self.runs.cas(&key, current, record.clone()).await?;
            Ok::<_, StoreError>(())
        })?;
        Ok(())
    }

    /// The run's log, in order.
    ///
    /// # Errors
    /// The read failed.
    pub fn events(&self, run: RunId) -> Result<Vec<Event>, DurableError> {
        Ok(self
            .events
            .read_now(run, Seq(0), usize::MAX)?
            .into_iter()
            .map(|(_, e)| e)
            .collect())
    }

    /// The run's results (and `[data]`) by key.
    ///
    /// # Errors
    /// The read failed.
    pub fn results(&self, run: RunId) -> Result<Vec<(String, serde_json::Value)>, DurableError> {
        Ok(self
            .results
            .scan_now(&format!("{run}/"))?
            .into_iter()
            .map(|(k, v)| (k[run.to_string().len() + 1..].to_string(), v.value))
            .collect())
    }

    /// The actions the run's workers sent to tools.
    ///
    /// # Errors
    /// The read failed.
    pub fn intents(&self, run: RunId) -> Result<Vec<ActionIntent>, DurableError> {
        Ok(self
            .intents
            .scan_now(&format!("{run}/"))?
            .into_iter()
            .map(|(_, v)| v.value)
            .collect())
    }

    /// The effects the run's scripted world committed, in order.
    ///
    /// # Errors
    /// The read failed.
    pub fn effects(&self, run: RunId) -> Result<Vec<CommittedEffect>, DurableError> {
        Ok(self
            .effects
            .read_now(run, Seq(0), usize::MAX)?
            .into_iter()
            .map(|(_, e)| e)
            .collect())
    }

    /// Task states of `run` from its log (the last transition of each task).
    ///
    /// # Errors
    /// The read failed.
    pub fn task_states(&self, run: RunId) -> Result<BTreeMap<String, String>, DurableError> {
        let mut states = BTreeMap::new();
        for e in self.events(run)? {
            if let (Some(task), EventKind::Transition { to, .. }) = (&e.task, &e.kind) {
                states.insert(task.to_string(), to.to_string());
            }
        }
        Ok(states)
    }

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
            crash_after,
        }
    }
}

/// Runs `fut` to completion on a thread of its own (the runtime's threads are inside actix's
/// tokio runtime, where another runtime cannot block).
fn block<T: Send>(fut: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime starts")
                .block_on(fut)
        })
        .join()
        .expect("the journal thread does not panic")
    })
}

/// [`RunJournal`] and [`ActionJournal`] of one run on a [`RunStore`]. Events, intents and
/// effects are durable when their call returns; an accepted result is written with the next
/// events, in the same durable commit (the supervisor writes the events of an input before it
/// acts on any of them: group commit, one fsync per input rather than one per result). A write
/// that fails ends the process with exit code 8 (the runtime cannot go on without it).
#[derive(Debug)]
pub struct Journal {
    store: RunStore,
    run: RunId,
    /// One journal write at a time (their order is the order the runtime acted in).
    lock: Mutex<()>,
    /// Accepted results waiting for the next events (key in the file, value).
    results: Mutex<Vec<(String, serde_json::Value)>>,
    writes: AtomicU64,
    crash_after: Option<u64>,
}

impl Journal {
    fn write<F>(&self, count: u64, fut: F)
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
        let done = self.writes.fetch_add(count, Ordering::SeqCst) + count;
        if self.crash_after.is_some_and(|n| done >= n) {
            // Test-only crash point (CRASH_AFTER_WRITES).
            std::process::abort();
        }
    }
}

impl RunJournal for Journal {
    fn events(&self, events: &[Event]) {
        let results = std::mem::take(
            &mut *self
                .results
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let (log, store) = (&self.store.events, &self.store.results_deferred);
        let count = (results.len() + events.len()) as u64;
        self.write(count, async move {
            // The results (first writer wins, as in the run's own store) and the events, queued
            // together as deferred writes, then one durable commit for all of them: the writer
            // thread commits them in one transaction and one fsync.
            if !results.is_empty() {
                store
                    .cas_all(results.into_iter().map(|(k, v)| (k, None, v)))
                    .await?;
            }
            log.append_all(self.run, events).await?;
            log.flush().await
        });
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
        let intents = &self.store.intents;
        self.write(1, async move {
            match intents.get(&key).await? {
                Some(_) => Ok(()),
                None => intents.cas(&key, None, intent.clone()).await.map(|_| ()),
            }
        });
    }

    fn effect(&self, effect: &CommittedEffect) {
        let effects = &self.store.effects;
        self.write(1, async move {
            effects.append(self.run, effect.clone()).await.map(|_| ())
        });
    }
}

/// Milliseconds since the Unix epoch.
#[must_use]
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(report: Option<serde_json::Value>) -> RunRecord {
        RunRecord {
            run_id: RunId::from_u128(1),
            plan_path: "plan.toml".into(),
            plan_text: String::new(),
            started_unix_ms: 0,
            approvals: Vec::new(),
            top_ups: Vec::new(),
            report,
            exit_code: None,
        }
    }

    #[test]
    fn an_interrupted_or_approval_waiting_run_resumes_a_stopped_one_does_not() {
        let interrupted = record(None);
        assert_eq!(interrupted.status(), "interrupted");
        assert!(interrupted.resumable());

        let waiting = record(Some(
            serde_json::json!({ "stop_reason": "waiting-approval" }),
        ));
        assert_eq!(waiting.status(), "waiting-approval");
        assert!(waiting.resumable());

        for reason in [
            "completed",
            "failed",
            "stopped-limit",
            "deadline",
            "cancelled",
        ] {
            let stopped = record(Some(serde_json::json!({ "stop_reason": reason })));
            assert_eq!(stopped.status(), reason);
            assert!(!stopped.resumable(), "{reason}");
        }
    }

    fn event(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            run_id: RunId::from_u128(1),
            peer: None,
            task: None,
            at_ms: 0,
            kind,
        }
    }

    #[test]
    fn a_resumed_run_continues_without_its_final_stop() {
        let started = event(
            0,
            EventKind::RunStarted {
                tasks: 1,
                plan_version: 1,
                nodes: Vec::new(),
            },
        );
        let stopped = event(
            1,
            EventKind::RunStopped {
                stop_reason: "waiting-approval".into(),
            },
        );
        assert_eq!(
            resume_events(vec![started.clone(), stopped]),
            std::slice::from_ref(&started)
        );
        // An interrupted run's log has no stop to take back: nothing is dropped.
        assert_eq!(resume_events(vec![started.clone()]), [started]);
        assert!(resume_events(Vec::new()).is_empty());
    }
}
