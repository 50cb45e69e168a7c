//! Tools: what an agent may ask the runtime to run.
//!
//! A [`Tool`] declares its name, the [`Capability`] a task needs to use it, and its
//! [`SideEffect`] class (which decides whether a call whose outcome is unknown may be retried).
//! The runtime, never the agent, calls it: only after the [gate](crate::Gate) said *execute*,
//! with a per-call timeout applied by the worker actor. A timeout is not an error: the call may
//! have committed, so the runtime asks [`Tool::query`] by [`ActionId`] before anything else.
//!
//! A model call is a tool call like any other: a tool named `model.<name>` with capability
//! `model.<name>` and [`SideEffect::ReadOnly`], which reserves its tokens through
//! [`Tool::reservation`], sets its own [`Tool::timeout`], and answers [`ToolAnswer::Lost`] when
//! its request went out but the answer did not come back (see docs/models.md).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use quorate_protocols::{ActionId, Budget, Capability, Payload};
use serde::{Deserialize, Serialize};

/// A boxed, sendable future, as returned by [`Tool::call`] and [`Tool::query`].
pub type ToolFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What calling a tool does to the world.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SideEffect {
    /// Changes nothing; always safe to call again.
    ReadOnly,
    /// Changes the world, but calling again with the same `ActionId` and parameters changes
    /// nothing more.
    #[default]
    IdempotentWrite,
    /// Every call may change the world again; never retried after an unknown outcome.
    NonIdempotentWrite,
}

impl SideEffect {
    /// `true` if a call with an unknown outcome that a query found absent may be sent again with
    /// the same id and parameters.
    #[must_use]
    pub const fn may_retry(self) -> bool {
        !matches!(self, SideEffect::NonIdempotentWrite)
    }

    /// `true` if a call may change the world (everything but `ReadOnly`): what a task's store
    /// preconditions are checked again before.
    #[must_use]
    pub const fn writes(self) -> bool {
        !matches!(self, SideEffect::ReadOnly)
    }
}

/// A tool's answer to one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToolAnswer {
    /// The call succeeded (and, for a write, committed).
    Ok {
        /// What the tool returned. A model tool returns an object carrying, next to its
        /// answer, the server's `"usage"` (`{"prompt_tokens": n, "completion_tokens": m}`,
        /// as an OpenAI-compatible chat completion reports it) and the choice's
        /// `"finish_reason"` (a string): the trace records both for the call. Shared from
        /// here on by the action book, the receipt and the agent's observation (a new value
        /// converts with `.into()`).
        output: Payload,
        /// What the call cost (tokens, money; steps and tool calls are counted by the runtime).
        /// A model tool reports the server's usage here (`tokens` = prompt + completion
        /// tokens): the call is settled with exactly this.
        cost: Budget,
        /// `false` if the call succeeded but changed nothing (no new information).
        changed: bool,
    },
    /// The call failed and committed nothing.
    Err {
        /// A short, stable error class (used for no-progress detection).
        class: String,
        /// What went wrong.
        message: String,
    },
    /// The request went out but its answer was lost (connection reset, the server died): the
    /// call may or may not have had its effect. The worker treats it exactly like a timeout:
    /// the action becomes `outcome-unknown`, the tool is queried by id, and a call that
    /// committed nothing is retried only if the tool may be retried (a read-only tool, such
    /// as a model, is; the retry is charged again).
    Lost {
        /// What happened to the answer.
        message: String,
    },
}

/// A tool the runtime can call on an agent's behalf.
///
/// ```
/// use quorate_protocols::{ActionId, Capability, Payload, TaskId};
/// use quorate_workers::{SideEffect, Tool, ToolAnswer, ToolFuture};
///
/// struct Clock;
/// impl Tool for Clock {
///     fn name(&self) -> &str { "clock.read" }
///     fn capability(&self) -> Capability { Capability::new("clock.read").unwrap() }
///     fn side_effect(&self) -> SideEffect { SideEffect::ReadOnly }
///     fn call(&self, _: ActionId, _: Payload) -> ToolFuture<ToolAnswer> {
///         Box::pin(async {
///             ToolAnswer::Ok { output: 12.into(), cost: Default::default(), changed: false }
///         })
///     }
/// }
/// assert!(Clock.validate(&serde_json::json!({})).is_ok());
/// ```
pub trait Tool: Send + Sync {
    /// The name agents use in proposals.
    fn name(&self) -> &str;
    /// The capability a task must hold to use the tool.
    fn capability(&self) -> Capability;
    /// What a call does to the world.
    fn side_effect(&self) -> SideEffect;
    /// Checks parameters before anything runs; the error says what is wrong.
    fn validate(&self, params: &serde_json::Value) -> Result<(), String> {
        let _ = params;
        Ok(())
    }
    /// What the gate reserves for a call with `params` before it runs, besides the one tool
    /// call every call is charged: `None` (the default) reserves all the tokens and cost left
    /// in the attempt's slice; `Some(b)` reserves `b.tokens` and `b.cost` only (the steps and
    /// tool calls of `b` are ignored). A model tool returns its prompt estimate plus
    /// `max_tokens`, and the cost that would bring. A call whose reservation does not fit what
    /// is left of the slice is refused at the gate
    /// ([`GateRejection::ReservationTooLarge`](crate::GateRejection::ReservationTooLarge)) and
    /// never sent. After the answer the reservation is settled with the answer's `cost` (plus
    /// the tool call) and the rest released; a cost above the reservation ends the attempt as
    /// over its limit.
    fn reservation(&self, params: &serde_json::Value) -> Option<Budget> {
        let _ = params;
        None
    }
    /// How long a call (and a query by id) may take before its outcome is unknown: `None`
    /// (the default) uses the worker's [`call_timeout`](crate::WorkerConfig::call_timeout),
    /// which suits instant tools; a model tool returns its own.
    fn timeout(&self) -> Option<Duration> {
        None
    }
    /// Runs the call. `action` identifies it; a tool that can should record it, so that
    /// [`Tool::query`] can answer later.
    ///
    /// `params` is shared with the call's request and receipt (cloning it is a reference
    /// count); it reads as a [`serde_json::Value`] (`Deref`).
    fn call(&self, action: ActionId, params: Payload) -> ToolFuture<ToolAnswer>;
    /// What became of an earlier call: `Some(answer)` if the tool knows it, `None` if nothing
    /// was committed under `action` (or the tool cannot tell; the default).
    fn query(&self, action: ActionId) -> ToolFuture<Option<ToolAnswer>> {
        let _ = action;
        Box::pin(std::future::ready(None))
    }
}

/// A tool name was registered twice.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tool {name:?} is registered already")]
pub struct DuplicateTool {
    /// The name.
    pub name: String,
}

/// The tools a worker can run, by name. Cheap to clone (tools are shared).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool under its [`Tool::name`].
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), DuplicateTool> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) {
            return Err(DuplicateTool { name });
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    /// The tool called `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The tool called `name`, as an effect hands it to a driver.
    #[must_use]
    pub fn handle(&self, name: &str) -> Option<ToolHandle> {
        self.tools.get(name).cloned().map(ToolHandle)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

/// A registered tool, as a worker core's effect ([`Effect::CallTool`](crate::Effect::CallTool),
/// [`Effect::QueryTool`](crate::Effect::QueryTool)) hands it to its driver: the driver calls
/// it as it is, with no lookup by name and so no "no such tool" case to decide (the core
/// decided, before the gate let the call through). Cheap to clone; two handles are equal if
/// they are the same registered tool.
#[derive(Clone)]
pub struct ToolHandle(Arc<dyn Tool>);

impl ToolHandle {
    /// The tool's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// What a call does to the world (see [`Tool::side_effect`]).
    #[must_use]
    pub fn side_effect(&self) -> SideEffect {
        self.0.side_effect()
    }

    /// The tool's own call timeout (see [`Tool::timeout`]).
    #[must_use]
    pub fn timeout(&self) -> Option<Duration> {
        self.0.timeout()
    }

    /// Runs the call (see [`Tool::call`]).
    pub fn call(&self, action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        self.0.call(action, params)
    }

    /// Asks what became of an earlier call (see [`Tool::query`]).
    pub fn query(&self, action: ActionId) -> ToolFuture<Option<ToolAnswer>> {
        self.0.query(action)
    }
}

impl PartialEq for ToolHandle {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl fmt::Debug for ToolHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolHandle").field(&self.name()).finish()
    }
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}
