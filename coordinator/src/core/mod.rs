//! The supervisor core: a plain state machine over one run.
//!
//! Inputs are methods named `handle_*` (with the current time in milliseconds passed in); the
//! outputs are [`Effect`]s, drained with [`SupervisorCore::poll_effect`]. The core performs no
//! I/O and reads no clock, so a seeded simulator, property tests and the actix shell all drive
//! the same code. Call order: [`start`](SupervisorCore::start) once, then any `handle_*` in any
//! order, draining effects after each, until [`stop_reason`](SupervisorCore::stop_reason) is
//! `Some`.

mod replan;
mod reply;
mod resume;
mod task;

pub use replan::ReplanError;
pub use resume::ResumeError;

use std::collections::{HashMap, HashSet, VecDeque};

use quorate_protocols::{
    Budget, Capabilities, Envelope, Plan, Precondition, RunId, Sender, TaskEvent, TaskId,
    TaskState, Version,
};
use quorate_state::{Account, AccountId, LedgerError};
use quorate_workers::messages::{Assignment, Control, Outcome, Report, TaskInput};
use serde::{Deserialize, Serialize};

use crate::event::{Event, EventKind, Rejection};
use crate::{acceptance, StopReason};
use reply::{judge, ReplyGuard};
use task::TaskSlot;

/// How approval requests are answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApprovalPolicy {
    /// Approve every request.
    All,
    /// Reject every request (the task is cancelled).
    #[default]
    None,
    /// Approve requests of these nodes; reject the others.
    Nodes(HashSet<String>),
    /// Decide nothing; the run stops with `waiting-approval` when nothing else can proceed
    /// (decisions then come through [`SupervisorCore::handle_approval`]).
    Ask,
}

/// Run settings the supervisor enforces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorConfig {
    /// Number of workers to spread tasks over.
    pub workers: usize,
    /// The run stops with `deadline` at this many milliseconds after start.
    pub deadline_ms: Option<u64>,
    /// An attempt with no accepted reply after this long is dispatched again (lost envelopes).
    pub attempt_timeout_ms: u64,
    /// Attempts per task before it fails.
    pub max_attempts: u32,
    /// How approval requests are answered.
    pub approvals: ApprovalPolicy,
    /// Cancel the run after this many handled inputs (dispatches + replies); for tests and demos.
    pub cancel_after_steps: Option<u64>,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            deadline_ms: None,
            attempt_timeout_ms: 2_000,
            max_attempts: 5,
            approvals: ApprovalPolicy::None,
            cancel_after_steps: None,
        }
    }
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Effect {
    /// Send an assignment to worker `worker`.
    Dispatch {
        /// Worker index.
        worker: usize,
        /// The assignment.
        envelope: Envelope<Assignment>,
    },
    /// Send a control message to worker `worker`.
    Control {
        /// Worker index.
        worker: usize,
        /// The message.
        envelope: Envelope<Control>,
    },
    /// Merge an accepted result into the store under `key` (CAS; never overwrite).
    CommitResult {
        /// Store key.
        key: String,
        /// The result.
        value: serde_json::Value,
    },
    /// Check node `node`'s store preconditions and answer with
    /// [`SupervisorCore::handle_preconditions`].
    CheckPreconditions {
        /// Node index.
        node: u32,
        /// What must hold.
        checks: Vec<Precondition>,
    },
    /// Append to the run log and the trace.
    Record(Event),
    /// The run is over.
    Stop(StopReason),
}

/// Message counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCounts {
    /// Envelopes the supervisor sent.
    pub sent: u64,
    /// Replies that reached the supervisor.
    pub delivered: u64,
    /// Rejected: dedupe key seen before.
    pub rejected_duplicate: u64,
    /// Rejected: task terminal or attempt over.
    pub rejected_late: u64,
    /// Rejected: state version not current.
    pub rejected_stale: u64,
    /// Rejected: wrong sender, role, run or task.
    pub rejected_unauthorized: u64,
}

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
    evidence_text: Vec<Vec<String>>,
    by_id: HashMap<TaskId, u32>,
    ready: VecDeque<u32>,
    /// Ids of tasks dropped by a replan: their replies are late.
    retired: HashSet<TaskId>,
    /// The plan to switch to when a store precondition fails.
    fallback: Option<quorate_protocols::PlanSpec>,
    /// `(deadline, task, attempt)` in dispatch order; entries of attempts that ended are
    /// skipped lazily. Attempt timeouts are uniform, so the front is the earliest.
    timeouts: VecDeque<(u64, TaskId, u32)>,
    /// Number of tasks in each state (indexed by [`state_index`]).
    counts: [usize; 8],
    root: Account,
    granted_total: Budget,
    stop: Option<StopReason>,
    pending_stop: Option<StopReason>,
    effects: VecDeque<Effect>,
    seq: u64,
    steps: u64,
    messages: MessageCounts,
    actions: quorate_workers::messages::ActionCounts,
    /// Tasks told to stop (cancel or rejected approval) whose worker has not acknowledged yet.
    /// The run's report waits for them (up to `attempt_timeout_ms`), so their actions and any
    /// reply that follows them are counted.
    awaiting_ack: HashSet<u32>,
    /// While draining: the time at which the run stops regardless.
    drain_until: Option<u64>,
    /// The drain is over; the run may stop.
    drained: bool,
}

impl SupervisorCore {
    /// A core for `plan`, run by `workers` (their stamped identities, in worker-index order).
    ///
    /// # Panics
    /// If `workers` is empty.
    pub fn new(
        run: RunId,
        plan: Plan,
        config: SupervisorConfig,
        me: Sender,
        workers: Vec<Sender>,
    ) -> Self {
        assert!(
            !workers.is_empty(),
            "a supervisor needs at least one worker"
        );
        let spec = plan.spec();
        let root = Account::open(None, spec.budget, spec.reserve)
            .expect("a validated plan's reserve fits its budget");
        let n = plan.len();
        let tasks = (0..plan.len() as u32)
            .map(|i| TaskSlot::new(TaskId::new(), plan.deps(i).len()))
            .collect::<Vec<_>>();
        let by_id = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id, i as u32))
            .collect();
        Self {
            run,
            plan,
            plan_version: 1,
            config,
            me,
            workers,
            next_worker: 0,
            evidence_text: vec![Vec::new(); tasks.len()],
            tasks,
            by_id,
            ready: VecDeque::new(),
            retired: HashSet::new(),
            fallback: None,
            timeouts: VecDeque::new(),
            counts: {
                let mut c = [0; 8];
                c[state_index(TaskState::Pending)] = n;
                c
            },
            root,
            granted_total: Budget::ZERO,
            stop: None,
            pending_stop: None,
            effects: VecDeque::new(),
            seq: 0,
            steps: 0,
            messages: MessageCounts::default(),
            actions: Default::default(),
            awaiting_ack: HashSet::new(),
            drain_until: None,
            drained: false,
        }
    }

    /// Evidence text handed to node `node` with its assignment. It is data: nothing in it can add
    /// a tool call, widen scope or change the goal.
    pub fn set_evidence_text(&mut self, node: u32, texts: Vec<String>) {
        if let Some(slot) = self.evidence_text.get_mut(node as usize) {
            *slot = texts;
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

    /// State of node `i`.
    pub fn task_state(&self, i: u32) -> TaskState {
        self.tasks[i as usize].state
    }

    /// The task id of node `i`.
    pub fn task_id(&self, i: u32) -> TaskId {
        self.tasks[i as usize].id
    }

    /// A snapshot for the run report.
    pub fn snapshot(&self) -> crate::report::RunReport {
        crate::report::RunReport::from_core(self)
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
        self.effects.pop_front()
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

    /// Starts the run: tasks without dependencies become ready and are dispatched.
    pub fn start(&mut self, now: u64) {
        self.record(
            now,
            None,
            EventKind::RunStarted {
                tasks: self.plan.len(),
                plan_version: self.plan_version,
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

    /// A reply arrived from a worker.
    pub fn handle_report(&mut self, now: u64, reply: Envelope<Report>) {
        self.messages.delivered += 1;
        let Some(&i) = self.by_id.get(&reply.task) else {
            let reason = if self.retired.contains(&reply.task) {
                Rejection::Late
            } else {
                Rejection::Unauthorized
            };
            self.reject(now, None, reason);
            return;
        };
        let slot = &self.tasks[i as usize];
        let guard = ReplyGuard {
            run: self.run,
            state: slot.state,
            attempt: slot.attempt,
            version: Version::new(slot.version),
            assigned: slot.worker.map(|w| self.workers[w].agent),
            seen: &slot.seen,
        };
        // The worker's final reply to a cancel or a rejected approval: the task is terminal, so
        // the reply is rejected (late) like any other, but its action counts are kept.
        let acknowledges = self.awaiting_ack.contains(&i)
            && reply.run == self.run
            && reply.attempt == slot.attempt
            && Some(reply.sender.agent) == guard.assigned
            && !slot.seen.contains(&reply.dedupe)
            && matches!(reply.payload.outcome, Outcome::Cancelled);
        if let Err(reason) = judge(&guard, &reply) {
            if acknowledges {
                self.awaiting_ack.remove(&i);
                self.tasks[i as usize].seen.insert(reply.dedupe);
                self.add_actions(reply.payload.actions);
            }
            self.reject(now, Some(i), reason);
            if acknowledges {
                self.settle_run(now);
            }
            return;
        }
        self.steps += 1;
        self.tasks[i as usize].seen.insert(reply.dedupe);
        self.record(now, Some(i), EventKind::ReplyAccepted);
        let report = reply.payload;
        for call in &report.rejected_calls {
            self.record(
                now,
                Some(i),
                EventKind::CallRejected {
                    tool: call.tool.clone(),
                    reason: call.reason.clone(),
                },
            );
        }
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
                self.tasks[i as usize].pending_approval = Some(action);
                self.record(now, Some(i), EventKind::ApprovalRequested { reason });
                let node = self.plan.node(i).id.to_string();
                let decision = match &self.config.approvals {
                    ApprovalPolicy::All => Some(true),
                    ApprovalPolicy::None => Some(false),
                    ApprovalPolicy::Nodes(nodes) => Some(nodes.contains(&node)),
                    ApprovalPolicy::Ask => None,
                };
                if let Some(approved) = decision {
                    self.decide_approval(now, i, approved);
                }
            }
            Outcome::Failed { observation } => self.fail(now, i, observation),
            Outcome::NoProgress { .. } => {
                let node = self.plan.node(i).id.to_string();
                self.end_task(now, i, TaskEvent::Failed);
                self.begin_stop(now, StopReason::NoProgress { node });
            }
            Outcome::LimitReached { component } => {
                self.end_task(now, i, TaskEvent::LimitReached);
                self.begin_stop(now, StopReason::StoppedLimit { component });
            }
            Outcome::Cancelled => self.end_task(now, i, TaskEvent::Cancelled),
        }
        self.after_input(now);
    }

    /// A human decided about node `node`'s pending approval.
    pub fn handle_approval(&mut self, now: u64, node: u32, approved: bool) {
        if self.tasks[node as usize].state == TaskState::WaitingApproval {
            self.decide_approval(now, node, approved);
            self.after_input(now);
        }
    }

    /// Cancels the run: every live task is cancelled and told so.
    pub fn handle_cancel(&mut self, now: u64) {
        if self.stop.is_none() && self.pending_stop.is_none() {
            self.record(now, None, EventKind::CancelRequested);
            self.begin_stop(now, StopReason::Cancelled);
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

    /// The node index of task `id` if it is running `attempt`.
    fn live_attempt(&self, id: TaskId, attempt: u32) -> Option<u32> {
        let &i = self.by_id.get(&id)?;
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
        if let Some(k) = self.config.cancel_after_steps {
            if self.steps >= k && self.pending_stop.is_none() && self.stop.is_none() {
                self.record(now, None, EventKind::CancelRequested);
                self.begin_stop(now, StopReason::Cancelled);
            }
        }
        self.dispatch_ready(now);
        self.settle_run(now);
    }

    fn record(&mut self, now: u64, task: Option<u32>, kind: EventKind) {
        let event = Event {
            seq: self.seq,
            run_id: self.run,
            task: task.map(|i| self.plan.node(i).id.to_string()),
            at_ms: now,
            kind,
        };
        self.seq += 1;
        self.effects.push_back(Effect::Record(event));
    }

    fn reject(&mut self, now: u64, task: Option<u32>, reason: Rejection) {
        match reason {
            Rejection::Duplicate => self.messages.rejected_duplicate += 1,
            Rejection::Late => self.messages.rejected_late += 1,
            Rejection::Stale => self.messages.rejected_stale += 1,
            Rejection::Unauthorized => self.messages.rejected_unauthorized += 1,
        }
        self.record(now, task, EventKind::ReplyRejected { reason });
    }

    fn transition(&mut self, now: u64, i: u32, event: TaskEvent) -> bool {
        let from = self.tasks[i as usize].state;
        match from.on(event) {
            Ok(to) => {
                self.tasks[i as usize].state = to;
                self.counts[state_index(from)] -= 1;
                self.counts[state_index(to)] += 1;
                self.record(now, Some(i), EventKind::Transition { from, to });
                true
            }
            Err(_) => false,
        }
    }

    fn make_ready(&mut self, now: u64, i: u32) {
        if self.preconditions_hold(i) {
            let checks = self.store_preconditions(i);
            if !checks.is_empty() {
                self.tasks[i as usize].checking = true;
                self.effects
                    .push_back(Effect::CheckPreconditions { node: i, checks });
                return;
            }
        }
        if self.preconditions_hold(i) && self.transition(now, i, TaskEvent::DependenciesMet) {
            self.ready.push_back(i);
        } else if !self.preconditions_hold(i) {
            let empty: Vec<String> = self
                .plan
                .deps(i)
                .iter()
                .filter(|&&d| {
                    self.tasks[d as usize]
                        .result
                        .as_ref()
                        .is_none_or(|(v, _)| is_empty(v))
                })
                .map(|&d| self.plan.node(d).id.to_string())
                .collect();
            self.fail(
                now,
                i,
                format!(
                    "precondition does not hold: empty input from {}",
                    empty.join(", ")
                ),
            );
        }
    }

    fn preconditions_hold(&self, i: u32) -> bool {
        self.plan.node(i).preconditions.iter().all(|p| match p {
            Precondition::InputsNonEmpty => self.plan.deps(i).iter().all(|&d| {
                self.tasks[d as usize]
                    .result
                    .as_ref()
                    .is_some_and(|(v, _)| !is_empty(v))
            }),
            // Store-backed preconditions are checked by the execution gate before writes.
            _ => true,
        })
    }

    fn dispatch_ready(&mut self, now: u64) {
        if self.stop.is_some() || self.pending_stop.is_some() {
            return;
        }
        while let Some(i) = self.ready.pop_front() {
            if self.tasks[i as usize].state != TaskState::Ready {
                continue;
            }
            let node = self.plan.node(i);
            let slice = node.budget;
            let id = self.tasks[i as usize].id;
            if !self.tasks[i as usize].allocated {
                match self
                    .root
                    .allocate(AccountId::Root, AccountId::Task(id), slice)
                {
                    Ok(_) => {
                        self.tasks[i as usize].allocated = true;
                        self.tasks[i as usize].granted = slice;
                        self.granted_total = self.granted_total.saturating_add(&slice);
                    }
                    Err(e) => {
                        let component = match &e {
                            LedgerError::Insufficient { component, .. } => *component,
                            _ => quorate_protocols::Component::Steps,
                        };
                        self.record(
                            now,
                            Some(i),
                            EventKind::BudgetRefused {
                                detail: e.to_string(),
                            },
                        );
                        self.end_task(now, i, TaskEvent::LimitReached);
                        self.begin_stop(now, StopReason::StoppedLimit { component });
                        return;
                    }
                }
            }
            // A new attempt goes to the worker that had the task, so its record of the task's
            // actions (idempotency) is at hand.
            let worker = match self.tasks[i as usize].worker {
                Some(w) => w,
                None => {
                    self.next_worker += 1;
                    (self.next_worker - 1) % self.workers.len()
                }
            };
            let capabilities: Capabilities =
                self.plan.spec().capabilities.delegate(&node.capabilities);
            let inputs = self
                .plan
                .deps(i)
                .iter()
                .filter_map(|&d| {
                    self.tasks[d as usize]
                        .result
                        .as_ref()
                        .map(|(value, evidence)| TaskInput {
                            node: self.plan.node(d).id.clone(),
                            value: value.clone(),
                            evidence: evidence.clone(),
                        })
                })
                .collect();
            let assignment = Assignment {
                node: node.id.clone(),
                role: node.role.clone(),
                inputs,
                capabilities,
                budget: slice,
                evidence_text: self.evidence_text[i as usize].clone(),
            };
            let slot = &mut self.tasks[i as usize];
            slot.attempt += 1;
            slot.version += 1;
            slot.worker = Some(worker);
            slot.dispatched_at = now;
            let mut envelope = Envelope::new(self.run, slot.id, self.me, assignment);
            envelope.attempt = slot.attempt;
            envelope.state_version = Version::new(slot.version);
            let attempt = slot.attempt;
            self.timeouts.push_back((
                now + self.config.attempt_timeout_ms,
                self.tasks[i as usize].id,
                attempt,
            ));
            self.transition(now, i, TaskEvent::Dispatched);
            let (task_id, granted) = (self.tasks[i as usize].id, self.tasks[i as usize].granted);
            self.record(
                now,
                Some(i),
                EventKind::Dispatched {
                    attempt,
                    worker,
                    task_id,
                    granted,
                },
            );
            self.messages.sent += 1;
            self.steps += 1;
            self.effects
                .push_back(Effect::Dispatch { worker, envelope });
        }
    }

    fn complete(
        &mut self,
        now: u64,
        i: u32,
        value: serde_json::Value,
        evidence: Vec<quorate_protocols::EvidenceRef>,
    ) {
        let key = self.result_key(i);
        self.effects.push_back(Effect::CommitResult {
            key,
            value: value.clone(),
        });
        self.record(now, Some(i), EventKind::ResultCommitted);
        self.tasks[i as usize].result = Some((value, evidence));
        self.end_task(now, i, TaskEvent::AcceptancePassed);
        for &d in self.plan.dependents(i).to_vec().iter() {
            let slot = &mut self.tasks[d as usize];
            slot.deps_left -= 1;
            if slot.deps_left == 0 && self.pending_stop.is_none() {
                self.make_ready(now, d);
            }
        }
    }

    fn fail(&mut self, now: u64, i: u32, observation: String) {
        let node = self.plan.node(i).id.to_string();
        self.end_task(now, i, TaskEvent::Failed);
        self.begin_stop(now, StopReason::Failed { node, observation });
    }

    /// Moves task `i` to a terminal state and returns its unused budget to the root.
    fn end_task(&mut self, now: u64, i: u32, event: TaskEvent) {
        if !self.transition(now, i, event) {
            return;
        }
        let slot = &mut self.tasks[i as usize];
        if slot.allocated {
            // A task that never reported is charged its whole slice: its calls may have spent it.
            let spent = if slot.reported() {
                slot.spent.min(&slot.granted)
            } else {
                slot.granted
            };
            slot.spent = spent;
            let _ = self.root.child_closed(AccountId::Task(slot.id), spent);
            self.record(now, Some(i), EventKind::TaskClosed { spent });
        }
    }

    fn decide_approval(&mut self, now: u64, i: u32, approved: bool) {
        self.record(now, Some(i), EventKind::ApprovalDecided { approved });
        let Some(action) = self.tasks[i as usize].pending_approval.take() else {
            return;
        };
        let control = if approved {
            self.transition(now, i, TaskEvent::Approved);
            Control::Approve { action }
        } else {
            self.end_task(now, i, TaskEvent::Cancelled);
            self.begin_stop(now, StopReason::Cancelled);
            Control::Reject { action }
        };
        self.send_control(i, control);
    }

    fn send_control(&mut self, i: u32, control: Control) {
        let slot = &self.tasks[i as usize];
        let Some(worker) = slot.worker else { return };
        if matches!(control, Control::Cancel | Control::Reject { .. }) {
            self.awaiting_ack.insert(i);
        }
        let mut envelope = Envelope::new(self.run, slot.id, self.me, control);
        envelope.attempt = slot.attempt;
        envelope.state_version = Version::new(slot.version);
        self.messages.sent += 1;
        self.effects.push_back(Effect::Control { worker, envelope });
    }

    /// Records the first stop cause and cancels every live task.
    fn begin_stop(&mut self, now: u64, reason: StopReason) {
        if self.pending_stop.is_none() {
            self.pending_stop = Some(reason);
        }
        for i in 0..self.tasks.len() as u32 {
            let state = self.tasks[i as usize].state;
            if state.is_terminal() {
                continue;
            }
            if matches!(state, TaskState::Running | TaskState::WaitingApproval) {
                self.send_control(i, Control::Cancel);
            }
            self.end_task(now, i, TaskEvent::Cancelled);
        }
    }

    /// Ends the run once every task is terminal, or nothing can proceed without a human.
    fn settle_run(&mut self, now: u64) {
        if self.stop.is_some() {
            return;
        }
        let live = |s: TaskState| self.counts[state_index(s)];
        let all_terminal = [
            TaskState::Pending,
            TaskState::Ready,
            TaskState::Running,
            TaskState::WaitingApproval,
        ]
        .into_iter()
        .all(|s| live(s) == 0);
        if all_terminal && !self.drained {
            if !self.awaiting_ack.is_empty() {
                // Wait for the workers to acknowledge the cancel (bounded).
                self.drain_until
                    .get_or_insert(now + self.config.attempt_timeout_ms);
                return;
            }
            if self.drain_until.is_some() {
                // Every acknowledgement is in; stop at the next tick, after the replies already
                // on their way (a late answer right behind an acknowledgement) are counted.
                self.drain_until = Some(now);
                return;
            }
        }
        let reason = if all_terminal {
            Some(self.pending_stop.clone().unwrap_or(StopReason::Completed))
        } else {
            let busy = live(TaskState::Running) + live(TaskState::Ready) > 0;
            let waiting = if live(TaskState::WaitingApproval) > 0 && !busy {
                self.tasks
                    .iter()
                    .position(|t| t.state == TaskState::WaitingApproval)
            } else {
                None
            };
            match waiting {
                Some(w) if !busy => Some(StopReason::WaitingApproval {
                    node: self.plan.node(w as u32).id.to_string(),
                }),
                _ => None,
            }
        };
        if let Some(reason) = reason {
            self.record(
                now,
                None,
                EventKind::RunStopped {
                    stop_reason: reason.name().to_string(),
                },
            );
            self.stop = Some(reason.clone());
            self.effects.push_back(Effect::Stop(reason));
        }
    }

    fn add_actions(&mut self, a: quorate_workers::messages::ActionCounts) {
        self.actions.executed += a.executed;
        self.actions.rejected += a.rejected;
        self.actions.unknown += a.unknown;
        self.actions.recovered += a.recovered;
        self.actions.duplicate_effects += a.duplicate_effects;
    }
}

fn is_empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Position of a state in [`SupervisorCore`]'s per-state counters.
const fn state_index(state: TaskState) -> usize {
    match state {
        TaskState::Pending => 0,
        TaskState::Ready => 1,
        TaskState::Running => 2,
        TaskState::WaitingApproval => 3,
        TaskState::Completed => 4,
        TaskState::Failed => 5,
        TaskState::StoppedLimit => 6,
        TaskState::Cancelled => 7,
    }
}
