//! `quorate run --store STORE`, `runs`, `resume` and `show`: runs (star or peer) kept in one redb file
//! (docs/durable.md, "Durable runs") or, with the cargo feature `etcd`, on an etcd cluster
//! (`--store etcd://HOST:PORT/PREFIX`, docs/distributed.md).
//!
//! The store holds, per run: its record (plan file text and path, when it started, the approvals
//! given, the final report once it stopped), its log of events, its accepted results (and
//! `[data]`), the actions its workers sent to tools and the effects the scripted world
//! committed. Every write is a durable commit made before the runtime acts on it (the hooks
//! `RunJournal` and `ActionJournal` of [`Journal`] block until it is on disk, or committed
//! by the etcd cluster).

mod backend;

use quorate_coordinator::{Event, EventKind};
use quorate_protocols::{AgentId, RunId};
use quorate_state::StoreError;
use serde::{Deserialize, Serialize};

#[cfg(feature = "etcd")]
pub use backend::connect_etcd;
pub use backend::{Journal, RunStore, StoreAt, StoreAtError};

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
    /// A run whose supervisor is a process of its own over NATS (`run --nats`): the ids its
    /// workers know it by; absent for a run in one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<ProcessRecord>,
}

/// Who takes part in a run split into processes over NATS (`run --nats ... --remote-workers
/// N --store ...`), kept so that `resume --nats` brings back a supervisor its workers still
/// recognise: the same agent id (their consumers accept envelopes from it only), the same
/// workers in the same order (the log names a task's worker by position).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// The supervisor's agent id.
    pub supervisor: AgentId,
    /// The workers' agent ids, in registration order.
    pub workers: Vec<AgentId>,
    /// The plan roles each worker serves (`quorate worker --roles`), in the same order; empty
    /// (as in a record written before roles existed): every worker serves every role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Vec<String>>,
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

/// The store (file or etcd cluster) could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// Opening, reading or writing the store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No run with this id is in the store.
    #[error("no run {run} in {store}")]
    UnknownRun {
        /// The id given.
        run: String,
        /// The store (its file, or its etcd URL).
        store: String,
    },
    /// The etcd connection was refused before a request: plaintext without
    /// `--allow-plaintext`, an unreadable certificate or key.
    #[cfg(feature = "etcd")]
    #[error(transparent)]
    Connect(quorate_state::EtcdConnectError),
    /// A run whose supervisor ran as a process over NATS, resumed without `--nats`: its
    /// workers are processes of their own, not to be started again here.
    #[error("run {run}'s supervisor ran over NATS with {workers} worker processes; resume it with --nats URL --remote-workers {workers}")]
    ProcessRun {
        /// The run.
        run: RunId,
        /// Its worker processes.
        workers: usize,
    },
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
            processes: None,
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
