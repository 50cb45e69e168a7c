//! # quorate-workers
//!
//! The worker side of quorate: what users implement ([`Agent`], [`Tool`]), the execution
//! [`Gate`], the action lifecycle, the pure [`WorkerCore`] and its actix shell
//! [`WorkerActor`], and the built-in [`scripted`] agent that plan files use.
//!
//! A tour, in the order a task attempt meets the types:
//!
//! * The supervisor sends an [`Assignment`] in an envelope ([`AssignMsg`]). The payloads
//!   ([`Assignment`], [`Control`], [`Report`] and what they carry) are defined in
//!   [`quorate_protocols::wire`] and re-exported here; the actix messages that carry them
//!   ([`AssignMsg`], [`ControlMsg`], [`ReportMsg`]...) are this crate's. The worker picks an
//!   [`AgentFactory`] by role from its [`AgentRegistry`] and creates one [`Agent`] for the
//!   attempt, and opens a budget account (`quorate_state::Account`) for the delegated slice.
//! * The agent loop: every iteration charges one step, then asks the agent for a [`Proposal`]
//!   given an [`AgentContext`]. A `Finish` or `Fail` ends the attempt; a `CallTool` gets an
//!   [`ActionId`](quorate_protocols::ActionId) `(task, step, intent_version)` and goes to the
//!   [`Gate`].
//! * The gate ([`Gate::check`], pure) checks tool, capability, parameters, the action's history
//!   in the task's [`ActionBook`] (same id with other parameters is refused; a succeeded id is
//!   answered from the record; an unknown one is queried first), approval and budget, and
//!   returns a [`GateDecision`]. It never reads evidence text. A write it lets through waits
//!   for the task's store preconditions ([`Effect::CheckPreconditions`], checked by the shell
//!   against the run's store); one that no longer holds turns the write into a rejection.
//! * A call runs in the shell with a per-call timeout (the tool's own [`Tool::timeout`], or the
//!   worker's). Its [`ToolAnswer`] (or the timeout) goes back into the core: success issues a
//!   [`Receipt`], an error becomes an [`Observation`] for the agent, a timeout or a lost answer
//!   ([`ToolAnswer::Lost`]) makes the outcome unknown and triggers a query by id; a committed
//!   effect is *recovered*, an absent one is retried (same id, same parameters) only for
//!   idempotent tools. A call whose attempt ends while it is in flight is aborted
//!   ([`Effect::AbortCall`]).
//! * A model call is such a tool call: a tool `model.<name>`, read-only, which reserves its
//!   prompt estimate plus `max_tokens` through [`Tool::reservation`] and is settled with the
//!   usage the server reports (docs/models.md, "Model calls as actions").
//! * The [`ProgressDetector`] stops an attempt that repeats itself without new information.
//! * The attempt ends with one [`Report`] whose [`Outcome`] says how; see [`Effect::Reply`].
//!
//! Decision logic (gate, book, progress, core) is pure: time comes in as an argument
//! ([`Millis`](quorate_protocols::Millis)), ids from the core's
//! [`IdSource`](quorate_protocols::IdSource), and effects come out of
//! [`WorkerCore::poll_effect`]. [`drive`] holds the worker core's one drive loop
//! ([`drive::WorkerEnv`] + [`drive::drive`]), which the actor, the simulator and the tests all
//! use; [`WorkerActor`] only translates. The real clock and the
//! operating system's randomness enter in [`edge`] (the shells' [`edge::Clock`] and
//! [`edge::random_ids`]), nowhere else.
//!
//! The [`ActionBook`] lives in the worker's memory; its records are
//! [`quorate_state::ActionRecord`]s, the ones the store-backed
//! [`quorate_state::IdempotencyRegistry`] keeps, and [`ActionBook::import`] takes over a book read
//! back from it. Not here yet: writing the book to the registry before each side-effecting call
//! (worker failover, issue 16).

#![forbid(unsafe_code)]

mod actor;
mod agent;
mod attempt;
mod book;
mod core;
mod delegate;
pub mod drive;
pub mod edge;
mod failover;
mod gate;
mod history;
mod journal;
mod progress;
pub mod scripted;
pub mod telemetry;
mod tool;

#[cfg(test)]
mod testing;

pub use actor::{
    AssignBatch, AssignMsg, ControlMsg, Envelopes, Replies, ReportBatch, ReportMsg, WorkerActor,
    BATCH,
};
pub use agent::{
    Agent, AgentContext, AgentFactory, AgentRegistry, Faults, Observation, Proposal, SubtaskResult,
    SubtaskSpec, UnknownRole,
};
pub use book::{ActionBook, BookError, Resolved};
pub use core::{Effect, InputError, ToolCall, ToolQuery, WorkerConfig, WorkerCore};
pub use delegate::DelegationError;
pub use failover::{BookStore, Fenced, MemoryBooks, StoredBook};
pub use gate::{CallRequest, Gate, GateContext, GateDecision, GateRejection};
pub use journal::{ActionIntent, ActionJournal};
pub use progress::{ProgressDetector, ProgressVerdict};
pub use quorate_protocols::wire::{
    ActionCounts, Assignment, CallEvent, Control, Outcome, ProgressSignature, Receipt, Report,
    TaskInput,
};
pub use scripted::{Script, ScriptBook, ScriptError, ScriptedAgent, ScriptedTool, World};
pub use tool::{DuplicateTool, SideEffect, Tool, ToolAnswer, ToolFuture, ToolHandle, ToolRegistry};
