//! Trace events: every decision the supervisor makes, in order.

use quorate_protocols::{RunId, TaskState};
use serde::{Deserialize, Serialize};

/// Why a reply was not accepted. Each is counted separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rejection {
    /// The dedupe key was seen before.
    Duplicate,
    /// The task is terminal, or the reply names an attempt that is over.
    Late,
    /// The reply names a state version that is no longer current.
    Stale,
    /// The sender is not the agent the attempt was assigned to, or has the wrong role, or the
    /// reply is for another run or an unknown task.
    Unauthorized,
}

/// What happened. Serialized as the `kind` field of a trace line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EventKind {
    /// The run started with this plan version.
    RunStarted {
        /// Number of tasks.
        tasks: usize,
        /// Plan version.
        plan_version: u32,
    },
    /// A task changed state.
    Transition {
        /// Old state.
        from: TaskState,
        /// New state.
        to: TaskState,
    },
    /// A task was sent to a worker.
    Dispatched {
        /// Attempt number.
        attempt: u32,
        /// Worker index.
        worker: usize,
        /// The task's id (stable across attempts and across a resume: action ids derive from it).
        task_id: quorate_protocols::TaskId,
        /// The budget slice granted to the task.
        granted: quorate_protocols::Budget,
    },
    /// A task's budget account was closed with what it spent; the rest returned to the root.
    TaskClosed {
        /// What the task spent.
        spent: quorate_protocols::Budget,
    },
    /// The supervisor was rebuilt from the run log and continues the run.
    RunResumed {
        /// Events replayed.
        replayed: u64,
        /// Attempts in flight at the crash, dispatched again.
        redispatched: usize,
    },
    /// A reply was accepted.
    ReplyAccepted,
    /// The worker's execution gate refused a proposed call (nothing ran).
    CallRejected {
        /// The tool the agent asked for.
        tool: String,
        /// Why.
        reason: String,
    },
    /// A reply was rejected.
    ReplyRejected {
        /// Why.
        reason: Rejection,
    },
    /// The acceptance check refused a result.
    AcceptanceFailed {
        /// The first failing check.
        observation: String,
    },
    /// A result was merged into the store.
    ResultCommitted,
    /// Approval was requested.
    ApprovalRequested {
        /// Why.
        reason: String,
    },
    /// A human decided.
    ApprovalDecided {
        /// Approved or not.
        approved: bool,
    },
    /// The whole run was cancelled.
    CancelRequested,
    /// Budget could not be delegated.
    BudgetRefused {
        /// The ledger's message.
        detail: String,
    },
    /// A new plan version replaced the old one.
    Replanned {
        /// The new version.
        plan_version: u32,
        /// Tasks in it.
        tasks: usize,
    },
    /// A store precondition did not hold.
    PreconditionFailed {
        /// What was observed.
        observation: String,
    },
    /// The run is stopping for `reason`: live tasks are being cancelled; `run-stopped` follows
    /// once they are all terminal.
    StopRequested {
        /// Why.
        reason: crate::StopReason,
    },
    /// The run ended.
    RunStopped {
        /// Why.
        stop_reason: String,
    },
}

impl EventKind {
    /// The `kind` name as written in the trace.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "run-started",
            EventKind::Transition { .. } => "transition",
            EventKind::Dispatched { .. } => "dispatched",
            EventKind::TaskClosed { .. } => "task-closed",
            EventKind::RunResumed { .. } => "run-resumed",
            EventKind::ReplyAccepted => "reply-accepted",
            EventKind::CallRejected { .. } => "call-rejected",
            EventKind::ReplyRejected { .. } => "reply-rejected",
            EventKind::AcceptanceFailed { .. } => "acceptance-failed",
            EventKind::ResultCommitted => "result-committed",
            EventKind::ApprovalRequested { .. } => "approval-requested",
            EventKind::ApprovalDecided { .. } => "approval-decided",
            EventKind::CancelRequested => "cancel-requested",
            EventKind::BudgetRefused { .. } => "budget-refused",
            EventKind::Replanned { .. } => "replanned",
            EventKind::PreconditionFailed { .. } => "precondition-failed",
            EventKind::StopRequested { .. } => "stop-requested",
            EventKind::RunStopped { .. } => "run-stopped",
        }
    }
}

/// One line of the trace (JSONL) and one entry of the run log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Strictly increasing within a run.
    pub seq: u64,
    /// The run.
    pub run_id: RunId,
    /// The task's node id, or `None` for run-level events.
    pub task: Option<std::sync::Arc<str>>,
    /// Milliseconds since the run started (virtual in simulations).
    pub at_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}
