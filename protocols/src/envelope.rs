//! The envelope every message travels in.
//!
//! An [`Envelope`] carries the routing and safety facts the runtime checks before it looks at the
//! payload: which run and task it is about, who sent it (stamped by the runtime from the channel
//! it arrived on, never taken from the payload), which attempt and state version the sender acted
//! on, the evidence it relies on, what kind of result it claims to be, and a dedupe key and a
//! correlation id. A duplicate, late or forged reply is recognised from these fields alone.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{
    ActionId, AgentId, CorrelationId, DedupeKey, IdSource, NodeId, RunId, TaskId, Version,
};

/// The part an agent plays in a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The hub of a star run: schedules, delegates budget, accepts results.
    Supervisor,
    /// Works on tasks assigned by a supervisor.
    Worker,
    /// A participant of an all-to-all run: claims tasks itself and broadcasts results.
    Peer,
    /// A person answering an approval request.
    Human,
}

/// Who sent an envelope. Stamped by the runtime from the authenticated channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sender {
    /// The agent.
    pub agent: AgentId,
    /// Its role in the run.
    pub role: Role,
}

/// What a reply claims to be. These are distinct on purpose: a *suggestion* that something
/// succeeded is not a *receipt* of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultKind {
    /// An unverified proposal of an answer.
    Suggestion,
    /// A conclusion checked against observed evidence.
    VerifiedConclusion,
    /// A request to run a side-effecting action (goes through the execution gate).
    ExecutionProposal,
    /// Proof that an action ran, issued by the runtime from the tool's answer.
    ExecutionReceipt,
}

impl fmt::Display for ResultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResultKind::Suggestion => "suggestion",
            ResultKind::VerifiedConclusion => "verified-conclusion",
            ResultKind::ExecutionProposal => "execution-proposal",
            ResultKind::ExecutionReceipt => "execution-receipt",
        })
    }
}

/// A pointer to a piece of evidence an answer rests on: a *citation*.
///
/// A reply whose kind is [`ResultKind::VerifiedConclusion`] must cite, in its envelope's
/// `evidence`, what the runtime recorded for its task in this attempt; acceptance resolves every
/// citation against that record and takes an answer that cites nothing, or anything the record
/// does not hold, as a [`ResultKind::Suggestion`] (docs/reliability.md, "Verified conclusions
/// cite the record"). Serialized with a `cites` tag:
///
/// ```
/// use quorate_protocols::{ActionId, EvidenceRef, TaskId};
/// let cite = EvidenceRef::Action { action: ActionId::new(TaskId::from_u128(7), 0, 0) };
/// let json = serde_json::to_value(&cite).unwrap();
/// assert_eq!(json["cites"], "action");
/// assert_eq!(serde_json::from_value::<EvidenceRef>(json).unwrap(), cite);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "cites", rename_all = "kebab-case", deny_unknown_fields)]
pub enum EvidenceRef {
    /// A record in the store at a given version. It resolves when one of the task's inputs
    /// rested on it (a dependency's accepted evidence): a store read of the task's own is cited
    /// through the call that read it ([`EvidenceRef::Action`]).
    Record {
        /// Store key of the record.
        key: String,
        /// The version that was read.
        version: Version,
    },
    /// The output of a tool call of this attempt (a delegated sub-task's included): it resolves
    /// when the attempt's call events show the call succeeded, was recovered after an unknown
    /// outcome, or was answered from the action's record.
    Action {
        /// The call.
        action: ActionId,
    },
    /// The accepted result of one of the task's dependencies (an input of its assignment).
    Input {
        /// The dependency.
        node: NodeId,
    },
}

impl fmt::Display for EvidenceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvidenceRef::Record { key, version } => write!(f, "record {key}@{version}"),
            EvidenceRef::Action { action } => write!(f, "action {action}"),
            EvidenceRef::Input { node } => write!(f, "input {node}"),
        }
    }
}

/// The access scope a message acts in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// Tenant (organisation) the run belongs to.
    pub tenant: String,
    /// The principal (user or service) on whose behalf the run acts.
    pub principal: String,
}

/// A message between the supervisor and a worker, or between peers.
///
/// ```
/// use quorate_protocols::*;
///
/// let mut ids = IdSource::seeded(1);
/// let supervisor = Sender { agent: ids.agent_id(), role: Role::Supervisor };
/// let (run, task) = (ids.run_id(), ids.task_id());
/// let assign = Envelope::new(run, task, supervisor, "summarise the sources", &mut ids);
/// let worker = Sender { agent: ids.agent_id(), role: Role::Worker };
/// let reply = assign.reply(worker, ResultKind::Suggestion, 42u32, &mut ids);
/// assert_eq!(reply.correlation, assign.correlation);
/// assert_eq!(reply.attempt, assign.attempt);
/// assert_ne!(reply.dedupe, assign.dedupe);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope<P> {
    /// The run.
    pub run: RunId,
    /// The task the message is about.
    pub task: TaskId,
    /// The task that delegated `task`, if any.
    pub parent: Option<TaskId>,
    /// Stamped by the runtime; see [`crate::decode_envelope`], which refuses a claimed sender that
    /// differs from the authenticated one.
    pub sender: Sender,
    /// The attempt of the task the sender worked on; a reply for an older attempt is late.
    pub attempt: u32,
    /// The version of the task's state the sender acted on.
    pub state_version: Version,
    /// Evidence the message relies on.
    pub evidence: Vec<EvidenceRef>,
    /// For replies: what the result claims to be. `None` for requests and control messages.
    pub result_kind: Option<ResultKind>,
    /// Access scope.
    pub scope: Scope,
    /// First sighting wins.
    pub dedupe: DedupeKey,
    /// Ties a reply to its request.
    pub correlation: CorrelationId,
    /// The message itself.
    pub payload: P,
}

impl<P> Envelope<P> {
    /// A request envelope with fresh dedupe and correlation ids (drawn from `ids`), attempt 0,
    /// version 0, no evidence and an empty scope.
    pub fn new(run: RunId, task: TaskId, sender: Sender, payload: P, ids: &mut IdSource) -> Self {
        Self {
            run,
            task,
            parent: None,
            sender,
            attempt: 0,
            state_version: Version::new(0),
            evidence: Vec::new(),
            result_kind: None,
            scope: Scope::default(),
            dedupe: ids.dedupe_key(),
            correlation: ids.correlation_id(),
            payload,
        }
    }

    /// A reply to `self`: same run, task, parent, attempt, version, scope and correlation id; a
    /// fresh dedupe key (drawn from `ids`); the given sender, kind and payload.
    #[inline]
    pub fn reply<Q>(
        &self,
        sender: Sender,
        kind: ResultKind,
        payload: Q,
        ids: &mut IdSource,
    ) -> Envelope<Q> {
        Envelope {
            run: self.run,
            task: self.task,
            parent: self.parent,
            sender,
            attempt: self.attempt,
            state_version: self.state_version,
            evidence: Vec::new(),
            result_kind: Some(kind),
            scope: self.scope.clone(),
            dedupe: ids.dedupe_key(),
            correlation: self.correlation,
            payload,
        }
    }

    /// The same envelope with another payload.
    pub fn map<Q>(self, f: impl FnOnce(P) -> Q) -> Envelope<Q> {
        Envelope {
            run: self.run,
            task: self.task,
            parent: self.parent,
            sender: self.sender,
            attempt: self.attempt,
            state_version: self.state_version,
            evidence: self.evidence,
            result_kind: self.result_kind,
            scope: self.scope,
            dedupe: self.dedupe,
            correlation: self.correlation,
            payload: f(self.payload),
        }
    }
}
