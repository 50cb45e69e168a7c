//! The supervisor core: a plain state machine over one run.
//!
//! Inputs are methods named `handle_*` (with the current time passed in as
//! [`Millis`](quorate_protocols::Millis), the one time type of every core); the
//! outputs are [`Effect`]s, drained with [`SupervisorCore::poll_effect`]. The core performs no
//! I/O, reads no clock and draws its ids (task-id prefix, dedupe keys, correlation ids) from the
//! [`IdSource`] it is built with, so a seeded simulator, property tests and the actix shell all drive
//! the same code. Call order: [`start`](SupervisorCore::start) once, then any `handle_*` in any
//! order, draining effects after each, until [`stop_reason`](SupervisorCore::stop_reason) is
//! `Some`.

mod approval;
mod config;
mod dispatch;
mod effect;
mod replan;
mod reply;
mod resume;
mod stop;
mod task;

pub use config::{ApprovalPolicy, SupervisorConfig};
pub use effect::{CheckTicket, CommitTicket, Effect, MessageCounts};
pub use replan::ReplanError;
pub(crate) use reply::{judge, ReplyGuard};
pub use resume::ResumeError;
use task::StateCounts;
pub(crate) use task::{state_index, SeenKeys, TaskSlot};

use std::collections::{HashMap, VecDeque};

use quorate_protocols::{
    AgentId, Budget, Envelope, IdSource, Plan, RunId, Sender, TaskEvent, TaskId, TaskState, Version,
};
use quorate_state::Account;
use quorate_workers::messages::{Control, Outcome, Report};

use crate::event::{Event, EventKind, Record, RecordTask, Rejection};
use crate::{acceptance, StopReason};
use task::TaskIndex;

/// The supervisor's pure core. See the module docs for the call order.
#[derive(Debug)]
pub struct SupervisorCore {
    run: RunId,
    plan: Plan,
    plan_version: u32,
    config: SupervisorConfig,
    me: Sender,
    workers: Vec<Sender>,
    next_worker: usize,
    tasks: Vec<TaskSlot>,
    /// `result/<run>/`: result keys are this plus the node id.
    result_prefix: String,
    /// Task id -> node index.
    by_id: TaskIndex,
    ready: VecDeque<u32>,
    /// Built by `resume` from a run log: `start` continues the run.
    resumed: bool,
    /// Replay saw a store precondition fail (node, observation) with a fallback plan at hand
    /// but no `replanned` after it: the crash came in the middle of the replan, which
    /// [`start_resumed`](Self::start_resumed) carries out.
    replan_pending: Option<(u32, String)>,
    /// Tasks dropped by a replan, by id: their replies are late, and the acknowledgement of
    /// a cancel still settles what one was charged.
    retired: HashMap<TaskId, replan::Retired>,
    /// The plan to switch to when a store precondition fails.
    fallback: Option<quorate_protocols::PlanSpec>,
    /// `(deadline, task, attempt)` in dispatch order; entries of attempts that ended are
    /// skipped lazily. Attempt timeouts are uniform, so the front is the earliest.
    timeouts: VecDeque<(u64, TaskId, u32)>,
    /// Number of tasks in each state (indexed by [`state_index`]).
    counts: StateCounts,
    root: Account,
    granted_total: Budget,
    stop: Option<StopReason>,
    pending_stop: Option<StopReason>,
    effects: VecDeque<Effect>,
    seq: u64,
    steps: u64,
    messages: MessageCounts,
    actions: quorate_workers::messages::ActionCounts,
    /// Tasks told to stop (cancel or rejected approval) whose worker has not acknowledged yet,
    /// by task id (a replan may drop or move the task meanwhile): the attempt told and its
    /// worker. The run's report waits for them (up to `attempt_timeout_ms`), so their actions
    /// and any reply that follows them are counted.
    awaiting_ack: HashMap<TaskId, (u32, AgentId)>,
    /// `run-started` and `replanned` list the plan's nodes ([`Self::set_describe_plan`]).
    describe_plan: bool,
    /// While draining: the time at which the run stops regardless.
    drain_until: Option<u64>,
    /// The drain is over; the run may stop.
    drained: bool,
    /// Where the ids this core mints come from.
    ids: IdSource,
}

impl SupervisorCore {
    /// A core for `plan`, run by `workers` (their stamped identities, in worker-index order),
    /// drawing the ids it mints from `ids` (the shell's random source, or a seeded one).
    ///
    /// # Panics
    /// If `workers` is empty.
    pub fn new(
        run: RunId,
        plan: Plan,
        config: SupervisorConfig,
        me: Sender,
        workers: Vec<Sender>,
        mut ids: IdSource,
    ) -> Self {
        assert!(
            !workers.is_empty(),
            "a supervisor needs at least one worker"
        );
        let root = root_account(&plan);
        let by_id = TaskIndex::new(plan.len() as u32, ids.task_prefix());
        let tasks = (0..plan.len() as u32)
            .map(|i| TaskSlot::new(plan.deps(i).len() as u32))
            .collect::<Vec<_>>();
        let counts = StateCounts::of(&tasks);
        Self {
            run,
            plan,
            plan_version: 1,
            config,
            me,
            workers,
            next_worker: 0,
            result_prefix: crate::run::result_key(run, ""),
            tasks,
            by_id,
            ready: VecDeque::new(),
            resumed: false,
            replan_pending: None,
            retired: HashMap::new(),
            fallback: None,
            timeouts: VecDeque::new(),
            counts,
            root,
            granted_total: Budget::ZERO,
            stop: None,
            pending_stop: None,
            effects: VecDeque::new(),
            seq: 0,
            steps: 0,
            messages: MessageCounts::default(),
            actions: Default::default(),
            awaiting_ack: HashMap::new(),
            describe_plan: false,
            drain_until: None,
            drained: false,
            ids,
        }
    }

    /// Evidence text handed to node `node` with its assignment. It is data: nothing in it can add
    /// a tool call, widen scope or change the goal.
    pub fn set_evidence_text(&mut self, node: u32, texts: Vec<String>) {
        if let Some(slot) = self.tasks.get_mut(node as usize) {
            slot.set_evidence_text(texts);
        }
    }

    // ----- getters -----

    /// The run.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Why the run stopped, once it has.
    pub fn stop_reason(&self) -> Option<&StopReason> {
        self.stop.as_ref()
    }

    /// The result node `i` completed with, as the core holds it (what its dependents get).
    #[must_use]
    pub fn task_result(&self, i: u32) -> Option<&serde_json::Value> {
        self.tasks.get(i as usize).and_then(|t| t.result.as_ref())
    }

    /// Effects waiting to be polled.
    #[must_use]
    pub fn pending_effects(&self) -> usize {
        self.effects.len()
    }

    /// State of node `i`.
    pub fn task_state(&self, i: u32) -> TaskState {
        self.tasks[i as usize].state
    }

    /// The task id of node `i`.
    pub fn task_id(&self, i: u32) -> TaskId {
        self.by_id.id(i)
    }

    /// A snapshot for the run report.
    pub fn snapshot(&self) -> crate::report::RunReport {
        crate::report::RunReport::from_core(self)
    }

    /// The report of a stopped run, built from the core's per-task records, which it takes
    /// (they are most of a large run's memory, and the report's rows reuse it): afterwards the
    /// core knows no task, ignores every input and has no report to give again (`None`). Before
    /// the stop it is [`Self::snapshot`] and takes nothing.
    pub fn final_report(&mut self) -> Option<crate::report::RunReport> {
        if self.finished() {
            return None;
        }
        if self.stop.is_none() {
            return Some(self.snapshot());
        }
        Some(crate::report::RunReport::take_from_core(self))
    }

    /// The final report took the per-task records (a plan has at least one task): no input is
    /// handled any more.
    fn finished(&self) -> bool {
        self.stop.is_some() && self.tasks.is_empty()
    }

    /// Takes the per-task records (see [`Self::final_report`]).
    pub(crate) fn take_tasks(&mut self) -> Vec<TaskSlot> {
        self.by_id.clear();
        std::mem::take(&mut self.tasks)
    }

    pub(crate) fn tasks(&self) -> &[TaskSlot] {
        &self.tasks
    }

    pub(crate) fn root(&self) -> &Account {
        &self.root
    }

    pub(crate) fn granted_total(&self) -> Budget {
        self.granted_total
    }

    pub(crate) fn messages(&self) -> MessageCounts {
        self.messages
    }

    pub(crate) fn actions(&self) -> quorate_workers::messages::ActionCounts {
        self.actions
    }

    pub(crate) fn plan_version(&self) -> u32 {
        self.plan_version
    }

    // ----- polls -----

    /// The next effect to carry out, in order.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        quorate_state::pop_rewinding(&mut self.effects)
    }

    /// The earliest time at which [`handle_tick`](Self::handle_tick) has something to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.stop.is_some() {
            return None;
        }
        if self.drain_until.is_some() {
            return self.drain_until;
        }
        let attempt = self.timeouts.front().map(|&(at, _, _)| at);
        attempt.into_iter().chain(self.config.deadline_ms).min()
    }

    // ----- handlers -----

    /// Starts the run: tasks without dependencies become ready and are dispatched. A core
    /// rebuilt with [`resume`](Self::resume) continues instead ([`start_resumed`](Self::start_resumed)).
    pub fn start(&mut self, now: u64) {
        if self.resumed {
            self.start_resumed(now);
            return;
        }
        self.record(
            now,
            None,
            EventKind::RunStarted {
                tasks: self.plan.len(),
                plan_version: self.plan_version,
                nodes: self.described_plan(),
            },
        );
        for i in 0..self.plan.len() as u32 {
            if self.tasks[i as usize].deps_left == 0 {
                self.make_ready(now, i);
            }
        }
        self.dispatch_ready(now);
        self.settle_run(now);
    }

    /// A reply arrived from a worker (boxed or not: the batch messages carry boxes, so a reply
    /// is never copied whole on its way in).
    pub fn handle_report(&mut self, now: u64, reply: impl Into<Box<Envelope<Report>>>) {
        let mut reply: Box<Envelope<Report>> = reply.into();
        if self.finished() {
            return;
        }
        self.messages.delivered += 1;
        let Some(i) = self.by_id.get(&reply.task) else {
            // A task a replan dropped may still acknowledge its cancel.
            let acknowledges = self.take_ack(&reply);
            if acknowledges {
                self.add_actions(reply.payload.actions);
                self.acknowledge_retired(now, reply.task, reply.payload.spent);
            }
            let reason = if self.retired.contains_key(&reply.task) {
                Rejection::Late
            } else {
                Rejection::Unauthorized
            };
            self.close_unaccepted(now, None, &reply, acknowledges, reason);
            return;
        };
        let slot = &self.tasks[i as usize];
        let guard = ReplyGuard {
            run: self.run,
            state: slot.state,
            attempt: slot.attempt,
            version: Version::new(u64::from(slot.version)),
            assigned: slot.worker.map(|w| self.workers[w as usize].agent),
            seen: &slot.seen,
        };
        if let Err(reason) = judge(&guard, &reply) {
            // The worker's final reply to a cancel or a rejected approval: the task is terminal,
            // as expected, so the reply is not a result, but it settles the task's charge and
            // its action counts are kept.
            let acknowledges =
                !self.tasks[i as usize].seen.contains(&reply.dedupe) && self.take_ack(&reply);
            if acknowledges {
                self.tasks[i as usize].seen.insert(reply.dedupe);
                self.record_calls(now, i, std::mem::take(&mut reply.payload.calls));
                let spent = reply.payload.spent;
                self.add_actions(reply.payload.actions);
                self.acknowledge(now, i, spent);
            }
            self.close_unaccepted(now, Some(i), &reply, acknowledges, reason);
            return;
        }
        self.steps += 1;
        self.tasks[i as usize].seen.insert(reply.dedupe);
        let mut report = reply.payload;
        self.record_calls(now, i, std::mem::take(&mut report.calls));
        self.record(now, Some(i), EventKind::ReplyAccepted);
        self.tasks[i as usize].spent = report.spent;
        self.add_actions(report.actions);
        match report.outcome {
            Outcome::Answer { value, receipts } => {
                let node = self.plan.node(i);
                match acceptance::check(&node.acceptance, reply.result_kind, &value, &receipts) {
                    Ok(()) => self.complete(now, i, value, reply.evidence),
                    Err(observation) => {
                        self.record(
                            now,
                            Some(i),
                            EventKind::AcceptanceFailed {
                                observation: observation.clone(),
                            },
                        );
                        self.fail(now, i, format!("acceptance check: {observation}"));
                    }
                }
            }
            Outcome::ApprovalRequested { action, reason } => {
                self.transition(now, i, TaskEvent::ApprovalRequested);
                self.tasks[i as usize].park_approval(action);
                // A delegated sub-task's request: the task's other sub-tasks may still be
                // working, so the task is not idle until its worker says `Quiet` (which may
                // have come first).
                let sub_task = action.task != self.by_id.id(i);
                let slot = &mut self.tasks[i as usize];
                let quiet = slot.take_early_quiet(action);
                slot.set_not_alone(sub_task && !quiet);
                self.record(now, Some(i), EventKind::ApprovalRequested { reason });
                let node = self.plan.node(i).id.to_string();
                let decision = self.config.approvals.decide(&node);
                if let Some(approved) = decision {
                    self.decide_approval(now, i, approved);
                }
            }
            Outcome::Failed { observation } => self.fail(now, i, observation),
            Outcome::NoProgress { .. } => {
                let node = self.plan.node(i).id.to_string();
                self.stop_with(now, i, TaskEvent::Failed, StopReason::NoProgress { node });
            }
            Outcome::LimitReached { component } => {
                let reason = StopReason::StoppedLimit { component };
                self.stop_with(now, i, TaskEvent::LimitReached, reason);
            }
            Outcome::Cancelled => self.end_task(now, i, TaskEvent::Cancelled),
            Outcome::Quiet { action } => {
                let slot = &mut self.tasks[i as usize];
                if slot.parked_approval() == Some(action) {
                    slot.set_not_alone(false);
                } else {
                    // It overtook its request: the request will find it.
                    slot.note_early_quiet(action);
                }
            }
        }
        self.after_input(now);
    }

    /// Replies that arrived together, in order. Once the run has stopped, the rest are not
    /// handled: they arrived after the stop, like replies of a later message would.
    pub fn handle_reports(
        &mut self,
        now: u64,
        replies: impl IntoIterator<Item = impl Into<Box<Envelope<Report>>>>,
    ) {
        for reply in replies {
            if self.stop.is_some() {
                break;
            }
            self.handle_report(now, reply);
        }
    }

    /// A human decided about node `node`'s pending approval.
    /// A node index that is out of range, or a task that is not waiting, is ignored.
    pub fn handle_approval(&mut self, now: u64, node: u32, approved: bool) {
        let waiting = self
            .tasks
            .get(node as usize)
            .is_some_and(|t| t.state == TaskState::WaitingApproval);
        if waiting {
            self.decide_approval(now, node, approved);
            self.after_input(now);
        }
    }

    /// Cancels the run: every live task is cancelled and told so. A cancel that finds nothing
    /// left to run (every task already ended) is not a cancellation: it changes nothing, and the
    /// run ends as its tasks did.
    pub fn handle_cancel(&mut self, now: u64) {
        if self.cancel_run(now) {
            self.settle_run(now);
        }
    }

    /// Time passed: enforce the deadline and re-dispatch attempts whose replies were lost.
    pub fn handle_tick(&mut self, now: u64) {
        if self.stop.is_some() {
            return;
        }
        if let Some(until) = self.drain_until {
            if now >= until {
                self.drained = true;
                self.settle_run(now);
            }
            return;
        }
        if self.config.deadline_ms.is_some_and(|d| now >= d) {
            self.begin_stop(now, StopReason::Deadline);
            self.settle_run(now);
            return;
        }
        while let Some(&(at, id, attempt)) = self.timeouts.front() {
            if at > now {
                break;
            }
            self.timeouts.pop_front();
            if let Some(i) = self.live_attempt(id, attempt) {
                let t = &self.tasks[i as usize];
                if t.attempt >= self.config.max_attempts {
                    let n = t.attempt;
                    self.fail(now, i, format!("no reply after {n} attempts"));
                } else {
                    self.transition(now, i, TaskEvent::Requeued);
                    self.ready.push_back(i);
                }
            }
        }
        self.after_input(now);
    }

    // ----- internals -----

    /// `true` (and no longer awaited) if `reply` acknowledges a cancel or a rejected approval sent
    /// for its task: a final reply of the attempt told, from the worker told. Usually it says
    /// cancelled; an attempt that ended just before the cancel reached its worker answered with
    /// its own final reply, and the worker has nothing more to say.
    fn take_ack(&mut self, reply: &Envelope<Report>) -> bool {
        let told = self
            .awaiting_ack
            .get(&reply.task)
            .is_some_and(|&(attempt, worker)| {
                reply.run == self.run
                    && reply.attempt == attempt
                    && reply.sender.agent == worker
                    && !matches!(
                        reply.payload.outcome,
                        Outcome::ApprovalRequested { .. } | Outcome::Quiet { .. }
                    )
            });
        if told {
            self.awaiting_ack.remove(&reply.task);
        }
        told
    }

    /// The node index of task `id` if it is running `attempt`.
    fn live_attempt(&self, id: TaskId, attempt: u32) -> Option<u32> {
        let i = self.by_id.get(&id)?;
        let t = &self.tasks[i as usize];
        (t.state == TaskState::Running && t.attempt == attempt).then_some(i)
    }

    fn after_input(&mut self, now: u64) {
        // Forget timeouts of attempts that already ended.
        while let Some(&(_, id, attempt)) = self.timeouts.front() {
            if self.live_attempt(id, attempt).is_some() {
                break;
            }
            self.timeouts.pop_front();
        }
        if self
            .config
            .cancel_after_steps
            .is_some_and(|k| self.steps >= k)
        {
            self.cancel_run(now);
        }
        self.dispatch_ready(now);
        self.settle_run(now);
    }

    /// Begins a cancel of the run, unless it is stopping already or nothing is left to run
    /// (every task ended: a cancel would stop nothing, so the run ends as its tasks did).
    /// Whether it began.
    fn cancel_run(&mut self, now: u64) -> bool {
        if self.stop.is_some() || self.pending_stop.is_some() || self.counts.all_terminal() {
            return false;
        }
        self.record(now, None, EventKind::CancelRequested);
        self.begin_stop(now, StopReason::Cancelled);
        true
    }

    fn record(&mut self, now: u64, task: Option<u32>, kind: EventKind) {
        self.record_as(now, task.map_or(RecordTask::None, RecordTask::Node), kind);
    }

    /// [`record`](Self::record) for any [`RecordTask`] (e.g. a task a replan dropped, by name).
    fn record_as(&mut self, now: u64, task: RecordTask, kind: EventKind) {
        let record = Record {
            seq: self.seq,
            task,
            at_ms: now,
            kind,
        };
        self.seq += 1;
        self.effects.push_back(Effect::Record(record));
    }

    /// The full event of `record`, an [`Effect::Record`] of this core (taken from it since its
    /// last input: see [`Record`]).
    #[must_use]
    pub fn event(&self, record: Record) -> Event {
        record.into_event(self.run, &self.plan)
    }

    /// Packs `record`, an [`Effect::Record`] of this core, into the run log's entry `out`
    /// exactly as its [`event`](Self::event) packs, without building the event (the shell's
    /// hot path). Like `event`, before the core's next input.
    pub(crate) fn pack_record(
        &self,
        record: &Record,
        at: quorate_state::Slot,
        names: &mut crate::event_pack::Names,
        out: &mut Vec<u8>,
    ) {
        let plan = (&self.plan, self.plan_version);
        crate::event_pack::pack_record(record, self.run, plan, at, names, out);
    }

    /// Gives the records still waiting in the queue their node's name: the plan is about to
    /// change, and with it what a node index means.
    fn name_waiting_records(&mut self) {
        for effect in &mut self.effects {
            if let Effect::Record(Record { task, .. }) = effect {
                if let RecordTask::Node(i) = *task {
                    *task = RecordTask::Named(self.plan.node(i).id.shared());
                }
            }
        }
    }

    /// Counts a reply the reply rules did not accept (for `reason`), after it was taken as its
    /// task's acknowledgement or not: a plain acknowledgement (`Cancelled`) is counted as one;
    /// anything else is rejected (an answer that crossed a cancel is also a late reply). An
    /// acknowledgement may be the last thing a stopping run waited for.
    fn close_unaccepted(
        &mut self,
        now: u64,
        task: Option<u32>,
        reply: &Envelope<Report>,
        acknowledges: bool,
        reason: Rejection,
    ) {
        if acknowledges && reply.payload.outcome == Outcome::Cancelled {
            self.messages.acknowledged += 1;
        } else {
            self.reject(now, task, reason);
        }
        if acknowledges {
            self.settle_run(now);
        }
    }

    fn reject(&mut self, now: u64, task: Option<u32>, reason: Rejection) {
        self.messages.count_rejection(reason);
        self.record(now, task, EventKind::rejected(reason));
    }

    fn transition(&mut self, now: u64, i: u32, event: TaskEvent) -> bool {
        let from = self.tasks[i as usize].state;
        match from.on(event) {
            Ok(to) => {
                self.set_state(i, to);
                self.record(now, Some(i), EventKind::Transition { from, to });
                true
            }
            Err(_) => false,
        }
    }

    /// Task `i` is in state `to` now (the caller records why).
    fn set_state(&mut self, i: u32, to: TaskState) {
        let slot = &mut self.tasks[i as usize];
        self.counts.moved(slot.state, to);
        slot.state = to;
    }

    fn add_actions(&mut self, a: quorate_workers::messages::ActionCounts) {
        self.actions += a;
    }
}

/// The run's root account: the plan's budget, with its coordination reserve held back. Star and
/// peer runs open it alike.
pub(crate) fn root_account(plan: &Plan) -> Account {
    let spec = plan.spec();
    Account::open(None, spec.budget, spec.reserve)
        .expect("a validated plan's reserve fits its budget")
}
