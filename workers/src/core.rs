//! The worker core: a pure state machine for every task attempt a worker runs (no I/O, no
//! clock, no actix). Handlers (`handle_*`, with `now`) feed one input each; drain
//! [`WorkerCore::poll_effect`] after each and carry out every [`Effect`] (the one drive loop,
//! [`crate::drive::drive`], does). A handler's `Err`
//! ([`InputError`]) says the input did not fit (late, stale, duplicate); the state is then as
//! before, except that a late tool answer is still recorded in the task's [`ActionBook`].
//! Decisions about running attempts (cancel, approve, reject) are in `core/control.rs`;
//! failover (taking a task over from a lost worker, fencing) in `core/takeover.rs`.

use std::collections::VecDeque;
use std::time::Duration;

use quorate_protocols::{
    ActionId, AgentId, BoxPool, Budget, Envelope, IdSource, Millis, ResultKind, Role, Sender,
    TaskId,
};

use crate::agent::AgentRegistry;
use crate::attempt::{Attempt, Deps};
use crate::book::ActionBook;
use crate::failover::StoredBook;
use crate::history::History;
use crate::tool::{ToolAnswer, ToolRegistry};
use quorate_protocols::wire::{ActionCounts, Assignment, Outcome, Report};
use quorate_state::ActionRecord;

mod control;
mod effect;
mod input_error;
mod recycle;
mod routing;
mod takeover;

pub use effect::{Effect, ToolCall, ToolQuery};
pub use input_error::InputError;

/// Tunables of a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// How long one tool call (or query) may take before its outcome counts as unknown.
    pub call_timeout: Duration,
    /// Identical observations of one signature that count as no progress (`0`: never).
    pub no_progress_limit: u32,
}

impl Default for WorkerConfig {
    /// Two seconds per call, three repeats.
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(2),
            no_progress_limit: 3,
        }
    }
}

/// The worker's decision core: a pure state machine over every task attempt a worker runs.
///
/// No I/O, no clock, no actix. Feed one input per **handler** (`handle_*`, with `now`), then
/// drain [`WorkerCore::poll_effect`] and carry out each [`Effect`] (call or query a tool with a
/// timeout at its `deadline`, check a task's store preconditions, send a reply). **Getters** ([`WorkerCore::action`],
/// [`WorkerCore::counts`]) are for tests and metrics. A handler's
/// [`InputError`] says the input did not fit (late, stale, duplicate); the state is as before,
/// except that a late tool answer is still recorded in the task's [`ActionBook`].
///
/// Every loop iteration charges one step before asking the agent, so an attempt ends within
/// its step budget. Replies carry `result_kind = Some(kind)` for an answer (the kind the agent
/// claimed) and `Some(Suggestion)` for every other outcome.
///
/// ```
/// use quorate_protocols::*;
/// use quorate_workers::{AgentRegistry, Effect, Outcome, Proposal, ToolRegistry, WorkerConfig,
///     WorkerCore, Assignment, Agent, AgentContext};
///
/// struct Answer42;
/// impl Agent for Answer42 {
///     fn propose(&mut self, _: &AgentContext<'_>) -> Proposal {
///         Proposal::Finish { kind: ResultKind::Suggestion, value: 42.into(), evidence: vec![] }
///     }
/// }
/// let agents = AgentRegistry::new()
///     .with_fallback(|_: &Assignment| Box::new(Answer42) as Box<dyn Agent>);
/// let mut ids = IdSource::seeded(1);
/// let mut core = WorkerCore::new(ids.agent_id(), WorkerConfig::default(), agents,
///     ToolRegistry::new(), ids.fork());
/// let supervisor = Sender { agent: ids.agent_id(), role: Role::Supervisor };
/// let assignment = Assignment {
///     node: NodeId::new("n1").unwrap(), role: "any".into(), goal: None, inputs: Default::default(),
///     capabilities: Capabilities::none(), budget: Budget::steps(3), evidence_text: vec![], preconditions: vec![],
/// };
/// let (run, task) = (ids.run_id(), ids.task_id());
/// let now = 0; // milliseconds on the driver's clock
/// core.handle_assignment(now, Envelope::new(run, task, supervisor, assignment,
///     &mut ids)).unwrap();
/// let Some(Effect::Reply(reply)) = core.poll_effect() else { panic!() };
/// assert!(matches!(reply.payload.outcome, Outcome::Answer { .. }));
/// assert_eq!(reply.payload.spent, Budget::steps(1));
/// ```
pub struct WorkerCore {
    me: Sender,
    config: WorkerConfig,
    agents: AgentRegistry,
    tools: ToolRegistry,
    attempts: ahash::AHashMap<TaskId, Attempt>,
    books: ahash::AHashMap<TaskId, ActionBook>,
    /// Delegated sub-task -> the task that delegated it.
    parents: ahash::AHashMap<TaskId, TaskId>,
    /// What is left of ended or replaced attempts, per task: small, but enough to refuse a stale
    /// or duplicate assignment and to charge the next attempt what the earlier ones spent.
    history: History,
    /// Tool calls sent (tags them; see [`Effect::CallTool`]).
    calls: u64,
    effects: VecDeque<Effect>,
    /// Final and approval replies of sub-tasks, waiting to be handed to their parents (never
    /// effects: they do not leave the worker).
    routed: VecDeque<Box<Envelope<Report>>>,
    /// Tasks with a sub-task's approval request out with the supervisor (see
    /// [`Outcome::Quiet`](quorate_protocols::wire::Outcome::Quiet)).
    relaying: Vec<TaskId>,
    /// The driver can check store preconditions (see [`WorkerCore::set_store_checks`]).
    store: bool,
    /// Where reply dedupe keys and the ids of delegated sub-tasks come from.
    ids: IdSource,
    /// Message boxes for reuse: those of replies (handed over by the supervisor) and those of
    /// assignments whose attempt ended (handed back to it; see [`quorate_protocols::BoxPool`]).
    reply_boxes: BoxPool<Envelope<Report>>,
    assignment_boxes: BoxPool<Envelope<Assignment>>,
}

impl WorkerCore {
    /// A worker with id `agent` (replies are stamped `Sender { agent, role: Worker }`) that
    /// draws the ids it mints (reply dedupe keys, delegated sub-tasks) from `ids`.
    #[must_use]
    pub fn new(
        agent: AgentId,
        config: WorkerConfig,
        agents: AgentRegistry,
        tools: ToolRegistry,
        ids: IdSource,
    ) -> Self {
        Self {
            me: Sender {
                agent,
                role: Role::Worker,
            },
            config,
            agents,
            tools,
            attempts: ahash::AHashMap::new(),
            books: ahash::AHashMap::new(),
            parents: ahash::AHashMap::new(),
            history: History::default(),
            calls: 0,
            effects: VecDeque::new(),
            routed: VecDeque::new(),
            relaying: Vec::new(),
            store: true,
            ids,
            // Handed over with every assignment batch, one per assignment.
            reply_boxes: BoxPool::with_cap(256),
            // Handed back at every reply batch: a few batches' worth at most. A driver that
            // never takes them (replies sent one by one) keeps no more than that.
            assignment_boxes: BoxPool::with_cap(128),
        }
    }

    /// Whether the driver can check a task's store preconditions (it has the run's store; the
    /// default). Without, the core refuses every write of a task that has store preconditions
    /// (they cannot be shown to hold: [`PreconditionFailure::NoStore`]) instead of asking for a
    /// check ([`Effect::CheckPreconditions`]); writes of other tasks, and reads, run.
    ///
    /// [`PreconditionFailure::NoStore`]: quorate_state::PreconditionFailure::NoStore
    pub fn set_store_checks(&mut self, available: bool) {
        self.store = available;
    }

    // ----- getters

    /// How this worker stamps its replies.
    #[must_use]
    pub fn sender(&self) -> Sender {
        self.me
    }

    /// The tools (the driver runs them).
    #[must_use]
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Restores actions a crashed process sent to their tools ([`crate::ActionIntent`]s of a
    /// durable run being resumed): each is `outcome-unknown` until its tool is queried, so a
    /// new attempt that proposes it again learns what became of it instead of repeating it.
    pub fn restore_actions<'a>(
        &mut self,
        intents: impl IntoIterator<Item = &'a crate::ActionIntent>,
    ) {
        for i in intents {
            self.books
                .entry(i.action.task)
                .or_default()
                .restore_unknown(i.action, &i.tool, i.digest);
        }
    }

    /// What the task's book knows about `action`.
    #[must_use]
    pub fn action(&self, action: &ActionId) -> Option<&ActionRecord> {
        self.books.get(&action.task)?.get(action)
    }

    /// What the gate did in the current attempt of `task`.
    #[must_use]
    pub fn counts(&self, task: TaskId) -> Option<ActionCounts> {
        self.attempts
            .get(&task)
            .map(Attempt::counts)
            .or_else(|| self.history.counts(task))
    }

    // ----- polls

    /// The next effect to carry out, in order.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        quorate_state::pop_rewinding(&mut self.effects)
    }

    /// Puts `effect` back at the head of the queue (tests: carry out an effect they polled).
    #[cfg(test)]
    pub(crate) fn push_front_effect(&mut self, effect: Effect) {
        self.effects.push_front(effect);
    }

    // ----- handlers

    /// Starts an attempt. A newer attempt of the same task replaces an older one (whose late
    /// answers are still recorded, but wake nothing).
    pub fn handle_assignment(
        &mut self,
        now: Millis,
        envelope: impl Into<Box<Envelope<Assignment>>>,
    ) -> Result<(), InputError> {
        self.start(now, envelope.into(), None)
    }

    /// [`Self::handle_assignment`], of a task taken over with the book `takeover` (see
    /// [`Self::handle_takeover`]).
    fn start(
        &mut self,
        now: Millis,
        envelope: Box<Envelope<Assignment>>,
        takeover: Option<StoredBook>,
    ) -> Result<(), InputError> {
        let task = envelope.task;
        self.history.adopt_run_of(task);
        // One look-up each: the attempt running here (rarely one: the task is being retried
        // while its attempt still runs) and the last one that ended.
        let running = self.running_attempt(task);
        let ended = self.history.last(task);
        if let Some(current) = running.or(ended.map(|(attempt, _)| attempt)) {
            if envelope.attempt < current {
                return Err(InputError::StaleAttempt {
                    task,
                    current,
                    got: envelope.attempt,
                });
            }
            if envelope.attempt == current {
                return Err(InputError::DuplicateAssignment {
                    task,
                    attempt: current,
                });
            }
        }
        let here = if running.is_some() {
            self.keep_spending_of_replaced(task);
            self.history.spent(task)
        } else {
            ended.map_or(Budget::ZERO, |(_, spent)| spent)
        };
        let (already, takeover) = takeover::carry(here, takeover);
        let agent = match self.agents.create(&envelope.payload) {
            Ok(agent) => agent,
            Err(e) => {
                self.fail_assignment(&envelope, e.to_string());
                self.end_unstarted(task, envelope.attempt);
                return Ok(());
            }
        };
        let mut attempt = Attempt::new(envelope, agent, &self.config);
        if let Err(e) = attempt.charge_earlier(already) {
            self.fail_assignment(attempt.envelope(), e.to_string());
            self.end_unstarted(task, attempt.number());
            return Ok(());
        }
        #[cfg(feature = "mutants")]
        if quorate_protocols::mutant::is(quorate_protocols::mutant::Mutant::IdempotencyPerAttempt) {
            self.books.remove(&task);
        }
        // The task's record of actions; a task that never proposes one keeps none.
        // (Most workers' tasks propose no action: no book, and no hashing to find none.)
        let mut book = if self.books.is_empty() {
            ActionBook::default()
        } else {
            self.books.remove(&task).unwrap_or_default()
        };
        book.import(takeover);
        book.forget_ended_without_effect();
        let mut spawn = Vec::new();
        let mut deps = Deps {
            now,
            me: self.me,
            config: &self.config,
            tools: &self.tools,
            store: self.store,
            book: &mut book,
            out: &mut self.effects,
            parents: &self.parents,
            routed: &mut self.routed,
            spawn: &mut spawn,
            calls: &mut self.calls,
            ids: &mut self.ids,
            reply_boxes: &mut self.reply_boxes,
        };
        attempt.run(&mut deps);
        if book.iter().next().is_some() {
            self.books.insert(task, book);
        }
        if attempt.is_done() && !attempt.has_open_children() && spawn.is_empty() {
            // Done at once (the common case): it never enters `attempts`.
            if !self.attempts.is_empty() {
                self.attempts.remove(&task);
            }
            self.record_end(task, &attempt);
            self.assignment_boxes.give(attempt.envelope);
            return Ok(());
        }
        self.attempts.insert(task, attempt);
        self.settle_delegations(now, spawn);
        self.reap(task);
        Ok(())
    }

    /// Keeps what the next attempt of `task` needs from the attempt that ended.
    fn record_end(&mut self, task: TaskId, attempt: &Attempt) {
        self.history.ended(
            task,
            attempt.number(),
            attempt.spent_or_reserved(),
            attempt.counts(),
        );
    }

    /// An answer for an attempt that already ended (and was reaped): it wakes nothing, but the
    /// task's action record still learns what happened, so a later attempt never repeats it.
    fn late_answer(
        &mut self,
        action: ActionId,
        answer: Option<&ToolAnswer>,
    ) -> Result<(), InputError> {
        let task = action.task;
        let Some(book) = self.books.get_mut(&task) else {
            return Err(InputError::UnknownTask { task });
        };
        match answer {
            Some(answer) => {
                if book.resolve(action, answer)? == crate::book::Resolved::DuplicateEffect {
                    self.history.duplicate_effect(task);
                }
            }
            None => book.mark_absent(action),
        }
        Err(InputError::NotAwaited { action })
    }

    /// Attempt `attempt` of `task` could not start: it still replaces the older attempt (which
    /// stops counting), and a repeat of its assignment is refused as a duplicate.
    fn end_unstarted(&mut self, task: TaskId, attempt: u32) {
        self.attempts.remove(&task);
        self.history.unstarted(task, attempt);
    }

    /// Replies to an assignment that could not even start.
    fn fail_assignment(&mut self, envelope: &Envelope<Assignment>, observation: String) {
        self.reply_unstarted(
            envelope,
            Outcome::Failed { observation },
            ActionCounts::default(),
        );
    }

    /// The final reply of an attempt that never started, to the message that ended it: it
    /// spent nothing itself, and reports what the task's earlier attempts here spent (the figure
    /// an attempt that started would have been charged up front), so the supervisor never
    /// charges the task less than that. `actions` are counts it carries for an earlier attempt
    /// whose own reply is late.
    fn reply_unstarted<P>(&mut self, to: &Envelope<P>, outcome: Outcome, actions: ActionCounts) {
        let report = Report {
            outcome,
            spent: self.history.spent(to.task),
            actions,
            calls: Vec::new(),
        };
        let reply = to.reply(self.me, ResultKind::Suggestion, report, &mut self.ids);
        if self.parents.contains_key(&reply.task) {
            // A sub-task's: handed to its parent.
            self.routed.push_back(self.reply_boxes.boxed(reply));
        } else {
            let reply = self.reply_boxes.boxed(reply);
            self.effects.push_back(Effect::Reply(reply));
        }
    }

    /// Moves an ended attempt (with no sub-task still running) out of `attempts`.
    fn reap(&mut self, task: TaskId) {
        let done = self
            .attempts
            .get(&task)
            .is_some_and(|a| a.is_done() && !a.has_open_children());
        if done {
            if let Some(a) = self.attempts.remove(&task) {
                self.record_end(task, &a);
                self.assignment_boxes.give(a.envelope);
            }
            // A task that never proposed an action keeps no action record.
            if self
                .books
                .get(&task)
                .is_some_and(|b| b.iter().next().is_none())
            {
                self.books.remove(&task);
            }
        }
    }

    /// The attempt number `task` is at here: its running attempt's, else its last ended one's.
    fn latest_attempt(&self, task: TaskId) -> Option<u32> {
        self.running_attempt(task)
            .or_else(|| self.history.attempt(task))
    }

    /// The number of `task`'s running attempt, if one runs here.
    fn running_attempt(&self, task: TaskId) -> Option<u32> {
        if self.attempts.is_empty() {
            None
        } else {
            self.attempts.get(&task).map(Attempt::number)
        }
    }

    /// A newer attempt replaces `task`'s running one, which may still be spending: its spending
    /// is kept for the task.
    fn keep_spending_of_replaced(&mut self, task: TaskId) {
        if self.attempts.is_empty() {
            return;
        }
        if let Some(old) = self.attempts.get(&task) {
            let (number, spent) = (old.number(), old.spent_or_reserved());
            self.history.replaced(task, number, spent);
        }
    }

    /// The tool answered the call for `action`.
    pub fn handle_tool_answer(
        &mut self,
        now: Millis,
        action: ActionId,
        call: u64,
        answer: ToolAnswer,
    ) -> Result<(), InputError> {
        if !self.attempts.contains_key(&action.task) {
            return self.late_answer(action, Some(&answer));
        }
        self.with_attempt(now, action.task, |a, d| {
            a.on_answer(d, action, call, answer)
        })
    }

    /// The shell checked the task's store preconditions before the write `action`
    /// ([`Effect::CheckPreconditions`]): `Ok`, or the first failing check.
    pub fn handle_preconditions(
        &mut self,
        now: Millis,
        action: ActionId,
        outcome: Result<(), quorate_state::PreconditionFailure>,
    ) -> Result<(), InputError> {
        self.with_attempt(now, action.task, |a, d| {
            a.on_preconditions(d, action, outcome)
        })
    }

    /// The call for `action` did not answer by its deadline: its outcome is unknown.
    pub fn handle_tool_timeout(
        &mut self,
        now: Millis,
        action: ActionId,
        call: u64,
    ) -> Result<(), InputError> {
        self.with_attempt(now, action.task, |a, d| a.on_timeout(d, action, call))
    }

    /// The tool answered a query about `action` (`None`: nothing committed).
    pub fn handle_query_answer(
        &mut self,
        now: Millis,
        action: ActionId,
        answer: Option<ToolAnswer>,
    ) -> Result<(), InputError> {
        if !self.attempts.contains_key(&action.task) {
            return self.late_answer(action, answer.as_ref());
        }
        self.with_attempt(now, action.task, |a, d| {
            a.on_query_answer(d, action, answer)
        })
    }

    /// The query about `action` did not answer by its deadline; the attempt fails (the
    /// action stays unknown, and a later attempt queries it again before anything else).
    pub fn handle_query_timeout(
        &mut self,
        now: Millis,
        action: ActionId,
    ) -> Result<(), InputError> {
        self.with_attempt(now, action.task, |a, d| a.on_query_timeout(d, action))
    }

    fn with_attempt(
        &mut self,
        now: Millis,
        task: TaskId,
        f: impl FnOnce(&mut Attempt, &mut Deps<'_>) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        let mut spawn = Vec::new();
        let result = self.with_attempt_spawning(now, task, &mut spawn, f);
        self.settle_delegations(now, spawn);
        self.reap(task);
        result
    }
}

impl std::fmt::Debug for WorkerCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCore")
            .field("me", &self.me)
            .field("tools", &self.tools)
            .field("attempts", &self.attempts.len())
            .field("effects", &self.effects.len())
            .finish()
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
