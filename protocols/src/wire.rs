//! What the supervisor (or a peer) and a worker say to each other. Each travels as the payload
//! of an [`Envelope`](crate::Envelope); the envelope carries the ids, attempt,
//! version, result kind and dedupe key that the receiver checks first.

use crate::{ActionId, Budget, Capabilities, Component, NodeId, ParamDigest};
use serde::{Deserialize, Serialize};

#[path = "wire_evidence.rs"]
mod evidence;
#[path = "wire_model.rs"]
mod model;
pub use evidence::SharedEvidence;
pub use model::{Blob, ModelAnswer, ModelRequest};

/// The result of one dependency, handed to the task that needs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskInput {
    /// The dependency.
    pub node: NodeId,
    /// Its accepted result (shared with the task and its other dependents).
    pub value: crate::Payload,
    /// The evidence it rested on (shared with the dependency's record and its other
    /// dependents, like `value`; none held when it cites nothing).
    pub evidence: SharedEvidence,
}

/// An assignment's inputs: held inline in the assignment for up to two dependencies, so that
/// dispatching such a task allocates nothing for them (a larger fan-in spills to the heap).
/// Built like a `Vec` (`vec![..].into()`, `collect`), read as a slice; on the wire, a JSON array.
pub type TaskInputs = smallvec::SmallVec<[TaskInput; 2]>;

/// Supervisor -> worker: work on a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// The plan node.
    pub node: NodeId,
    /// The role the node asked for (selects the agent).
    pub role: crate::AgentRole,
    /// What the task is for, in words ([`crate::NodeSpec::goal`]); `None` for a
    /// node without one and for delegated sub-tasks.
    #[serde(default)]
    pub goal: Option<std::sync::Arc<str>>,
    /// Accepted results of the node's dependencies (inline up to two: see [`TaskInputs`]).
    pub inputs: TaskInputs,
    /// Delegated capabilities: the intersection of the parent's and the node's.
    pub capabilities: Capabilities,
    /// The budget slice delegated to this attempt.
    pub budget: Budget,
    /// Store preconditions of the task (`key-exists`, `key-absent`, `key-at-version`): they
    /// held when the task became ready, and the gate checks them again before every write call
    /// (a call to a tool that is not read-only). A delegated sub-task inherits its parent's.
    #[serde(default)]
    pub preconditions: Vec<crate::Precondition>,
    /// Extra text the task carries (documents, tool output...). Data only: nothing in it can add
    /// a tool call, widen scope or change the goal.
    pub evidence_text: Vec<String>,
}

/// Supervisor -> worker: a decision about a running task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// A human approved the action the worker is waiting on.
    Approve {
        /// The action.
        action: ActionId,
    },
    /// A human rejected it; the task is cancelled.
    Reject {
        /// The action.
        action: ActionId,
    },
    /// Stop working on the task now; no tool call may start after this.
    Cancel,
}

/// A confirmed side effect, issued by the runtime from the tool's answer (not by the agent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// The action.
    pub action: ActionId,
    /// The tool that ran it.
    pub tool: String,
    /// Digest of its parameters.
    pub digest: ParamDigest,
    /// The parameters the call ran with (shared with the call's request, not copied).
    pub params: crate::Payload,
    /// What the tool answered (shared with the agent's observation, not copied).
    pub output: crate::Payload,
    /// Whether the tool reported that the call changed something (a save that changed nothing
    /// is not a completed save).
    pub changed: bool,
}

/// Counters of what the execution gate did during one attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionCounts {
    /// Tool calls that ran.
    pub executed: u64,
    /// Proposals the gate refused.
    pub rejected: u64,
    /// Calls whose outcome became unknown (timeout after sending).
    pub unknown: u64,
    /// Unknown outcomes resolved by querying the tool.
    pub recovered: u64,
    /// Effects that happened more than once for one `ActionId` (must stay 0).
    pub duplicate_effects: u64,
}

impl std::ops::AddAssign for ActionCounts {
    fn add_assign(&mut self, other: ActionCounts) {
        self.executed += other.executed;
        self.rejected += other.rejected;
        self.unknown += other.unknown;
        self.recovered += other.recovered;
        self.duplicate_effects += other.duplicate_effects;
    }
}

/// The (action, parameter digest, environment version, error class) signature used to detect
/// no progress: the same signature repeated without new information.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProgressSignature {
    /// Tool name.
    pub tool: String,
    /// Parameter digest.
    pub digest: ParamDigest,
    /// Version of the environment the call observed (e.g. the target's store version).
    pub environment: u64,
    /// Error class, or `None` for a success that changed nothing.
    pub error_class: Option<String>,
}

/// Worker -> supervisor: how an attempt ended (or paused).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outcome {
    /// The agent's answer. The envelope's `result_kind` says what it claims to be; the supervisor
    /// runs the acceptance check on it.
    Answer {
        /// The answer (shared, never copied, on its way to the dependents and the log).
        value: crate::Payload,
        /// Receipts of the effects it relies on.
        receipts: Vec<Receipt>,
    },
    /// Parked until a human decides about `action`.
    ApprovalRequested {
        /// The action waiting for approval.
        action: ActionId,
        /// Why approval is needed.
        reason: String,
    },
    /// The task failed; `observation` is the first failing observation.
    Failed {
        /// What was observed.
        observation: String,
    },
    /// The same signature repeated `times` times without new information.
    NoProgress {
        /// The repeated signature.
        signature: ProgressSignature,
        /// How often.
        times: u32,
    },
    /// The slice ran out in `component`: the charge the attempt needed next (a step, a
    /// call's reservation, a call's reported cost) was `needed` more than was left.
    LimitReached {
        /// The exhausted component.
        component: Component,
        /// How much more of `component` the refused charge needed (at least 1; 0 from a
        /// sender that does not say).
        #[serde(default)]
        needed: u64,
    },
    /// The attempt stopped because it was cancelled.
    Cancelled,
    /// Not final: the task passed up a delegated sub-task's `ApprovalRequested` for `action`,
    /// and nothing else of the task is working any more (its other sub-tasks ended, or wait
    /// for a human too). Until this comes, such a task is not idle: its other sub-tasks may
    /// still be calling tools.
    Quiet {
        /// The request it follows.
        action: ActionId,
    },
}

impl Outcome {
    /// How the attempt ended, as its span's `outcome` records it (`answer`, `failed`,
    /// `no-progress`, `limit-reached`, `cancelled`), or `None` for a reply that does not end it
    /// (an approval request or a quiet notice: the attempt goes on).
    ///
    /// ```
    /// use quorate_protocols::wire::Outcome;
    /// assert_eq!(Outcome::Cancelled.attempt_end(), Some("cancelled"));
    /// let quiet = Outcome::Quiet { action: quorate_protocols::ActionId::new(quorate_protocols::TaskId::from_u128(1), 0, 0) };
    /// assert_eq!(quiet.attempt_end(), None);
    /// ```
    #[must_use]
    pub fn attempt_end(&self) -> Option<&'static str> {
        match self {
            Outcome::ApprovalRequested { .. } | Outcome::Quiet { .. } => None,
            Outcome::Answer { .. } => Some("answer"),
            Outcome::Failed { .. } => Some("failed"),
            Outcome::NoProgress { .. } => Some("no-progress"),
            Outcome::LimitReached { .. } => Some("limit-reached"),
            Outcome::Cancelled => Some("cancelled"),
        }
    }
}

/// How an attempt ended, in words (what a delegating task sees of a sub-task that did not
/// answer).
///
/// ```
/// use quorate_protocols::wire::Outcome;
/// let failed = Outcome::Failed { observation: "row locked".into() };
/// assert_eq!(failed.to_string(), "failed: row locked");
/// assert_eq!(Outcome::Cancelled.to_string(), "cancelled");
/// ```
impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Answer { value, .. } => write!(f, "answered {value}"),
            Outcome::ApprovalRequested { action, reason } => {
                write!(f, "waiting for approval of {action}: {reason}")
            }
            Outcome::Failed { observation } => write!(f, "failed: {observation}"),
            Outcome::NoProgress { signature, times } => write!(
                f,
                "no progress: {} with the same parameters {times} times ({})",
                signature.tool,
                signature
                    .error_class
                    .as_deref()
                    .unwrap_or("nothing changed")
            ),
            Outcome::LimitReached { component, .. } => write!(f, "out of {component}"),
            Outcome::Cancelled => write!(f, "cancelled"),
            Outcome::Quiet { action } => write!(f, "quiet after passing up {action}"),
        }
    }
}

/// One step in the life of a tool call, as the worker core decided it. The steps of an
/// attempt travel with its next reply ([`Report::calls`]), in the order they happened, and the
/// supervisor (or peer) that accepts the reply logs each as a trace event of the same name.
///
/// ```
/// use quorate_protocols::{ActionId, TaskId};
/// use quorate_protocols::wire::CallEvent;
/// let action = ActionId::new(TaskId::from_u128(7), 0, 0);
/// let json = serde_json::to_value(CallEvent::Queried { action, found: true }).unwrap();
/// assert_eq!(json["kind"], "queried");
/// assert_eq!(json["found"], true);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CallEvent {
    /// The gate let the call through, `reserved` was set aside for it, and it went to the tool.
    CallStarted {
        /// The action.
        action: ActionId,
        /// The tool.
        tool: String,
        /// The reservation made before it ran (settled with the actual cost afterwards).
        reserved: Budget,
        /// A model call's request, by digest (a call whose parameters hold a `"messages"`
        /// array); `None` for other calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<Box<ModelRequest>>,
    },
    /// The tool answered the call.
    CallAnswered {
        /// The action.
        action: ActionId,
        /// Whether the tool reported that the call changed something.
        changed: bool,
        /// What the call was charged: the tool's reported cost plus the call itself.
        cost: Budget,
        /// The tool's error class, if it answered with an error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// A model call's answer: usage, finish reason, latency, the output's digest; `None`
        /// for other calls (and for a model call answered with an error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<Box<ModelAnswer>>,
    },
    /// The attempt ended (cancelled, or stopped) while the call was in flight: the call was
    /// aborted (its request dropped), its outcome is unknown, and its whole reservation is
    /// charged (a model may have generated every token it reserved; no usage comes back).
    CallAborted {
        /// The action.
        action: ActionId,
        /// What the call was charged: its reservation (one tool call, and the tokens and cost
        /// reserved for it).
        charged: Budget,
    },
    /// The call did not answer by its deadline, or its answer was lost after the request went
    /// out: it may have committed or not (unknown is not failed). The tool is queried next.
    OutcomeUnknown {
        /// The action.
        action: ActionId,
    },
    /// The tool answered a query about the action: `found` it committed, or it is absent.
    Queried {
        /// The action.
        action: ActionId,
        /// Whether the effect was found.
        found: bool,
    },
    /// The query found the effect committed: its receipt is recovered, and the call is not made
    /// again.
    Recovered {
        /// The action.
        action: ActionId,
    },
    /// The query found nothing: the gate runs the call again, with the same id and the same
    /// parameters (idempotent tools only; a `call-started` follows).
    Retried {
        /// The action.
        action: ActionId,
    },
    /// The gate answered the proposal from the action's record: the same action (same id,
    /// same parameters) succeeded before, in an earlier attempt of the task, so the call is not
    /// made again and its recorded output is what the agent observes. Nothing is charged.
    AnsweredFromRecord {
        /// The action.
        action: ActionId,
    },
    /// The gate refused a proposal: nothing ran.
    CallRejected {
        /// The tool the agent asked for (`delegate` for a refused delegation).
        tool: String,
        /// Why the gate refused it.
        reason: String,
        /// The refusal's stable class, `GateRejection::class` of quorate-workers (`rejected:unknown-tool`,
        /// ...; `rejected:delegation` for a refused delegation): what the run's metrics count
        /// refusals by, where `reason` is text for people.
        #[serde(default)]
        class: String,
    },
}

impl CallEvent {
    /// Takes the content a model call's event carries (see [`Blob`]), leaving the event as
    /// the trace logs it: digests only.
    pub fn take_blobs(&mut self) -> Vec<Blob> {
        match self {
            CallEvent::CallStarted { model: Some(m), .. } => std::mem::take(&mut m.blobs),
            CallEvent::CallAnswered { model: Some(m), .. } => std::mem::take(&mut m.blobs),
            _ => Vec::new(),
        }
    }
}

/// Worker -> supervisor: the payload of every reply envelope.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// How the attempt ended.
    pub outcome: Outcome,
    /// What the attempt spent (settled reservations; the rest of the slice is unused).
    pub spent: Budget,
    /// What the gate did.
    pub actions: ActionCounts,
    /// What happened to the attempt's tool calls since its previous reply, in order (its
    /// delegated sub-tasks' included), so the supervisor can log them. Empty (no allocation)
    /// for an attempt that made no call.
    #[serde(default)]
    pub calls: Vec<CallEvent>,
}

impl CallEvent {
    /// The action whose output this step puts on the record of the attempt, if it does: a
    /// call the tool answered without an error, one recovered after an unknown outcome, or one
    /// answered from the action's record. What an
    /// [`EvidenceRef::Action`](crate::EvidenceRef::Action) citation resolves against.
    ///
    /// ```
    /// use quorate_protocols::{ActionId, Budget, TaskId};
    /// use quorate_protocols::wire::CallEvent;
    /// let action = ActionId::new(TaskId::from_u128(7), 0, 0);
    /// assert_eq!(CallEvent::Recovered { action }.recorded_output(), Some(action));
    /// let failed = CallEvent::CallAnswered {
    ///     action, changed: false, cost: Budget::ZERO, error: Some("timeout".into()), model: None,
    /// };
    /// assert_eq!(failed.recorded_output(), None);
    /// ```
    #[must_use]
    pub fn recorded_output(&self) -> Option<ActionId> {
        match self {
            CallEvent::CallAnswered {
                action,
                error: None,
                ..
            }
            | CallEvent::Recovered { action }
            | CallEvent::AnsweredFromRecord { action } => Some(*action),
            _ => None,
        }
    }
}

impl Report {
    /// The report, leaving in its place one that owns no memory (a `Cancelled` outcome that
    /// spent nothing): how a reply's reader takes its report and keeps the reply's box for
    /// reuse ([`crate::BoxPool`]).
    ///
    /// ```
    /// use quorate_protocols::Budget;
    /// use quorate_protocols::wire::{Outcome, Report};
    /// let mut report = Report {
    ///     outcome: Outcome::Failed { observation: "no".into() },
    ///     spent: Budget::steps(1),
    ///     actions: Default::default(),
    ///     calls: vec![],
    /// };
    /// let taken = report.take();
    /// assert_eq!(taken.spent, Budget::steps(1));
    /// assert_eq!((report.outcome, report.spent), (Outcome::Cancelled, Budget::ZERO));
    /// ```
    #[must_use]
    pub fn take(&mut self) -> Report {
        std::mem::replace(
            self,
            Report {
                outcome: Outcome::Cancelled,
                spent: Budget::ZERO,
                actions: ActionCounts::default(),
                calls: Vec::new(),
            },
        )
    }

    /// The proposals the gate refused among [`Report::calls`]: `(tool, reason)` each.
    pub fn rejected_calls(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.calls.iter().filter_map(|c| match c {
            CallEvent::CallRejected { tool, reason, .. } => Some((tool.as_str(), reason.as_str())),
            _ => None,
        })
    }
}
