//! The worker actor: a thin actix shell around [`WorkerCore`].
//!
//! Each handler turns a message into a core input, calls the core, then carries out the
//! effects through the one drive loop ([`crate::drive::drive`], with [`ActorEnv`] as its
//! environment): a tool call or query is spawned with `tokio::time::timeout` up to the effect's
//! deadline (at which the tool's future is dropped), a call whose attempt ended is aborted
//! ([`Effect::AbortCall`]: its task is aborted, which drops the future), and its result comes back to the actor as a message (no decision is taken while
//! awaiting); a reply is sent to the `Recipient<ReportMsg>` given at construction.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use actix::{Actor, Context, Handler, Message, Recipient};
use quorate_protocols::{ActionId, AgentId, Envelope, Millis, RunId, TaskId};
use quorate_state::MemoryStore;

use crate::agent::AgentRegistry;
use crate::core::{InputError, WorkerConfig, WorkerCore};
use crate::drive::{drive, feed, QueryEnd, WorkerAnswer};
use crate::telemetry::{ATTEMPT_SPAN, CALL_DURATION_SECONDS, TOOL_CALL_SPAN, TOOL_QUERY_SPAN};
use crate::tool::{ToolAnswer, ToolRegistry};
use quorate_protocols::wire::{Assignment, Control, Report};

/// Supervisor -> worker: work on a task.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct AssignMsg(pub Envelope<Assignment>);

/// Supervisor -> worker: cancel, approve or reject.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct ControlMsg(pub Envelope<Control>);

/// Worker -> supervisor: a reply.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct ReportMsg(pub Envelope<Report>);

/// Supervisor -> worker: several assignments in one actix message (the supervisor sends the
/// assignments one input produced for a worker together, at most [`BATCH`] a message; each
/// envelope is judged on its own). Boxed: an envelope is a few hundred bytes, and a box moves
/// from the supervisor's dispatch into the worker's attempt without being copied.
///
/// The second field hands the worker boxes of replies the supervisor has read, for its next
/// replies to be written into ([`quorate_protocols::BoxPool`]): only memory, never read. A
/// sender without any gives an empty `Vec` ([`AssignBatch::new`]).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
#[allow(clippy::vec_box)]
pub struct AssignBatch(
    pub Vec<Box<Envelope<Assignment>>>,
    pub Vec<Box<Envelope<Report>>>,
);

impl AssignBatch {
    /// The assignments `envelopes`, with no boxes to reuse.
    #[must_use]
    #[allow(clippy::vec_box)]
    pub fn new(envelopes: Vec<Box<Envelope<Assignment>>>) -> Self {
        Self(envelopes, Vec::new())
    }
}

/// Worker -> supervisor: every reply one input of the worker produced, in one actix message
/// (boxed, like [`AssignBatch`]).
///
/// The second field hands back the boxes of assignments the worker is done with, for the
/// supervisor's next dispatches ([`quorate_protocols::BoxPool`]). They may still hold the
/// assignment they carried; only the memory is reused.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
#[allow(clippy::vec_box)]
pub struct ReportBatch(
    pub Vec<Box<Envelope<Report>>>,
    pub Vec<Box<Envelope<Assignment>>>,
);

impl ReportBatch {
    /// The replies `envelopes`, with no boxes handed back.
    #[must_use]
    #[allow(clippy::vec_box)]
    pub fn new(envelopes: Vec<Box<Envelope<Report>>>) -> Self {
        Self(envelopes, Vec::new())
    }
}

/// A message that carries envelopes and can be cut into one message per envelope (so a chaos
/// link duplicates, delays or drops each envelope on its own).
pub trait Envelopes: Sized {
    /// One message per envelope, in order.
    fn split(self) -> Vec<Self>;
}

impl Envelopes for AssignMsg {
    fn split(self) -> Vec<Self> {
        vec![self]
    }
}

impl Envelopes for ControlMsg {
    fn split(self) -> Vec<Self> {
        vec![self]
    }
}

impl Envelopes for ReportMsg {
    fn split(self) -> Vec<Self> {
        vec![self]
    }
}

impl Envelopes for AssignBatch {
    fn split(self) -> Vec<Self> {
        // The spare boxes are memory only: a chaos link (which copies each part it sends)
        // would only copy them, so they are dropped.
        self.0
            .into_iter()
            .map(|e| AssignBatch::new(vec![e]))
            .collect()
    }
}

impl Envelopes for ReportBatch {
    fn split(self) -> Vec<Self> {
        self.0
            .into_iter()
            .map(|e| ReportBatch::new(vec![e]))
            .collect()
    }
}

/// Most envelopes sent in one batch message (a bound on latency and on message size).
pub const BATCH: usize = 64;

/// Where a worker sends its replies.
#[derive(Clone, Debug)]
pub enum Replies {
    /// One [`ReportMsg`] per reply.
    Each(Recipient<ReportMsg>),
    /// One [`ReportBatch`] per handled input (fewer actix messages under load).
    Batched(Recipient<ReportBatch>),
}

/// A tool call ended (`None`: timed out).
#[derive(Message)]
#[rtype(result = "()")]
struct CallEnded {
    action: ActionId,
    call: u64,
    answer: Option<ToolAnswer>,
}

/// A query ended.
#[derive(Message)]
#[rtype(result = "()")]
struct QueryEnded {
    action: ActionId,
    end: QueryEnd,
}

/// An open attempt's span and what its calls' spans repeat of it.
#[derive(Debug)]
struct AttemptSpan {
    span: tracing::Span,
    run: RunId,
    attempt: u32,
}

/// Runs task attempts for a supervisor.
///
/// ```
/// use quorate_protocols::*;
/// use quorate_workers::*;
/// use actix::prelude::*;
///
/// struct Collector(std::sync::mpsc::Sender<Envelope<Report>>);
/// impl Actor for Collector { type Context = Context<Self>; }
/// impl Handler<ReportMsg> for Collector {
///     type Result = ();
///     fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) { self.0.send(msg.0).unwrap(); }
/// }
///
/// let (tx, rx) = std::sync::mpsc::channel();
/// actix::System::new().block_on(async move {
///     let script: Script = serde_json::from_value(serde_json::json!([
///         { "do": "call", "tool": "db.save", "params": { "id": 1 }, "output": "ok" },
///     ])).unwrap();
///     let node = NodeId::new("save").unwrap();
///     let mut book = ScriptBook::new(World::new());
///     book.insert(node.clone(), script).unwrap();
///     let collector = Collector(tx).start();
///     let mut ids = IdSource::seeded(1);
///     let worker = WorkerActor::new(
///         ids.agent_id(),
///         WorkerConfig::default(),
///         AgentRegistry::new().with_fallback(book.factory()),
///         book.tools().unwrap(),
///         collector.recipient(),
///     ).start();
///     let supervisor = Sender { agent: ids.agent_id(), role: Role::Supervisor };
///     let assignment = Assignment {
///         node, role: "scripted".into(), goal: None, inputs: Default::default(),
///         capabilities: Capabilities::parse(["db.save"]).unwrap(),
///         budget: Budget::new(5, 2, 0, 0), evidence_text: vec![], preconditions: vec![],
///     };
///     let (run, task) = (ids.run_id(), ids.task_id());
///     let envelope = Envelope::new(run, task, supervisor, assignment, &mut ids);
///     worker.send(AssignMsg(envelope)).await.unwrap();
///     actix::clock::sleep(std::time::Duration::from_millis(20)).await;
/// });
/// let report = rx.recv().unwrap();
/// assert_eq!(report.result_kind, Some(ResultKind::VerifiedConclusion));
/// assert!(matches!(report.payload.outcome, Outcome::Answer { .. }));
/// ```
#[derive(Debug)]
pub struct WorkerActor {
    core: WorkerCore,
    /// Everything else: what the drive loop carries the core's effects out with.
    shell: Shell,
}

/// The worker actor's side of the drive loop ([`WorkerEnv`]): its sends, stores, spans and
/// calls in flight.
#[derive(Debug)]
struct Shell {
    reports: Replies,
    /// Replies of the input being handled, sent together when it is done (batched mode).
    /// Boxed on purpose: each reply arrives boxed and leaves in a [`ReportBatch`] as it came.
    #[allow(clippy::vec_box)]
    outbox: Vec<Box<Envelope<Report>>>,
    /// The run's store, against which a task's store preconditions are checked before each of
    /// its writes (see [`WorkerActor::with_store`]).
    store: Option<Arc<MemoryStore<quorate_protocols::Payload>>>,
    /// The run's span, parent of the attempts' spans (see [`WorkerActor::with_run_span`]).
    run_span: tracing::Span,
    /// The open attempt spans by task, with the attempt's number (empty while the run span
    /// is disabled).
    attempts: HashMap<TaskId, AttemptSpan>,
    /// A durable run's journal: every action is written to it before its tool is called.
    journal: Option<Arc<dyn crate::ActionJournal>>,
    /// The store of record of the tasks' books (see [`WorkerActor::with_books`]).
    books: Option<Arc<dyn crate::BookStore>>,
    /// The core's time: milliseconds since this worker was built (see [`crate::edge`]).
    clock: crate::edge::Clock,
    /// The calls in flight by tag: the task running each (aborting it drops the tool's
    /// future) and its span.
    in_flight: HashMap<u64, (tokio::task::JoinHandle<()>, tracing::Span)>,
}

impl WorkerActor {
    /// A worker with id `agent` replying to `reports`.
    #[must_use]
    pub fn new(
        agent: AgentId,
        config: WorkerConfig,
        agents: AgentRegistry,
        tools: ToolRegistry,
        reports: Recipient<ReportMsg>,
    ) -> Self {
        Self::with_replies(agent, config, agents, tools, Replies::Each(reports))
    }

    /// A worker with id `agent` replying to `reports` (one message per reply, or batched).
    #[must_use]
    pub fn with_replies(
        agent: AgentId,
        config: WorkerConfig,
        agents: AgentRegistry,
        tools: ToolRegistry,
        reports: Replies,
    ) -> Self {
        // The shell seeds the core's ids from the operating system (see `crate::edge`).
        let mut core = WorkerCore::new(agent, config, agents, tools, crate::edge::random_ids());
        // No store until `with_store`: the core refuses the writes it cannot check.
        core.set_store_checks(false);
        Self {
            core,
            shell: Shell {
                reports,
                outbox: Vec::new(),
                store: None,
                run_span: tracing::Span::none(),
                attempts: HashMap::new(),
                journal: None,
                books: None,
                clock: crate::edge::Clock::start(),
                in_flight: HashMap::new(),
            },
        }
    }

    /// The same worker, opening a span for each attempt it takes under `run` (the run's
    /// span), and one for each tool call under its attempt's (see [`crate::telemetry`]).
    /// While `run` is disabled (no subscriber wants it; the default: [`tracing::Span::none`]),
    /// no span is opened and nothing is kept.
    #[must_use]
    pub fn with_run_span(mut self, run: tracing::Span) -> Self {
        self.shell.run_span = run;
        self
    }

    /// Takes one assignment: the core judges it; an accepted one gets its attempt span, and
    /// its effects are carried out within it.
    fn assign(
        &mut self,
        now: Millis,
        envelope: impl Into<Box<Envelope<Assignment>>>,
        ctx: &mut Context<Self>,
    ) {
        let envelope = envelope.into();
        let traced = (!self.shell.run_span.is_disabled()).then(|| {
            (
                envelope.run,
                envelope.task,
                envelope.attempt,
                envelope.payload.node.clone(),
            )
        });
        let result = match self.takeover_book(&envelope) {
            Some(book) => self.core.handle_takeover(now, envelope, book),
            None => self.core.handle_assignment(now, envelope),
        };
        let span = match (&result, traced) {
            (Ok(()), Some((run, task, attempt, node))) => {
                let span = tracing::info_span!(
                    parent: &self.shell.run_span,
                    ATTEMPT_SPAN,
                    run = %run,
                    task = %task,
                    node = %node,
                    attempt,
                    outcome = tracing::field::Empty,
                );
                self.shell.attempts.insert(
                    task,
                    AttemptSpan {
                        span: span.clone(),
                        run,
                        attempt,
                    },
                );
                span
            }
            _ => tracing::Span::none(),
        };
        note(result);
        let _entered = span.enter();
        self.carry_out(ctx);
    }

    /// The same worker, checking tasks' store preconditions against `store` (the run's) before
    /// each write call. Without a store, the core refuses a write of a task that has store
    /// preconditions: they cannot be shown to hold ([`WorkerCore::set_store_checks`]).
    #[must_use]
    pub fn with_store(mut self, store: Arc<MemoryStore<quorate_protocols::Payload>>) -> Self {
        self.shell.store = Some(store);
        self.core.set_store_checks(true);
        self
    }

    /// The same worker in a durable run: each action is written to `journal` before its tool
    /// is called, and the `restored` actions (those a crashed process sent) are known as
    /// `outcome-unknown` (see [`WorkerCore::restore_actions`]).
    #[must_use]
    pub fn with_journal(
        mut self,
        journal: Arc<dyn crate::ActionJournal>,
        restored: &[crate::ActionIntent],
    ) -> Self {
        self.core.restore_actions(restored);
        self.shell.journal = Some(journal);
        self
    }

    fn fed(&mut self, result: Result<(), InputError>, ctx: &mut Context<Self>) {
        note(result);
        self.carry_out(ctx);
        self.flush();
    }

    /// Sends the replies collected in batched mode.
    fn flush(&mut self) {
        self.shell.flush(&mut self.core);
    }

    /// Carries out the core's effects ([`crate::drive::drive`]).
    fn carry_out(&mut self, ctx: &mut Context<Self>) {
        let mut env = ActorEnv {
            shell: &mut self.shell,
            ctx,
        };
        let drained = drive(&mut self.core, &mut env);
        for error in drained.refused {
            note(Err(error));
        }
    }
}

/// Counts and logs an input the core refused.
fn note(result: Result<(), InputError>) {
    if let Err(error) = result {
        metrics::counter!("quorate_worker_inputs_refused_total").increment(1);
        tracing::debug!(%error, "worker input refused");
    }
}

impl Shell {
    /// The span of a call (or query) of `tool` for `action`, under its attempt's span, or
    /// under the run's for a task this worker has no attempt span of (a delegated sub-task:
    /// attempt 0, no run id).
    fn call_span(&self, kind: CallKind, action: ActionId, tool: &str) -> tracing::Span {
        let (parent, attempt, run) = match self.attempts.get(&action.task) {
            Some(a) => (&a.span, a.attempt, Some(a.run)),
            None => (&self.run_span, 0, None),
        };
        // A span's name must be a constant: one arm per name, the same fields in both.
        macro_rules! span {
            ($name:expr) => {
                tracing::info_span!(
                    parent: parent,
                    $name,
                    run = run.map(tracing::field::display),
                    task = %action.task,
                    attempt,
                    tool,
                    action = %action,
                    outcome = tracing::field::Empty,
                )
            };
        }
        match kind {
            CallKind::Call => span!(TOOL_CALL_SPAN),
            CallKind::Query => span!(TOOL_QUERY_SPAN),
        }
    }

    /// Closes the attempt span of a final reply (not of an approval request or a quiet
    /// notice: the attempt goes on), recording how the attempt ended.
    fn replied(&mut self, reply: &Envelope<Report>) {
        if self.attempts.is_empty() {
            return;
        }
        let Some(outcome) = reply.payload.outcome.attempt_end() else {
            return;
        };
        if self.attempts.get(&reply.task).map(|a| a.attempt) == Some(reply.attempt) {
            if let Some(a) = self.attempts.remove(&reply.task) {
                a.span.record("outcome", outcome);
            }
        }
    }

    /// Sends the replies collected in batched mode.
    /// The assignments' boxes the core is done with go with them, back to the supervisor.
    fn flush(&mut self, core: &mut WorkerCore) {
        if let Replies::Batched(to) = &self.reports {
            if !self.outbox.is_empty() {
                metrics::counter!("quorate_worker_replies_total")
                    .increment(self.outbox.len() as u64);
                let size = self.outbox.len();
                let batch = std::mem::replace(&mut self.outbox, Vec::with_capacity(size));
                to.do_send(ReportBatch(batch, core.take_assignment_boxes()));
            }
        }
    }

    /// How long from now until `deadline` (a core time; zero if it passed).
    fn wait_until(&self, deadline: Millis) -> std::time::Duration {
        self.clock
            .instant(deadline)
            .saturating_duration_since(Instant::now())
    }
}

/// Which span [`WorkerActor::call_span`] opens.
#[derive(Clone, Copy)]
enum CallKind {
    /// A tool call ([`crate::telemetry::TOOL_CALL_SPAN`]).
    Call,
    /// A query about an action ([`crate::telemetry::TOOL_QUERY_SPAN`]).
    Query,
}

/// Records one tool call's wall time in [`CALL_DURATION_SECONDS`].
fn record_call_duration(tool: String, outcome: &'static str, took: std::time::Duration) {
    metrics::histogram!(CALL_DURATION_SECONDS, "tool" => tool, "outcome" => outcome)
        .record(took.as_secs_f64());
}

impl Actor for WorkerActor {
    type Context = Context<Self>;
}

impl Handler<AssignMsg> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: AssignMsg, ctx: &mut Context<Self>) {
        self.assign(self.shell.clock.now(), msg.0, ctx);
        self.flush();
    }
}

impl Handler<AssignBatch> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: AssignBatch, ctx: &mut Context<Self>) {
        let now = self.shell.clock.now();
        self.core.reuse_reply_boxes(msg.1);
        for envelope in msg.0 {
            self.assign(now, envelope, ctx);
            if self.shell.outbox.len() >= BATCH {
                // Replies leave in bounded batches, so a supervisor on another thread works on
                // the first ones while this worker is still on the rest.
                self.flush();
            }
        }
        self.flush();
    }
}

impl Handler<ControlMsg> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: ControlMsg, ctx: &mut Context<Self>) {
        let _span = tracing::debug_span!("control", run = %msg.0.run, task = %msg.0.task).entered();
        let result = self.core.handle_control(self.shell.clock.now(), msg.0);
        self.fed(result, ctx);
    }
}

impl Handler<CallEnded> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: CallEnded, ctx: &mut Context<Self>) {
        self.shell.in_flight.remove(&msg.call);
        let answer = WorkerAnswer::Call {
            action: msg.action,
            call: msg.call,
            answer: msg.answer,
        };
        let result = feed(&mut self.core, self.shell.clock.now(), answer);
        self.fed(result, ctx);
    }
}

impl Handler<QueryEnded> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: QueryEnded, ctx: &mut Context<Self>) {
        let answer = WorkerAnswer::Query {
            action: msg.action,
            end: msg.end,
        };
        let result = feed(&mut self.core, self.shell.clock.now(), answer);
        self.fed(result, ctx);
    }
}

#[path = "actor_env.rs"]
mod env;
#[path = "actor_failover.rs"]
mod failover;

use env::ActorEnv;

#[cfg(test)]
#[path = "actor_tests.rs"]
mod tests;
