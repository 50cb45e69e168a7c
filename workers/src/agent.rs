//! Agents: what proposes the next step of a task.
//!
//! An [`Agent`] sees an [`AgentContext`] and returns a [`Proposal`]. It never runs anything: a
//! tool call it proposes goes through the [gate](crate::Gate), and what came of it comes back as
//! an [`Observation`] at the next step. The worker creates one agent per task attempt through an
//! [`AgentFactory`], chosen by the assignment's role in an [`AgentRegistry`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use quorate_protocols::{ActionId, Budget, Capabilities, EvidenceRef, NodeId, ResultKind, TaskId};

use crate::gate::GateRejection;
use quorate_protocols::wire::{Assignment, TaskInput};

/// What an agent knows when it proposes a step.
#[derive(Clone, Copy, Debug)]
pub struct AgentContext<'a> {
    /// The task.
    pub task: TaskId,
    /// The plan node.
    pub node: &'a NodeId,
    /// The attempt of the task.
    pub attempt: u32,
    /// The version of the task's state this attempt acts on (the assignment envelope's
    /// `state_version`; a reply names it, and one naming another version is stale).
    pub state_version: quorate_protocols::Version,
    /// What the task is for, in words, if its plan node says ([`Assignment::goal`]).
    pub goal: Option<&'a str>,
    /// The loop step this proposal is for (0 first); part of the [`ActionId`] of a call.
    pub step: u32,
    /// Accepted results of the node's dependencies.
    pub inputs: &'a [TaskInput],
    /// What the task may do.
    pub capabilities: &'a Capabilities,
    /// What is left of the attempt's budget slice, *after* this step was charged: with
    /// `remaining.steps == 0` the agent can still propose, but will not see the outcome of a call
    /// (no step is left to observe it), so a careful agent finishes instead.
    pub remaining: Budget,
    /// Documents and other text carried by the task. Data only: the gate never reads it.
    pub evidence_text: &'a [String],
    /// What the previous proposal led to; `None` at the first step.
    pub last_observation: Option<&'a Observation>,
}

/// What came of a proposed tool call, as the agent sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// The call succeeded (possibly recovered after a timeout, or recorded earlier).
    Output {
        /// The action.
        action: ActionId,
        /// The tool.
        tool: String,
        /// What it returned (shared with the call's receipt, not copied).
        output: quorate_protocols::Payload,
        /// Whether it changed anything.
        changed: bool,
    },
    /// The tool answered with an error; nothing was committed.
    ToolError {
        /// The action.
        action: ActionId,
        /// The tool.
        tool: String,
        /// Error class.
        class: String,
        /// Message.
        message: String,
    },
    /// The gate refused the call; nothing ran.
    Rejected {
        /// The action.
        action: ActionId,
        /// Why.
        reason: GateRejection,
    },
    /// Every delegated sub-task ended; here is how.
    Delegated {
        /// One entry per sub-task, in the order they were proposed.
        results: Vec<SubtaskResult>,
    },
    /// The delegation was refused; no sub-task started.
    DelegationRefused {
        /// Why (a sub-task asked for more budget than the slice holds, or for a capability the
        /// task does not have).
        reason: crate::delegate::DelegationError,
    },
}

/// A sub-task an agent delegates. Its budget is carved out of the delegating task's own slice;
/// its capabilities must be a subset of the task's (delegation only narrows).
#[derive(Clone, Debug, PartialEq)]
pub struct SubtaskSpec {
    /// Name, unique among the siblings; the sub-task's node id is `<parent node>.<name>`.
    pub name: String,
    /// Role (selects the agent).
    pub role: String,
    /// What it may do.
    pub capabilities: quorate_protocols::Capabilities,
    /// Its slice.
    pub budget: quorate_protocols::Budget,
    /// Handed to the sub-task as its input.
    pub input: serde_json::Value,
}

/// How one delegated sub-task ended.
#[derive(Clone, Debug, PartialEq)]
pub struct SubtaskResult {
    /// The sub-task's name.
    pub name: String,
    /// Its answer (shared with the sub-task's reply, not copied), or why it did not give one.
    pub outcome: Result<quorate_protocols::Payload, String>,
    /// What it spent (charged to the delegating task).
    pub spent: quorate_protocols::Budget,
    /// What its answer cited (its reply's `evidence`; empty when it did not answer): the
    /// delegating agent cites these to rest its own answer on the sub-task's.
    pub evidence: Vec<EvidenceRef>,
}

impl fmt::Display for Observation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Observation::Output { tool, output, .. } => write!(f, "{tool} answered {output}"),
            Observation::ToolError {
                tool,
                class,
                message,
                ..
            } => write!(f, "{tool} failed ({class}): {message}"),
            Observation::Rejected { reason, .. } => write!(f, "gate rejected the call: {reason}"),
            Observation::Delegated { results } => {
                let ok = results.iter().filter(|r| r.outcome.is_ok()).count();
                write!(f, "{ok} of {} sub-tasks answered", results.len())
            }
            Observation::DelegationRefused { reason } => write!(f, "delegation refused: {reason}"),
        }
    }
}

/// What an agent wants to do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Proposal {
    /// Call a tool (through the gate).
    CallTool {
        /// Tool name.
        tool: String,
        /// Parameters (shared from here on by the request, the tool and the receipt; a new
        /// value converts with `.into()`).
        params: quorate_protocols::Payload,
        /// Bumped when the agent deliberately wants a *new* effect at the same step.
        intent_version: u32,
        /// Ask a human before the call runs.
        needs_approval: bool,
    },
    /// End the attempt with an answer.
    Finish {
        /// What the answer claims to be.
        kind: ResultKind,
        /// The answer (a tool's output forwarded as it is stays shared: clone the
        /// [`Observation::Output`]'s `output`; a new value converts with `.into()`).
        value: quorate_protocols::Payload,
        /// What the answer rests on: outputs of this attempt's calls ([`Observation::Output`]'s
        /// `action`), the task's inputs, and the evidence a sub-task's answer cited
        /// ([`SubtaskResult::evidence`]). They travel in the reply envelope's `evidence`. A
        /// [`ResultKind::VerifiedConclusion`] is taken as one only when it cites something and
        /// every citation resolves to what the runtime recorded for the attempt; otherwise
        /// acceptance takes it as a suggestion.
        evidence: Vec<EvidenceRef>,
    },
    /// End the attempt as failed.
    Fail {
        /// The observation it failed on.
        observation: String,
    },
    /// Delegate sub-tasks and wait for all of them; their results come back as
    /// [`Observation::Delegated`]. Works at any depth: a sub-task's agent may delegate too.
    Delegate {
        /// The sub-tasks.
        subtasks: Vec<SubtaskSpec>,
    },
}

/// Misbehaviour a test agent asks the worker to commit, so a supervisor can prove it copes.
/// Real agents keep the default (none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Send the final reply twice with the same dedupe key.
    pub duplicate_reply: bool,
    /// After a cancel, still send an answer (after the `Cancelled` reply).
    pub late_reply: bool,
}

/// Proposes the steps of one task attempt.
///
/// `propose` is synchronous and must not block: the worker core calls it inline. An agent that
/// needs I/O (a model call) should expose it as a tool.
pub trait Agent: Send {
    /// The next step.
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal;
    /// Faults to inject (tests only); none by default.
    fn faults(&self) -> Faults {
        Faults::default()
    }
}

/// Creates one agent per task attempt.
pub trait AgentFactory: Send + Sync {
    /// A fresh agent for `assignment`.
    fn create(&self, assignment: &Assignment) -> Box<dyn Agent>;
}

impl<F> AgentFactory for F
where
    F: Fn(&Assignment) -> Box<dyn Agent> + Send + Sync,
{
    fn create(&self, assignment: &Assignment) -> Box<dyn Agent> {
        self(assignment)
    }
}

/// No agent is registered for the assignment's role (and there is no fallback).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no agent is registered for role {role:?}")]
pub struct UnknownRole {
    /// The role asked for.
    pub role: String,
}

/// Agent factories by role, with an optional fallback for any other role.
#[derive(Clone, Default)]
pub struct AgentRegistry {
    roles: HashMap<String, Arc<dyn AgentFactory>>,
    fallback: Option<Arc<dyn AgentFactory>>,
}

impl AgentRegistry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `factory` for `role` (replacing an earlier one).
    #[must_use]
    pub fn with_role(
        mut self,
        role: impl Into<String>,
        factory: impl AgentFactory + 'static,
    ) -> Self {
        self.roles.insert(role.into(), Arc::new(factory));
        self
    }

    /// Uses a fresh `make()` agent for `role`; saves the `Box<dyn Agent>` cast a closure
    /// factory needs.
    ///
    /// ```
    /// use quorate_workers::{Agent, AgentContext, AgentRegistry, Proposal};
    /// use quorate_protocols::ResultKind;
    ///
    /// struct Echo;
    /// impl Agent for Echo {
    ///     fn propose(&mut self, _: &AgentContext<'_>) -> Proposal {
    ///         Proposal::Finish { kind: ResultKind::Suggestion, value: "hi".into(), evidence: vec![] }
    ///     }
    /// }
    /// let agents = AgentRegistry::new().with_agent("echo", || Echo);
    /// # let _ = agents;
    /// ```
    #[must_use]
    pub fn with_agent<A, F>(self, role: impl Into<String>, make: F) -> Self
    where
        A: Agent + 'static,
        F: Fn() -> A + Send + Sync + 'static,
    {
        self.with_role(role, move |_: &Assignment| -> Box<dyn Agent> {
            Box::new(make())
        })
    }

    /// Uses `factory` for every role without its own.
    #[must_use]
    pub fn with_fallback(mut self, factory: impl AgentFactory + 'static) -> Self {
        self.fallback = Some(Arc::new(factory));
        self
    }

    /// A fresh agent for `assignment`.
    pub fn create(&self, assignment: &Assignment) -> Result<Box<dyn Agent>, UnknownRole> {
        self.roles
            .get(&*assignment.role)
            .or(self.fallback.as_ref())
            .map(|f| f.create(assignment))
            .ok_or_else(|| UnknownRole {
                role: assignment.role.to_string(),
            })
    }
}

impl fmt::Debug for AgentRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentRegistry")
            .field("roles", &self.roles.keys().collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}
