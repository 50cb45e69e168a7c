//! The supervisor core: a plain state machine over one run.
//!
//! Inputs are methods named `handle_*` (with the current time passed in as
//! [`Millis`](quorate_protocols::Millis), the one time type of every core); the
//! outputs are [`SupervisorEffect`]s, drained with [`SupervisorCore::poll_effect`] (by the one drive
//! loop, [`crate::drive::drive`]). The core performs no
//! I/O, reads no clock and draws its ids (task-id prefix, dedupe keys, correlation ids) from the
//! [`IdSource`] it is built with, so a seeded simulator, property tests and the actix shell all drive
//! the same code. Call order: [`start`](SupervisorCore::start) once, then any `handle_*` in any
//! order, draining effects after each, until [`stop_reason`](SupervisorCore::stop_reason) is
//! `Some`.

mod approval;
mod config;
mod dispatch;
mod effect;
mod liveness;
mod phase;
mod recycle;
mod refusal;
mod replan;
mod replies;
mod reply;
mod resume;
mod stop;
mod task;
#[cfg(test)]
pub(crate) mod test_core;
mod top_up;

pub(crate) use crate::rules::refuse;
use crate::rules::{on_timeout, AttemptTimeouts, Expiry, ReplyGuard};
pub use config::{ApprovalPolicy, ConfigError, SupervisorConfig};
pub use effect::{CheckTicket, CommitOutcome, CommitTicket, MessageCounts, SupervisorEffect};
pub use refusal::{InputRefused, ReplyRefusal};
pub(crate) use replan::check_new_version;
pub use replan::ReplanError;
pub use resume::ResumeError;
use task::StateCounts;
pub(crate) use task::{state_index, TaskSlot};
pub use top_up::{TopUp, TopUpError, TopUpPolicy, TopUpRequest};

use std::collections::{HashMap, VecDeque};

use quorate_protocols::wire::{Control, Outcome, Report};
use quorate_protocols::{
    AgentId, Budget, Envelope, IdSource, Plan, RunId, Sender, TaskEvent, TaskId, TaskState, Version,
};
use quorate_state::Account;

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
    /// Workers whose lease expired (by index): no task goes to them until they renew.
    lost: Vec<bool>,
    /// The roles each worker serves (by index; empty: every role), see
    /// [`Self::set_worker_roles`].
    worker_roles: Vec<Vec<String>>,
    next_worker: usize,
    tasks: Vec<TaskSlot>,
    /// `result/<run>/`: result keys are this plus the node id.
    result_prefix: String,
    /// Task id -> node index.
    by_id: TaskIndex,
    ready: VecDeque<u32>,
    /// Where the run is: running, stopping, draining, stopped, or replayed from a log and
    /// not started yet.
    phase: phase::RunPhase,
    /// Tasks dropped by a replan, by id: their replies are late, and the acknowledgement of
    /// a cancel still settles what one was charged.
    retired: HashMap<TaskId, replan::Retired>,
    /// The plan to switch to when a store precondition fails.
    fallback: Option<quorate_protocols::PlanSpec>,
    /// `(deadline, task, attempt)` in dispatch order; entries of attempts that ended are
    /// skipped lazily. Attempt timeouts are uniform, so the front is the earliest.
    timeouts: AttemptTimeouts<TaskId>,
    /// Number of tasks in each state (indexed by [`state_index`]).
    counts: StateCounts,
    /// Running tasks whose result commit is out (decided: nothing left to run in them).
    committing: usize,
    root: Account,
    granted_total: Budget,
    effects: VecDeque<SupervisorEffect>,
    seq: u64,
    steps: u64,
    messages: MessageCounts,
    actions: quorate_protocols::wire::ActionCounts,
    /// Tasks told to stop (cancel or rejected approval) whose worker has not acknowledged yet,
    /// by task id (a replan may drop or move the task meanwhile): the attempt told and its
    /// worker. The run's report waits for them (up to `attempt_timeout_ms`), so their actions
    /// and any reply that follows them are counted.
    awaiting_ack: HashMap<TaskId, (u32, AgentId)>,
    /// `run-started` and `replanned` list the plan's nodes ([`Self::set_describe_plan`]).
    describe_plan: bool,
    /// Where the ids this core mints come from.
    ids: IdSource,
    /// The model-call content this run logged (each piece once).
    blobs: crate::blob::BlobLog,
    /// Message boxes for reuse.
    boxes: recycle::Boxes,
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
            lost: vec![false; workers.len()],
            worker_roles: vec![Vec::new(); workers.len()],
            workers,
            next_worker: 0,
            result_prefix: crate::run::result_key(run, ""),
            tasks,
            by_id,
            ready: VecDeque::new(),
            phase: phase::RunPhase::default(),
            retired: HashMap::new(),
            fallback: None,
            timeouts: AttemptTimeouts::default(),
            counts,
            committing: 0,
            root,
            granted_total: Budget::ZERO,
            effects: VecDeque::new(),
            seq: 0,
            steps: 0,
            messages: MessageCounts::default(),
            actions: Default::default(),
            awaiting_ack: HashMap::new(),
            describe_plan: false,
            blobs: crate::blob::BlobLog::default(),
            boxes: recycle::Boxes::default(),
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
        self.phase.stopped()
    }

    /// The result node `i` completed with, as the core holds it (what its dependents get).
    #[must_use]
    pub fn task_result(&self, i: u32) -> Option<&serde_json::Value> {
        self.tasks
            .get(i as usize)
            .and_then(|t| t.result.as_ref())
            .map(quorate_protocols::Payload::value)
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
        if self.phase.stopped().is_none() {
            return Some(self.snapshot());
        }
        Some(crate::report::RunReport::take_from_core(self))
    }

    /// The final report took the per-task records (a plan has at least one task): no input is
    /// handled any more.
    fn finished(&self) -> bool {
        self.phase.stopped().is_some() && self.tasks.is_empty()
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

    pub(crate) fn actions(&self) -> quorate_protocols::wire::ActionCounts {
        self.actions
    }

    pub(crate) fn plan_version(&self) -> u32 {
        self.plan_version
    }

    // ----- polls -----

    /// The next effect to carry out, in order.
    pub fn poll_effect(&mut self) -> Option<SupervisorEffect> {
        quorate_state::pop_rewinding(&mut self.effects)
    }

    /// The earliest time at which [`handle_tick`](Self::handle_tick) has something to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        let attempt = self.timeouts.next();
        let next = attempt.into_iter().chain(self.config.deadline_ms).min();
        self.phase.timeout(next)
    }

    // ----- handlers -----

    /// Starts the run: tasks without dependencies become ready and are dispatched. A core
    /// rebuilt with [`resume`](Self::resume) continues instead ([`start_resumed`](Self::start_resumed)).
    pub fn start(&mut self, now: u64) {
        if matches!(self.phase, phase::RunPhase::Replayed { .. }) {
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

    /// A human decided about node `node`'s pending approval. A node index that is out of
    /// range ([`InputRefused::UnknownNode`]), a task that is not waiting
    /// ([`InputRefused::NotWaiting`]), or one that waits for a top-up
    /// ([`InputRefused::WaitingTopUp`]: [`handle_top_up`](Self::handle_top_up) answers it),
    /// is refused and changes nothing.
    pub fn handle_approval(
        &mut self,
        now: u64,
        node: u32,
        approved: bool,
    ) -> Result<(), InputRefused> {
        if self.finished() {
            return Err(InputRefused::Finished);
        }
        let Some(task) = self.tasks.get(node as usize) else {
            return Err(InputRefused::UnknownNode {
                node,
                nodes: self.tasks.len(),
            });
        };
        if task.state != TaskState::WaitingApproval {
            return Err(InputRefused::NotWaiting {
                node,
                state: task.state,
            });
        }
        if task.parked_top_up().is_some() {
            return Err(InputRefused::WaitingTopUp { node });
        }
        self.decide_approval(now, node, approved);
        self.after_input(now);
        Ok(())
    }

    /// Cancels the run: every live task is cancelled and told so. A cancel that finds nothing
    /// left to run (every task already ended) is not a cancellation: it changes nothing, and the
    /// run ends as its tasks did ([`InputRefused::NothingToCancel`]); a cancel of a run that is
    /// stopping or stopped is refused too.
    pub fn handle_cancel(&mut self, now: u64) -> Result<(), InputRefused> {
        self.cancel_run(now)?;
        self.settle_run(now);
        Ok(())
    }

    /// Time passed: enforce the deadline and re-dispatch attempts whose replies were lost.
    pub fn handle_tick(&mut self, now: u64) {
        match self.phase.on_tick(now) {
            phase::TickPhase::Live => {}
            phase::TickPhase::Idle => return,
            phase::TickPhase::DrainOver(reason) => {
                self.finish_run(now, reason);
                return;
            }
        }
        if self.config.deadline_ms.is_some_and(|d| now >= d) {
            self.begin_stop(now, StopReason::Deadline);
            self.settle_run(now);
            return;
        }
        loop {
            let (by_id, tasks) = (&self.by_id, &self.tasks);
            let live = |id, attempt| live_attempt(by_id, tasks, id, attempt).is_some();
            let Some((id, attempt)) = self.timeouts.pop_due(now, live) else {
                break;
            };
            let Some(i) = self.live_attempt(id, attempt) else {
                continue;
            };
            match on_timeout(attempt, self.config.max_attempts) {
                Expiry::GiveUp(observation) => self.fail(now, i, observation),
                Expiry::Retry => {
                    self.transition(now, i, TaskEvent::Requeued);
                    self.ready.push_back(i);
                }
            }
        }
        self.after_input(now);
    }

    // ----- internals -----

    /// The node index of task `id` if it is running `attempt`.
    fn live_attempt(&self, id: TaskId, attempt: u32) -> Option<u32> {
        live_attempt(&self.by_id, &self.tasks, id, attempt)
    }

    fn after_input(&mut self, now: u64) {
        // Forget timeouts of attempts that already ended.
        let (by_id, tasks) = (&self.by_id, &self.tasks);
        self.timeouts
            .prune(|id, attempt| live_attempt(by_id, tasks, id, attempt).is_some());
        if self
            .config
            .cancel_after_steps
            .is_some_and(|k| self.steps >= k)
        {
            // Once: later inputs find the run stopping, or nothing left to cancel.
            let _once = self.cancel_run(now);
        }
        self.dispatch_ready(now);
        self.settle_run(now);
    }

    /// Begins a cancel of the run, unless it is stopping already or nothing is left to run
    /// (every task ended: a cancel would stop nothing, so the run ends as its tasks did).
    /// `Err` says why it did not begin.
    fn cancel_run(&mut self, now: u64) -> Result<(), InputRefused> {
        if let Some(reason) = self.phase.stopped() {
            return Err(InputRefused::Stopped {
                reason: reason.clone(),
            });
        }
        if let Some(reason) = self.phase.stopping() {
            return Err(InputRefused::AlreadyStopping {
                reason: reason.clone(),
            });
        }
        // A task whose result commit is out has nothing left to run either.
        if self.counts.live() == self.committing {
            return Err(InputRefused::NothingToCancel);
        }
        self.record(now, None, EventKind::CancelRequested);
        self.begin_stop(now, StopReason::Cancelled);
        Ok(())
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
        self.effects.push_back(SupervisorEffect::Record(record));
    }

    /// The full event of `record`, a [`SupervisorEffect::Record`] of this core (taken from it
    /// since its last input: see [`Record`]).
    #[must_use]
    pub fn event(&self, record: Record) -> Event {
        record.into_event(self.run, &self.plan)
    }

    /// Packs `record`, a [`SupervisorEffect::Record`] of this core, into the run log's entry `out`
    /// exactly as its [`event`](Self::event) packs, without building the event (the shell's
    /// hot path). Like `event`, before the core's next input.
    pub(crate) fn pack_record(
        &self,
        record: &Record,
        at: quorate_state::Slot,
        names: &mut crate::event_pack::Names,
        out: &mut Vec<u8>,
    ) -> Option<usize> {
        let plan = (&self.plan, self.plan_version);
        crate::event_pack::pack_record(record, self.run, plan, at, names, out)
    }

    /// Gives the records still waiting in the queue their node's name: the plan is about to
    /// change, and with it what a node index means.
    fn name_waiting_records(&mut self) {
        for effect in &mut self.effects {
            if let SupervisorEffect::Record(Record { task, .. }) = effect {
                if let RecordTask::Node(i) = *task {
                    *task = RecordTask::Named(self.plan.shared_name(i));
                }
            }
        }
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

    fn add_actions(&mut self, a: quorate_protocols::wire::ActionCounts) {
        self.actions += a;
    }
}

/// The node index of task `id` among `tasks` if it is running `attempt`.
fn live_attempt(by_id: &TaskIndex, tasks: &[TaskSlot], id: TaskId, attempt: u32) -> Option<u32> {
    let i = by_id.get(&id)?;
    let t = &tasks[i as usize];
    (t.state == TaskState::Running && t.attempt == attempt && !t.committing).then_some(i)
}

/// The run's root account: the plan's budget, with its coordination reserve held back. Star and
/// peer runs open it alike.
pub(crate) fn root_account(plan: &Plan) -> Account {
    let spec = plan.spec();
    Account::open(None, spec.budget, spec.reserve)
        .expect("a validated plan's reserve fits its budget")
}

/// A core over `spec` for unit tests: run 1, the supervisor agent 1, one worker (agent 2), the
/// default config, ids seeded 1.
#[cfg(test)]
pub(crate) fn test_core(spec: quorate_protocols::PlanSpec) -> SupervisorCore {
    let sender = |n, role| Sender {
        agent: AgentId::from_u128(n),
        role,
    };
    SupervisorCore::new(
        RunId::from_u128(1),
        spec.validate().expect("valid plan"),
        SupervisorConfig::default(),
        sender(1, quorate_protocols::Role::Supervisor),
        vec![sender(2, quorate_protocols::Role::Worker)],
        IdSource::seeded(1),
    )
}
