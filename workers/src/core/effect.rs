//! What a worker core asks its driver to do.

use quorate_protocols::{ActionId, Envelope, Millis, TaskId};

#[cfg(doc)]
use super::WorkerCore;
use crate::tool::ToolHandle;
use quorate_protocols::wire::Report;

/// Something the driver of a [`WorkerCore`] must do.
#[must_use]
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Run `call.tool` for `call.action`; feed the answer to
    /// [`WorkerCore::handle_tool_answer`], or call [`WorkerCore::handle_tool_timeout`] if none
    /// came by `call.deadline`.
    CallTool(ToolCall),
    /// The attempt that made call `call` for `action` ended while it was in flight (it was
    /// cancelled or stopped): drop the call's future, so a request still open (an HTTP request
    /// to a model) is aborted; no answer is fed back. The core already counted the call's
    /// outcome as unknown and charged its reservation. A driver that cannot abort may let the
    /// call run: its answer, if any, is late and only updates the action's record.
    AbortCall {
        /// The task.
        task: TaskId,
        /// The action.
        action: ActionId,
        /// The call's tag (as in [`Effect::CallTool`]).
        call: u64,
    },
    /// Ask `query.tool` what became of `query.action`; feed the answer to
    /// [`WorkerCore::handle_query_answer`] or call [`WorkerCore::handle_query_timeout`].
    QueryTool(ToolQuery),
    /// Check `checks` (the task's store preconditions) against the run's store before the
    /// write `action` runs; answer with [`WorkerCore::handle_preconditions`] before the core's
    /// next input (the answer names the action, not the attempt: a later attempt's write of
    /// the same step has the same id).
    CheckPreconditions {
        /// The write waiting for the answer (its task is `action.task`).
        action: ActionId,
        /// What must hold.
        checks: Vec<quorate_protocols::Precondition>,
    },
    /// Send this reply to the supervisor.
    Reply(Box<Envelope<Report>>),
}

/// A tool call to make ([`Effect::CallTool`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The task.
    pub task: TaskId,
    /// The action.
    pub action: ActionId,
    /// The tool.
    pub tool: String,
    /// The tool to call (the registered tool named `tool`).
    pub handle: ToolHandle,
    /// Its parameters (shared with the call's request).
    pub params: quorate_protocols::Payload,
    /// Their digest (what a journal records as the call's intent).
    pub digest: quorate_protocols::ParamDigest,
    /// When the outcome becomes unknown (on the clock of the core's `now`).
    pub deadline: Millis,
    /// Tags this call; hand it back with the answer or the timeout. A retry of an action is a
    /// new call, so a late answer of an earlier call is told apart from the retry's.
    pub call: u64,
}

/// A query to make ([`Effect::QueryTool`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolQuery {
    /// The task.
    pub task: TaskId,
    /// The action asked about.
    pub action: ActionId,
    /// The tool.
    pub tool: String,
    /// The tool to ask (the registered tool named `tool`).
    pub handle: ToolHandle,
    /// When to give up (on the clock of the core's `now`).
    pub deadline: Millis,
}
