//! Why the supervisor core refused an input ([`InputRefused`]), and why the reply rules
//! refused a reply ([`ReplyRefusal`]). A refused input changes nothing but the counters and
//! the trace (a rejected reply is counted and recorded as before); the error says which input
//! it was and why, so a shell can count or log it and a test can name it.

use quorate_protocols::{AgentId, DedupeKey, Role, RunId, TaskId, TaskState, Version};

use crate::event::Rejection;
use crate::StopReason;

/// An input the supervisor core did not act on. No retry of the same input can help: the
/// core's state decides, and it only moves on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputRefused {
    /// The run stopped and its final report took the task records: no input is handled any
    /// more.
    #[error("the run is over and its report was taken; no input is handled")]
    Finished,
    /// The run has stopped; the input came after (a reply of a batch behind the one that
    /// stopped the run, a cancel).
    #[error("the run has stopped ({reason})")]
    Stopped {
        /// Why it stopped.
        reason: StopReason,
    },
    /// A worker's reply the reply rules refused; it was counted as rejected (and recorded).
    #[error("reply for task {task} refused: {why}")]
    Reply {
        /// The task the reply names.
        task: TaskId,
        /// Which rule refused it.
        why: ReplyRefusal,
    },
    /// A node index outside the plan.
    #[error("node {node} is not in the plan ({nodes} nodes)")]
    UnknownNode {
        /// The index given.
        node: u32,
        /// Nodes of the current plan.
        nodes: usize,
    },
    /// A worker index outside the run's workers (a liveness input).
    #[error("worker {worker} is not one of the run's {workers} workers")]
    UnknownWorker {
        /// The index given.
        worker: usize,
        /// Workers of the run.
        workers: usize,
    },
    /// An approval decision for a task that is not waiting for one.
    #[error("node {node} is not waiting for approval (it is {state})")]
    NotWaiting {
        /// The node.
        node: u32,
        /// Its state.
        state: TaskState,
    },
    /// An approval decision for a task that waits for a budget top-up, not for an approval.
    #[error("node {node} waits for a budget top-up, not an approval (answer it with a grant or a reject)")]
    WaitingTopUp {
        /// The node.
        node: u32,
    },
    /// A precondition answer to an older plan version's check (a replan renumbered the
    /// nodes and asked again).
    #[error("precondition answer for plan version {asked}; the plan is at version {current}")]
    StalePlanVersion {
        /// The version that asked.
        asked: u32,
        /// The current version.
        current: u32,
    },
    /// A precondition answer no check awaits (answered already, or never asked).
    #[error("no precondition check of node {node} is awaited")]
    NotChecking {
        /// The node.
        node: u32,
    },
    /// An answer for a task that ended meanwhile.
    #[error("node {node} already ended ({state})")]
    AfterTerminal {
        /// The node.
        node: u32,
        /// Its terminal state.
        state: TaskState,
    },
    /// An answer naming a task that is not in the plan (a replan dropped it).
    #[error("task {task} is not in the plan")]
    UnknownTask {
        /// The task.
        task: TaskId,
    },
    /// A result-commit answer no commit of the task awaits (answered already, or never asked).
    #[error("no result commit of task {task} is awaited")]
    NotCommitting {
        /// The task.
        task: TaskId,
    },
    /// A cancel while a stop is under way: the run stops for its first cause.
    #[error("the run is stopping already ({reason})")]
    AlreadyStopping {
        /// The first cause.
        reason: StopReason,
    },
    /// A cancel that finds nothing left to run (every task ended): the run ends as its tasks
    /// did.
    #[error("nothing to cancel: every task ended")]
    NothingToCancel,
}

/// Which reply rule refused a reply, in the order the rules run: the reply's run, its dedupe
/// key, its task's state, its attempt, its sender, its state version.
/// [`rejection`](Self::rejection) is the counter it goes to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplyRefusal {
    /// The reply belongs to another run (a replay of an earlier run's envelope: counted as
    /// stale).
    #[error("it belongs to run {found}, not {expected}")]
    WrongRun {
        /// This run.
        expected: RunId,
        /// The reply's.
        found: RunId,
    },
    /// No task of the run has this id.
    #[error("no task of the run has this id")]
    UnknownTask,
    /// Its task was dropped by a replan.
    #[error("its task was dropped by a replan")]
    Dropped,
    /// Its dedupe key was accepted before.
    #[error("dedupe key {dedupe} was seen before")]
    Duplicate {
        /// The key.
        dedupe: DedupeKey,
    },
    /// Its task already ended.
    #[error("its task already ended ({state})")]
    AfterTerminal {
        /// The task's terminal state.
        state: TaskState,
    },
    /// Its task's end is decided although its state may not say so yet (peer mode: its
    /// terminal record is committed; a task parked for a human).
    #[error("its task is settled ({state})")]
    Settled {
        /// The task's state in this core.
        state: TaskState,
    },
    /// It answers an earlier attempt.
    #[error("it names attempt {found}; the task is at attempt {current}")]
    OldAttempt {
        /// The task's attempt.
        current: u32,
        /// The reply's.
        found: u32,
    },
    /// It does not come from the worker the attempt was assigned to (or not from a worker).
    #[error("sent by {role:?} {agent}, not by the worker assigned")]
    WrongSender {
        /// The stamped sender.
        agent: AgentId,
        /// Its role.
        role: Role,
    },
    /// It acted on an older state version of the task.
    #[error("it acted on state version {found}; the task is at {current}")]
    StaleVersion {
        /// The task's version.
        current: Version,
        /// The reply's.
        found: Version,
    },
    /// Its task is not running (pending or ready again).
    #[error("its task is not running ({state})")]
    NotRunning {
        /// The task's state.
        state: TaskState,
    },
}

impl ReplyRefusal {
    /// The counter (and trace event) a reply refused for this goes to.
    #[must_use]
    pub fn rejection(&self) -> Rejection {
        match self {
            // An envelope of another run is a replay of an earlier run's (in one process the
            // runtime stamps each run's envelopes; across processes the transport authenticated
            // its sender already): stale, as a reply acting on an older state version.
            ReplyRefusal::WrongRun { .. } => Rejection::Stale,
            ReplyRefusal::UnknownTask | ReplyRefusal::WrongSender { .. } => Rejection::Unauthorized,
            ReplyRefusal::Duplicate { .. } => Rejection::Duplicate,
            ReplyRefusal::Dropped
            | ReplyRefusal::AfterTerminal { .. }
            | ReplyRefusal::Settled { .. }
            | ReplyRefusal::OldAttempt { .. }
            | ReplyRefusal::NotRunning { .. } => Rejection::Late,
            ReplyRefusal::StaleVersion { .. } => Rejection::Stale,
        }
    }
}
