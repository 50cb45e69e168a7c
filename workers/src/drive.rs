//! The one drive loop of the worker core: [`drive`] carries out every effect a [`WorkerCore`]
//! has queued through a [`WorkerEnv`] (the actix shell, the simulator, the test harness), and
//! feeds each answer the environment gives at once ([`Answer::Now`]) back into the core before
//! the next effect. An answer that comes later ([`Answer::Later`]: a tool's future, a call the
//! simulator schedules) is fed by the driver with [`feed`], then it drives again.
//!
//! The decisions around an effect are the loop's, written once: a call of a tool waits for
//! its task's book to be written to the store of record when the environment keeps one
//! ([`WorkerEnv::keeps_book_before`]), and a fenced write stops the attempt
//! ([`WorkerCore::handle_fenced`]) instead of running the call. What the core refused
//! ([`InputError`]) is collected in [`Drained::refused`].
//!
//! ```
//! use quorate_protocols::drive::Answer;
//! use quorate_protocols::wire::{Assignment, Outcome, Report};
//! use quorate_protocols::*;
//! use quorate_workers::drive::{drive, poll_now, QueryEnd, ToolCall, ToolQuery, WorkerEnv};
//! use quorate_workers::*;
//!
//! /// Answers every call at once and keeps the replies.
//! struct Env { replies: Vec<Envelope<Report>> }
//! impl WorkerEnv for Env {
//!     fn now(&mut self) -> Millis { 0 }
//!     fn call_tool(&mut self, call: ToolCall) -> Answer<Option<ToolAnswer>> {
//!         Answer::Now(poll_now(call.handle.call(call.action, call.params)))
//!     }
//!     fn query_tool(&mut self, q: ToolQuery) -> Answer<QueryEnd> {
//!         Answer::Now(poll_now(q.handle.query(q.action))
//!             .map_or(QueryEnd::TimedOut, QueryEnd::Answered))
//!     }
//!     fn reply(&mut self, reply: Box<Envelope<Report>>) { self.replies.push(*reply); }
//! }
//!
//! let script: Script = serde_json::from_value(serde_json::json!([
//!     { "do": "call", "tool": "db.save", "params": { "id": 1 }, "output": "ok" },
//! ])).unwrap();
//! let node = NodeId::new("save").unwrap();
//! let mut book = ScriptBook::new(World::new());
//! book.insert(node.clone(), script).unwrap();
//! let mut ids = IdSource::seeded(1);
//! let mut core = WorkerCore::new(ids.agent_id(), WorkerConfig::default(),
//!     AgentRegistry::new().with_fallback(book.factory()), book.tools().unwrap(), ids.fork());
//! let supervisor = Sender { agent: ids.agent_id(), role: Role::Supervisor };
//! let assignment = Assignment {
//!     node, role: "scripted".into(), goal: None, inputs: Default::default(),
//!     capabilities: Capabilities::parse(["db.save"]).unwrap(),
//!     budget: Budget::new(5, 2, 0, 0), evidence_text: vec![], preconditions: vec![],
//! };
//! let (run, task) = (ids.run_id(), ids.task_id());
//! core.handle_assignment(0, Envelope::new(run, task, supervisor, assignment, &mut ids)).unwrap();
//! let mut env = Env { replies: Vec::new() };
//! let drained = drive(&mut core, &mut env);
//! assert!(drained.refused.is_empty());
//! assert!(matches!(env.replies[0].payload.outcome, Outcome::Answer { .. }));
//! ```

use std::task::{Context, Poll, Waker};

use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::Report;
use quorate_protocols::{ActionId, Envelope, Millis, Precondition, TaskId};
use quorate_state::PreconditionFailure;

use crate::core::{Effect, InputError, WorkerCore};
pub use crate::core::{ToolCall, ToolQuery};
use crate::failover::{Fenced, StoredBook};
use crate::tool::{ToolAnswer, ToolFuture, ToolHandle};

/// How a query ended.
#[derive(Clone, Debug, PartialEq)]
pub enum QueryEnd {
    /// The tool answered (`None`: nothing was committed).
    Answered(Option<ToolAnswer>),
    /// No answer by the deadline.
    TimedOut,
}

/// An answer to feed to the core: one the environment gave at once (the loop feeds it), or one
/// that came later (the driver feeds it with [`feed`]).
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerAnswer {
    /// How call `call` for `action` ended (`None`: it timed out).
    Call {
        /// The action.
        action: ActionId,
        /// The call's tag.
        call: u64,
        /// The answer, or `None` if none came by the deadline.
        answer: Option<ToolAnswer>,
    },
    /// How the query about `action` ended.
    Query {
        /// The action.
        action: ActionId,
        /// How it ended.
        end: QueryEnd,
    },
    /// What the check of the store preconditions before the write `action` found.
    Preconditions {
        /// The write.
        action: ActionId,
        /// `Ok`, or the first failing check.
        outcome: Result<(), PreconditionFailure>,
    },
}

/// What a worker core's driver provides: the tools, the store checks, the sends and the clock.
/// The loop ([`drive`]) decides everything else.
pub trait WorkerEnv {
    /// The core's time now (read before each answer is fed).
    fn now(&mut self) -> Millis;

    /// Whether the loop goes on with the next effect (checked before each one; default: it
    /// does). [`Flow::Halt`] leaves the rest queued in the core.
    fn go_on(&mut self) -> Flow {
        Flow::Continue
    }

    /// Whether a call of `tool` waits for its task's book to be written to the store of
    /// record ([`Self::write_book`]) first (default: no store of record, never).
    fn keeps_book_before(&self, tool: &ToolHandle) -> bool {
        let _ = tool;
        false
    }

    /// Writes `task`'s book to the store of record, fenced by its attempt; `Err` if a newer
    /// attempt owns it (the loop then stops the attempt and the call does not run).
    ///
    /// # Errors
    /// [`Fenced`]: a newer attempt owns the task's book.
    fn write_book(&mut self, task: TaskId, book: StoredBook) -> Result<(), Fenced> {
        let _ = (task, book);
        Ok(())
    }

    /// Starts a tool call: `Now(Some(answer))` if it answered at once, `Now(None)` if it timed
    /// out (the environment's clock is then at its deadline), or `Later`.
    fn call_tool(&mut self, call: ToolCall) -> Answer<Option<ToolAnswer>>;

    /// Call `call` for `action` of `task` is no longer awaited: drop it if it can (default:
    /// let it run; its answer, if any, is late).
    fn abort_call(&mut self, task: TaskId, action: ActionId, call: u64) {
        let _ = (task, action, call);
    }

    /// Asks a tool what became of an action.
    fn query_tool(&mut self, query: ToolQuery) -> Answer<QueryEnd>;

    /// Checks the store preconditions of the write `action` against the run's store (default:
    /// no store, [`PreconditionFailure::NoStore`]; a core told so asks for no check).
    fn check_preconditions(
        &mut self,
        action: ActionId,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        let _ = (action, checks);
        Answer::Now(Err(PreconditionFailure::NoStore))
    }

    /// Sends a reply to the supervisor.
    fn reply(&mut self, reply: Box<Envelope<Report>>);
}

/// What one [`drive`] came to: the inputs the core refused on the way (late, stale or
/// duplicate answers, fences that named no newer attempt), and whether the environment halted.
pub type Drained = quorate_protocols::drive::Drained<InputError>;

/// Carries out every effect `core` has queued through `env`, feeding back each answer given at
/// once, until the core has none left or `env` halts. See the module docs.
#[inline]
pub fn drive(core: &mut WorkerCore, env: &mut impl WorkerEnv) -> Drained {
    let mut refused = Vec::new();
    loop {
        if !env.go_on().goes_on() {
            return Drained {
                refused,
                flow: Flow::Halt,
            };
        }
        let Some(effect) = core.poll_effect() else {
            break;
        };
        let answer = match effect {
            Effect::CallTool(call) => {
                if env.keeps_book_before(&call.handle) {
                    if let Some(book) = core.stored_book(call.task) {
                        if let Err(fenced) = env.write_book(call.task, book) {
                            let now = env.now();
                            note(&mut refused, core.handle_fenced(now, fenced));
                            continue;
                        }
                    }
                }
                let (action, tag) = (call.action, call.call);
                env.call_tool(call).now().map(|answer| WorkerAnswer::Call {
                    action,
                    call: tag,
                    answer,
                })
            }
            Effect::AbortCall { task, action, call } => {
                env.abort_call(task, action, call);
                None
            }
            Effect::QueryTool(query) => {
                let action = query.action;
                env.query_tool(query)
                    .now()
                    .map(|end| WorkerAnswer::Query { action, end })
            }
            Effect::CheckPreconditions { action, checks } => env
                .check_preconditions(action, checks)
                .now()
                .map(|outcome| WorkerAnswer::Preconditions { action, outcome }),
            Effect::Reply(reply) => {
                env.reply(reply);
                None
            }
        };
        if let Some(answer) = answer {
            let now = env.now();
            note(&mut refused, feed(core, now, answer));
        }
    }
    Drained {
        refused,
        flow: Flow::Continue,
    }
}

/// Feeds one answer to `core` at `now` (the matching `handle_*`).
///
/// # Errors
/// What the core's handler refused ([`InputError`]: a late, stale or duplicate answer).
#[inline]
pub fn feed(core: &mut WorkerCore, now: Millis, answer: WorkerAnswer) -> Result<(), InputError> {
    match answer {
        WorkerAnswer::Call {
            action,
            call,
            answer: Some(answer),
        } => core.handle_tool_answer(now, action, call, answer),
        WorkerAnswer::Call {
            action,
            call,
            answer: None,
        } => core.handle_tool_timeout(now, action, call),
        WorkerAnswer::Query {
            action,
            end: QueryEnd::Answered(answer),
        } => core.handle_query_answer(now, action, answer),
        WorkerAnswer::Query {
            action,
            end: QueryEnd::TimedOut,
        } => core.handle_query_timeout(now, action),
        WorkerAnswer::Preconditions { action, outcome } => {
            core.handle_preconditions(now, action, outcome)
        }
    }
}

#[inline]
fn note(refused: &mut Vec<InputError>, result: Result<(), InputError>) {
    if let Err(error) = result {
        refused.push(error);
    }
}

/// A tool's answer if its future is ready when first polled (`None`: it would wait). The
/// simulator and the test harness run tools this way, on no executor.
pub fn poll_now<T>(mut fut: ToolFuture<T>) -> Option<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
