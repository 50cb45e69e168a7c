//! Trace events: every decision the supervisor makes, in order.

use quorate_protocols::{RunId, TaskState};
use quorate_workers::CallEvent;
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

/// A control that ends a worker's attempt (and that the worker acknowledges).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopControl {
    /// Stop working on the task.
    Cancel,
    /// The call parked for approval was rejected; the task is cancelled.
    Reject,
}

/// A plan node as `run-started` and `replanned` describe it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanNode {
    /// The node id.
    pub id: quorate_protocols::NodeId,
    /// The nodes it depends on.
    #[serde(default)]
    pub deps: Vec<quorate_protocols::NodeId>,
}

impl PlanNode {
    /// Every node of `plan`, in plan order.
    #[must_use]
    pub fn all(plan: &quorate_protocols::Plan) -> Vec<PlanNode> {
        (0..plan.len() as u32)
            .map(|i| {
                let node = plan.node(i);
                PlanNode {
                    id: node.id.clone(),
                    deps: node.deps.clone(),
                }
            })
            .collect()
    }
}

/// What happened. Serialized as the `kind` field of a trace line.
///
/// Serde's derive writes and reads every kind but [`EventKind::Call`], whose line is its
/// [`CallEvent`]'s own (see the `Serialize` and `Deserialize` impls below).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", remote = "Self")]
pub enum EventKind {
    /// The run started with this plan version.
    RunStarted {
        /// Number of tasks.
        tasks: usize,
        /// Plan version.
        plan_version: u32,
        /// The plan's nodes and their dependencies, when the run describes its plan (a traced
        /// run does; see [`SupervisorCore::set_describe_plan`](crate::SupervisorCore::set_describe_plan));
        /// else empty and left out of the trace line.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nodes: Vec<PlanNode>,
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
    /// A task that never reported, or whose worker was told to stop (its attempt may still
    /// spend), is charged its whole slice here; `task-settled` corrects that once its worker
    /// acknowledges.
    TaskClosed {
        /// What the task spent.
        spent: quorate_protocols::Budget,
    },
    /// A closed task's worker acknowledged its cancel with what the attempt spent: the task's
    /// charge becomes that (within its slice), and the difference from `task-closed`'s whole
    /// slice goes back to the root.
    TaskSettled {
        /// What the task spent, as its worker reported it.
        spent: quorate_protocols::Budget,
    },
    /// The worker of a running task was told to stop (`cancel`), or that the call it parked
    /// for approval was rejected (`reject`); the attempt's final reply acknowledges it.
    ControlSent {
        /// What the worker was told.
        control: StopControl,
    },
    /// The worker acknowledged a `control-sent` with its attempt's final reply, reporting what
    /// the attempt spent. A plain acknowledgement (`cancelled`) is counted as such; a final
    /// reply that is an answer crossed the control and is also rejected as late.
    ControlAcknowledged {
        /// What the attempt spent, as the worker reported it.
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
    /// A reply was rejected: its dedupe key was seen before. (The four rejections are kinds
    /// of their own, named for the reason, like the report's `rejected_*` counters; see
    /// [`EventKind::rejected`].)
    RejectedDuplicate,
    /// A reply was rejected: its task is terminal or its attempt is over.
    RejectedLate,
    /// A reply was rejected: it names a state version that is no longer current.
    RejectedStale,
    /// A reply was rejected: wrong sender, wrong role, another run or an unknown task.
    RejectedUnauthorized,
    /// The acceptance check refused a result.
    AcceptanceFailed {
        /// The first failing check.
        observation: String,
    },
    /// A reply claimed to be a verified conclusion, but its citations did not resolve to what
    /// the runtime recorded for the attempt: it is taken as a suggestion, and the task's
    /// acceptance decides on that (docs/reliability.md).
    ConclusionDowngraded {
        /// Why: what was cited that the record does not hold, or that nothing was cited.
        reason: String,
    },
    /// A result was merged into the store.
    ResultCommitted {
        /// The result.
        result: quorate_protocols::Payload,
    },
    /// The store already held a result for the task (committed before, e.g. by this run
    /// before a crash): the stored one is kept, never overwritten, and becomes the task's
    /// result, which its dependents get.
    ResultKept {
        /// The stored result's version.
        version: u64,
        /// Whether it equals the result the task had just produced.
        same: bool,
        /// The stored result, which the task keeps.
        #[serde(default)]
        result: quorate_protocols::Payload,
    },
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
    /// The task ran out of its slice and, as its node says `on_exhausted = "ask"`, waits for a
    /// person to grant it a top-up (or to reject it).
    TopUpRequested {
        /// What it asks for (boxed: the request is larger than every other event, and every
        /// event moves through the effect queue at the size of the largest).
        request: Box<crate::TopUpRequest>,
    },
    /// A person answered the task's top-up request: a grant (how much) or a rejection.
    TopUpDecided {
        /// The answer.
        answer: crate::TopUp,
    },
    /// The whole run was cancelled.
    CancelRequested,
    /// The budget ledger refused: a slice could not be delegated (the run stops), or a closed
    /// task's slice could not be taken back.
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
        /// Its nodes and their dependencies, as in `run-started`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nodes: Vec<PlanNode>,
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
    /// A model call's message, options or output (`digest`, `content`), logged once per run,
    /// right before the first call event that names its digest (boxed: events are small).
    Blob(Box<quorate_protocols::wire::Blob>),
    /// A step of a tool call's life, as the worker core decided it (the gate refused a call,
    /// the call went to its tool, the tool answered, ...): the trace line is the
    /// [`CallEvent`]'s own (`call-started`, `call-answered`, `outcome-unknown`, `queried`,
    /// `recovered`, `retried`, `answered-from-record`, `call-rejected`, `call-aborted`). These come with the reply that followed them
    /// (see [`quorate_protocols::wire::Report::calls`]) and are logged in the order the
    /// worker took them, before that reply's own events. A call's `action` names the task that
    /// made it (a delegated sub-task's id for a sub-task's call). Boxed: every event is as
    /// large as its largest kind, and these are rare.
    #[serde(skip)]
    Call(Box<CallEvent>),
}

impl Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            EventKind::Call(call) => call.serialize(serializer),
            other => EventKind::serialize(other, serializer),
        }
    }
}

impl<'de> Deserialize<'de> for EventKind {
    /// A call event, or any other kind by the derive. The line is buffered by serde (the
    /// durable store's CBOR holds ids as bytes, which a JSON value cannot), so a line that is
    /// neither is named by its kind: an unknown kind, or a known one with a bad field.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        /// The readings tried in turn.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Line {
            Call(Box<CallEvent>),
            Other(#[serde(deserialize_with = "EventKind::deserialize")] EventKind),
            Bad { kind: Option<String> },
        }
        match Line::deserialize(deserializer)? {
            Line::Call(call) => Ok(EventKind::Call(call)),
            Line::Other(kind) => Ok(kind),
            Line::Bad { kind: None } => Err(D::Error::missing_field("kind")),
            Line::Bad { kind: Some(kind) } if KIND_NAMES.contains(&kind.as_str()) => {
                Err(D::Error::custom(format_args!(
                    "a `{kind}` event with a field missing or of the wrong type"
                )))
            }
            Line::Bad { kind: Some(kind) } => Err(D::Error::unknown_variant(&kind, &KIND_NAMES)),
        }
    }
}

/// Every `kind` name as written in the trace, in [`EventKind::index`] order.
pub(crate) const KIND_NAMES: [&str; 37] = [
    "run-started",
    "transition",
    "dispatched",
    "task-closed",
    "run-resumed",
    "reply-accepted",
    "call-rejected",
    "rejected-duplicate",
    "acceptance-failed",
    "result-committed",
    "approval-requested",
    "approval-decided",
    "cancel-requested",
    "budget-refused",
    "replanned",
    "precondition-failed",
    "stop-requested",
    "run-stopped",
    "task-settled",
    "control-sent",
    "control-acknowledged",
    "result-kept",
    "rejected-late",
    "rejected-stale",
    "rejected-unauthorized",
    "call-started",
    "call-answered",
    "outcome-unknown",
    "queried",
    "recovered",
    "retried",
    "top-up-requested",
    "top-up-decided",
    "call-aborted",
    "blob",
    "answered-from-record",
    "conclusion-downgraded",
];

impl EventKind {
    /// The trace event of a step of a call's life that a worker reported.
    ///
    /// ```
    /// use quorate_coordinator::EventKind;
    /// use quorate_protocols::{ActionId, TaskId};
    /// use quorate_workers::CallEvent;
    /// let action = ActionId::new(TaskId::from_u128(7), 0, 0);
    /// let kind = EventKind::of_call(CallEvent::OutcomeUnknown { action });
    /// assert_eq!(kind.name(), "outcome-unknown");
    /// let line = serde_json::to_string(&kind).unwrap();
    /// assert_eq!(serde_json::from_str::<EventKind>(&line).unwrap(), kind);
    /// ```
    #[must_use]
    pub fn of_call(call: CallEvent) -> Self {
        EventKind::Call(Box::new(call))
    }

    /// The event of a reply rejected for `reason`.
    ///
    /// ```
    /// use quorate_coordinator::{EventKind, Rejection};
    /// let late = EventKind::rejected(Rejection::Late);
    /// assert_eq!(late.name(), "rejected-late");
    /// assert_eq!(late.rejection(), Some(Rejection::Late));
    /// assert_eq!(EventKind::ReplyAccepted.rejection(), None);
    /// ```
    #[must_use]
    pub fn rejected(reason: Rejection) -> Self {
        match reason {
            Rejection::Duplicate => EventKind::RejectedDuplicate,
            Rejection::Late => EventKind::RejectedLate,
            Rejection::Stale => EventKind::RejectedStale,
            Rejection::Unauthorized => EventKind::RejectedUnauthorized,
        }
    }

    /// Why the reply was rejected, if this is a rejection.
    #[must_use]
    pub fn rejection(&self) -> Option<Rejection> {
        match self {
            EventKind::RejectedDuplicate => Some(Rejection::Duplicate),
            EventKind::RejectedLate => Some(Rejection::Late),
            EventKind::RejectedStale => Some(Rejection::Stale),
            EventKind::RejectedUnauthorized => Some(Rejection::Unauthorized),
            _ => None,
        }
    }

    /// The `kind` name as written in the trace.
    #[must_use]
    pub fn name(&self) -> &'static str {
        KIND_NAMES[self.index()]
    }

    /// Position of the kind in the list of kind names (one counter per kind).
    #[must_use]
    pub fn index(&self) -> usize {
        match self {
            EventKind::RunStarted { .. } => 0,
            EventKind::Transition { .. } => 1,
            EventKind::Dispatched { .. } => 2,
            EventKind::TaskClosed { .. } => 3,
            EventKind::RunResumed { .. } => 4,
            EventKind::ReplyAccepted => 5,
            EventKind::RejectedDuplicate => 7,
            EventKind::RejectedLate => 22,
            EventKind::RejectedStale => 23,
            EventKind::RejectedUnauthorized => 24,
            EventKind::AcceptanceFailed { .. } => 8,
            EventKind::ResultCommitted { .. } => 9,
            EventKind::ApprovalRequested { .. } => 10,
            EventKind::ApprovalDecided { .. } => 11,
            EventKind::CancelRequested => 12,
            EventKind::BudgetRefused { .. } => 13,
            EventKind::Replanned { .. } => 14,
            EventKind::PreconditionFailed { .. } => 15,
            EventKind::StopRequested { .. } => 16,
            EventKind::RunStopped { .. } => 17,
            EventKind::TaskSettled { .. } => 18,
            EventKind::ControlSent { .. } => 19,
            EventKind::ControlAcknowledged { .. } => 20,
            EventKind::ResultKept { .. } => 21,
            EventKind::TopUpRequested { .. } => 31,
            EventKind::TopUpDecided { .. } => 32,
            EventKind::Blob(_) => 34,
            EventKind::ConclusionDowngraded { .. } => 36,
            EventKind::Call(call) => match **call {
                CallEvent::CallRejected { .. } => 6,
                CallEvent::CallStarted { .. } => 25,
                CallEvent::CallAnswered { .. } => 26,
                CallEvent::OutcomeUnknown { .. } => 27,
                CallEvent::Queried { .. } => 28,
                CallEvent::Recovered { .. } => 29,
                CallEvent::Retried { .. } => 30,
                CallEvent::CallAborted { .. } => 33,
                CallEvent::AnsweredFromRecord { .. } => 35,
            },
        }
    }
}

/// Events counted per kind (published to `metrics` once, not per event).
#[derive(Clone, Debug)]
pub(crate) struct KindCounts([u64; KIND_NAMES.len()]);

impl Default for KindCounts {
    fn default() -> Self {
        Self([0; KIND_NAMES.len()])
    }
}

impl KindCounts {
    /// Counts one event of `kind`.
    pub(crate) fn count(&mut self, kind: &EventKind) {
        self.count_at(kind.index());
    }

    /// Counts one event of the kind at position `i` ([`EventKind::index`]).
    pub(crate) fn count_at(&mut self, i: usize) {
        self.0[i] += 1;
    }

    /// The non-zero counts by kind name, resetting them.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (&'static str, u64)> {
        let counts = std::mem::replace(&mut self.0, [0; KIND_NAMES.len()]);
        KIND_NAMES
            .iter()
            .zip(counts)
            .filter(|&(_, n)| n > 0)
            .map(|(&k, n)| (k, n))
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
    /// Peer mode: the index of the peer that wrote the event (every peer writes its own copy of
    /// the events it saw). Absent in star mode, where the supervisor writes every event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<usize>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// An event as the supervisor core emits it ([`crate::SupervisorEffect::Record`]): [`Event`]
/// without the run id, and with the task named by its node index where it can be. Emitting one
/// copies no shared name (a clone and a drop of an `Arc` are two atomic operations, and every
/// task logs seven events). [`crate::SupervisorCore::event`] makes the full [`Event`].
///
/// Turn a record into an event before the core takes its next input: a replan renumbers the
/// nodes. (Records still waiting in the core when it switches plans are given their names.)
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Strictly increasing within a run (the event's `seq`).
    pub seq: u64,
    /// The task, if any.
    pub task: RecordTask,
    /// Milliseconds since the run started (virtual in simulations).
    pub at_ms: u64,
    /// What happened.
    pub kind: EventKind,
}

impl Record {
    /// The full event, of run `run`, naming nodes after `plan` (the plan the record was emitted
    /// under).
    #[must_use]
    pub fn into_event(self, run: RunId, plan: &quorate_protocols::Plan) -> Event {
        Event {
            seq: self.seq,
            run_id: run,
            task: match self.task {
                RecordTask::None => None,
                RecordTask::Node(i) => Some(plan.shared_name(i)),
                RecordTask::Named(name) => Some(name),
            },
            at_ms: self.at_ms,
            peer: None,
            kind: self.kind,
        }
    }
}

/// The task of a [`Record`].
#[derive(Clone, Debug, PartialEq)]
pub enum RecordTask {
    /// A run-level event.
    None,
    /// The node at this index of the core's current plan.
    Node(u32),
    /// A node named outright (its record was emitted before a replan renumbered the nodes).
    Named(std::sync::Arc<str>),
}

#[cfg(test)]
#[path = "event_tests.rs"]
mod tests;

#[cfg(test)]
mod size {
    /// Every event moves through the supervisor's effect queue (`SupervisorEffect::Record`) at
    /// the size of the largest kind, seven times per task: a large variant (a top-up request
    /// inline took `EventKind` from 64 to 112 bytes; boxing it took `bench dag`'s instructions
    /// per task at 200 x 500 from 10 491 back to 10 167, see docs/performance.md) is boxed.
    #[test]
    fn an_event_kind_stays_small() {
        assert!(
            std::mem::size_of::<super::EventKind>() <= 64,
            "EventKind is {} bytes: box the large variant",
            std::mem::size_of::<super::EventKind>()
        );
        assert!(std::mem::size_of::<crate::SupervisorEffect>() <= 104);
    }
}
