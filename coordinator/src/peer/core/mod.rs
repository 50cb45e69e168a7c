//! The peer core: one peer's pure state machine over a run.
//!
//! Call order: [`PeerCore::start`] once, then any `handle_*` in any order, draining
//! [`PeerCore::poll_effect`] after each (the shell feeds the outcome of `TryClaim`,
//! `CheckPreconditions`, `Allocate`, `CloseSlice`, `CommitTerminal` and `CommitResult` back
//! through the matching handler; the one drive loop, [`crate::peer::drive::drive`], does), until
//! [`PeerCore::done`] is `Some`.
//!
//! The task rules are the star's (`coordinator/src/rules/`):
//! every state change goes through `TaskState::on`, replies are judged by the same `judge`, a
//! parked approval waits for the same `Quiet` handshake, and an attempt without a reply runs
//! again after `attempt_timeout_ms`. What the peer adds is the policy: claims and terminal
//! records by CAS on shared stores, and a decision for every CAS that fails.
//!
//! Like the supervisor core it reads no clock (time comes in as
//! [`Millis`](quorate_protocols::Millis)) and draws its ids from the
//! [`IdSource`](quorate_protocols::IdSource) it is built with.

use std::collections::{HashMap, HashSet, VecDeque};

use quorate_protocols::wire::{ActionCounts, Control};
use quorate_protocols::{
    DedupeKey, Envelope, Plan, RunId, Sender, TaskEvent, TaskId, TaskState, Version,
};
use quorate_state::MemoryStore;

mod replan;
mod resume;
mod store;
mod takeover;
mod terminal;
mod view;
mod worker;

use super::slot::PeerTask;
use super::{PeerEffect, Terminal};
use crate::event::{Event, EventKind, Rejection};
use crate::rules::{on_timeout, AttemptTimeouts, Expiry};
use crate::{MessageCounts, StopReason, SupervisorConfig};

/// One peer's pure core. See the module docs for the call order.
#[derive(Debug)]
pub struct PeerCore {
    run: RunId,
    plan: Plan,
    config: SupervisorConfig,
    index: usize,
    peers: Vec<Sender>,
    worker: Sender,
    tasks: Vec<PeerTask>,
    by_id: HashMap<TaskId, u32>,
    evidence_text: Vec<Vec<String>>,
    seen: HashSet<DedupeKey>,
    /// Tasks this peer claims or runs right now (it runs one at a time).
    busy: bool,
    /// Attempts of this peer's worker, by node, with their deadlines.
    timeouts: AttemptTimeouts<u32>,
    /// Why this peer stops (the cause its cancellations carry), once it does: `Some` while it
    /// stops claiming and cancels what is left.
    stop_cause: Option<StopReason>,
    done: Option<StopReason>,
    effects: VecDeque<PeerEffect>,
    steps: u64,
    messages: MessageCounts,
    actions: ActionCounts,
    /// `run-started` lists the plan's nodes ([`Self::set_describe_plan`]).
    describe_plan: bool,
    /// The model-call content this peer logged (each piece once).
    blobs: crate::blob::BlobLog,
    /// Where the dedupe keys and correlation ids of this peer's envelopes come from.
    ids: quorate_protocols::IdSource,
    /// The fallback plan and the agreement on the plan version.
    replan: replan::PeerReplan,
    /// A resumed run's core, not started yet: the events its run replayed.
    resumed: Option<u64>,
    /// Each attempt is fenced in the store of record before it runs ([`Self::set_fenced`]).
    fenced: bool,
}

impl PeerCore {
    /// The core of peer `index` among `peers` (every peer's stamped identity, in index order),
    /// whose own worker is `worker`. `tasks` are the run-wide task ids, in plan order; all
    /// peers must get the same ones. The ids of the envelopes it sends come from `ids`.
    ///
    /// # Panics
    /// If `index` is not a peer or `tasks` does not match the plan.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run: RunId,
        plan: Plan,
        config: SupervisorConfig,
        index: usize,
        peers: Vec<Sender>,
        worker: Sender,
        tasks: Vec<TaskId>,
        ids: quorate_protocols::IdSource,
    ) -> Self {
        assert!(index < peers.len(), "peer {index} is not among the peers");
        assert_eq!(tasks.len(), plan.len(), "one task id per plan node");
        let slots: Vec<PeerTask> = tasks
            .iter()
            .enumerate()
            .map(|(i, &id)| PeerTask::new(id, plan.deps(i as u32).len()))
            .collect();
        let by_id = tasks
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, i as u32))
            .collect();
        Self {
            run,
            evidence_text: vec![Vec::new(); plan.len()],
            plan,
            config,
            index,
            peers,
            worker,
            tasks: slots,
            by_id,
            seen: HashSet::new(),
            busy: false,
            timeouts: AttemptTimeouts::default(),
            stop_cause: None,
            done: None,
            effects: VecDeque::new(),
            steps: 0,
            messages: MessageCounts::default(),
            actions: ActionCounts::default(),
            describe_plan: false,
            blobs: crate::blob::BlobLog::default(),
            ids,
            replan: replan::PeerReplan::default(),
            resumed: None,
            fenced: false,
        }
    }

    /// Whether `run-started` lists the plan's nodes and their dependencies (off by default;
    /// [`run_peer`](crate::run_peer) turns it on for a run that writes a trace), as
    /// [`SupervisorCore::set_describe_plan`](crate::SupervisorCore::set_describe_plan).
    pub fn set_describe_plan(&mut self, on: bool) {
        self.describe_plan = on;
    }

    /// Opens the run's shared root account in `store` under `key` (once per run, before start).
    pub fn open_root(plan: &Plan, store: &MemoryStore<quorate_state::Account>, key: &str) {
        let _ = store.cas_now(key, None, crate::core::root_account(plan));
    }

    /// Evidence text handed to node `node` with its assignment (data only).
    pub fn set_evidence_text(&mut self, node: u32, texts: Vec<String>) {
        if let Some(slot) = self.evidence_text.get_mut(node as usize) {
            *slot = texts;
        }
    }

    // ----- effects and timeouts (the getters are in module `view`) -----

    /// The next effect to carry out, in order.
    pub fn poll_effect(&mut self) -> Option<PeerEffect> {
        if self.effects.is_empty() {
            // A switch of plan version renumbers the tasks: it waits for the effects before it.
            self.switch_if_pending();
        }
        quorate_state::pop_rewinding(&mut self.effects)
    }

    /// The earliest time at which [`handle_tick`](Self::handle_tick) has something to do: the
    /// deadline, or the timeout of this peer's running attempt.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.done.is_some() || self.stop_cause.is_some() {
            return None;
        }
        self.timeouts
            .next()
            .into_iter()
            .chain(self.config.deadline_ms)
            .min()
    }

    // ----- handlers -----

    /// Starts this peer: tasks without dependencies become ready and it tries to claim one. A
    /// core built by [`resume`](Self::resume) continues its run instead (module `resume`).
    pub fn start(&mut self, now: u64) {
        if let Some(replayed) = self.resumed.take() {
            self.start_resumed(now, replayed);
            return;
        }
        let tasks = self.plan.len();
        self.record(
            now,
            None,
            EventKind::RunStarted {
                tasks,
                plan_version: 1,
                nodes: if self.describe_plan {
                    crate::event::PlanNode::all(&self.plan)
                } else {
                    Vec::new()
                },
            },
        );
        for i in 0..tasks as u32 {
            if self.tasks[i as usize].deps_left == 0 {
                self.make_ready(now, i);
            }
        }
        self.after_input(now);
    }

    /// The outcome of this peer's claim of `node`.
    pub fn handle_claim_result(&mut self, now: u64, node: u32, won: bool) {
        self.busy = won;
        let t = &self.tasks[node as usize];
        let ending = t.settled() || t.committing || self.stop_cause.is_some();
        if !won {
            if t.state == TaskState::Ready {
                // Another peer runs it: running, in this peer's view.
                self.transition(now, node, TaskEvent::Dispatched);
            }
        } else {
            self.tasks[node as usize].mine = true;
            if ending {
                // Won a task that is ending anyway: nothing to run.
                self.busy = false;
            } else {
                self.steps += 1;
                let task = self.tasks[node as usize].id;
                let slice = self.plan.node(node).budget;
                self.effects
                    .push_back(PeerEffect::Allocate { node, task, slice });
            }
        }
        self.after_input(now);
    }

    /// The shell checked node `node`'s store preconditions: `Ok`, or the first failing
    /// check, which switches the run to its fallback plan if it has one (module `replan`),
    /// else fails the task; an answer for a task that ended meanwhile changes nothing. Every peer checks
    /// for itself; if peers disagree (the store changed between their checks), the first
    /// terminal record committed decides, as for any other race between peers.
    pub fn handle_preconditions(
        &mut self,
        now: u64,
        node: u32,
        outcome: Result<(), quorate_state::PreconditionFailure>,
    ) {
        let Some(t) = self.tasks.get_mut(node as usize) else {
            return;
        };
        if !t.checking {
            return;
        }
        t.checking = false;
        if t.settled() || t.committing {
            // Ended meanwhile (another peer's record, or this peer's stop).
            return;
        }
        match outcome {
            Ok(()) => {
                self.transition(now, node, TaskEvent::DependenciesMet);
            }
            Err(observation) => {
                self.record(
                    now,
                    Some(node),
                    EventKind::PreconditionFailed {
                        observation: observation.to_string(),
                    },
                );
                self.precondition_failed(now, node, observation.to_string());
            }
        }
        self.after_input(now);
    }

    /// Time passed: enforce the deadline, and run again an attempt of this peer's worker that
    /// had no accepted reply within `attempt_timeout_ms` (or, after `max_attempts`, fail its
    /// task), as the star does.
    pub fn handle_tick(&mut self, now: u64) {
        if self.done.is_none() && self.config.deadline_ms.is_some_and(|d| now >= d) {
            self.begin_stop(StopReason::Deadline);
        }
        while self.stop_cause.is_none() && self.done.is_none() {
            let tasks = &self.tasks;
            let live = |i: u32, attempt: u32| live_attempt(&tasks[i as usize], attempt);
            let Some((i, attempt)) = self.timeouts.pop_due(now, live) else {
                break;
            };
            match on_timeout(attempt, self.config.max_attempts) {
                Expiry::GiveUp(observation) => self.fail(i, observation),
                Expiry::Retry => {
                    self.transition(now, i, TaskEvent::Requeued);
                    self.steps += 1;
                    self.execute(now, i);
                }
            }
        }
        self.after_input(now);
    }

    // ----- internals -----

    fn after_input(&mut self, now: u64) {
        if self.done.is_some() {
            return;
        }
        let tasks = &self.tasks;
        self.timeouts
            .prune(|i, attempt| live_attempt(&tasks[i as usize], attempt));
        if let Some(k) = self.config.cancel_after_steps {
            if self.steps >= k && self.stop_cause.is_none() {
                self.record(now, None, EventKind::CancelRequested);
                self.begin_stop(StopReason::Cancelled);
            }
        }
        self.claim_next();
        self.check_done(now);
    }

    /// Tries to claim one ready task (starting at this peer's offset, to spread the work).
    fn claim_next(&mut self) {
        if self.busy || self.stop_cause.is_some() {
            return;
        }
        let n = self.tasks.len();
        let next = (0..n).map(|k| ((k + self.index) % n) as u32).find(|&i| {
            let t = &self.tasks[i as usize];
            t.state == TaskState::Ready && !t.claim_tried && !t.settled() && !t.committing
        });
        if let Some(node) = next {
            self.busy = true;
            self.tasks[node as usize].claim_tried = true;
            self.effects.push_back(PeerEffect::TryClaim { node });
        }
    }

    fn execute(&mut self, now: u64, i: u32) {
        if self.fence_first(i) {
            return;
        }
        let node = self.plan.node(i);
        let tasks = &self.tasks;
        let assignment = crate::assign::assignment(
            &self.plan,
            i,
            node.budget,
            |d| {
                tasks[d as usize]
                    .result
                    .as_ref()
                    .map(|(v, e)| (v, e.clone()))
            },
            self.evidence_text[i as usize].clone(),
        );
        let t = &mut self.tasks[i as usize];
        t.attempt += 1;
        t.version += 1;
        t.worker_live = true;
        let (run, me) = (self.run, self.peers[self.index]);
        let mut env = Envelope::new(run, t.id, me, assignment, &mut self.ids);
        env.attempt = t.attempt;
        env.state_version = Version::new(t.version);
        let attempt = t.attempt;
        self.timeouts
            .arm(now + self.config.attempt_timeout_ms, i, attempt);
        if self.tasks[i as usize].state != TaskState::Running {
            self.transition(now, i, TaskEvent::Dispatched);
        }
        let (worker, task_id) = (self.index, self.tasks[i as usize].id);
        let granted = self.plan.node(i).budget;
        let kind = EventKind::Dispatched {
            attempt,
            worker,
            task_id,
            granted,
        };
        self.record(now, Some(i), kind);
        self.effects.push_back(PeerEffect::Execute(Box::new(env)));
    }

    fn control(&mut self, i: u32, control: Control) {
        let t = &self.tasks[i as usize];
        let mut env = Envelope::new(
            self.run,
            t.id,
            self.peers[self.index],
            control,
            &mut self.ids,
        );
        env.attempt = t.attempt;
        env.state_version = Version::new(t.version);
        self.effects.push_back(PeerEffect::Control(env));
    }

    /// Proposes `state` as node `i`'s terminal record (the store decides).
    fn propose(&mut self, i: u32, state: TaskState, cause: Option<StopReason>) {
        let t = &mut self.tasks[i as usize];
        if t.settled() || t.committing {
            return;
        }
        t.committing = true;
        let (result, ev) = match (&t.result, state) {
            (Some((v, e)), TaskState::Completed) => (Some(v.clone()), e.to_vec()),
            _ => (None, Vec::new()),
        };
        let record = Terminal {
            node: i,
            state,
            result,
            evidence: ev,
            cause,
            by: self.index,
            dropped_by: None,
        };
        self.effects.push_back(PeerEffect::CommitTerminal(record));
    }

    fn make_ready(&mut self, now: u64, i: u32) {
        let tasks = &self.tasks;
        let inputs = crate::acceptance::check_inputs(&self.plan, i, |d| {
            tasks[d as usize].result.as_ref().map(|(v, _)| v.value())
        });
        if let Err(failure) = inputs {
            self.fail(i, format!("precondition does not hold: {failure}"));
            return;
        }
        let checks = crate::acceptance::store_checks(&self.plan, i);
        if checks.is_empty() {
            self.transition(now, i, TaskEvent::DependenciesMet);
        } else {
            self.tasks[i as usize].checking = true;
            self.effects
                .push_back(PeerEffect::CheckPreconditions { node: i, checks });
        }
    }

    /// Proposes `failed` for node `i`, with the first failing observation.
    pub(super) fn fail(&mut self, i: u32, observation: String) {
        let node = self.plan.node(i).id.to_string();
        let cause = StopReason::Failed { node, observation };
        self.propose(i, TaskState::Failed, Some(cause));
    }

    /// Stops claiming and proposes `cancelled` for every task not yet settled.
    fn begin_stop(&mut self, cause: StopReason) {
        if self.stop_cause.is_some() {
            return;
        }
        self.stop_cause = Some(cause.clone());
        for i in 0..self.tasks.len() as u32 {
            let t = &self.tasks[i as usize];
            if t.settled() || t.committing {
                continue;
            }
            if t.worker_live {
                self.tasks[i as usize].worker_live = false;
                self.control(i, Control::Cancel);
            }
            self.propose(i, TaskState::Cancelled, Some(cause.clone()));
        }
    }

    fn check_done(&mut self, now: u64) {
        if self.done.is_some() || !self.tasks.iter().all(PeerTask::settled) {
            return;
        }
        if !self.plan_confirmed() {
            return;
        }
        let reason = self
            .tasks
            .iter()
            .filter_map(|t| t.terminal.as_ref())
            .filter(|(r, _)| r.state != TaskState::Completed)
            .min_by_key(|(_, v)| *v)
            .map_or(StopReason::Completed, |(r, _)| {
                r.cause.clone().unwrap_or(StopReason::Cancelled)
            });
        let stop_reason = reason.name().to_string();
        self.record(now, None, EventKind::RunStopped { stop_reason });
        self.done = Some(reason.clone());
        self.effects.push_back(PeerEffect::Done(reason));
    }

    /// Moves node `i` by `event` through the task lifecycle ([`TaskState::on`]), logged; `false`
    /// (and nothing changes) if the event does not fit its state.
    fn transition(&mut self, now: u64, i: u32, event: TaskEvent) -> bool {
        let from = self.tasks[i as usize].state;
        match from.on(event) {
            Ok(to) => {
                self.tasks[i as usize].state = to;
                self.record(now, Some(i), EventKind::Transition { from, to });
                true
            }
            Err(_) => false,
        }
    }

    fn record(&mut self, now: u64, task: Option<u32>, kind: EventKind) {
        // `seq` is stamped by the shell from one counter shared by all peers of the run.
        let event = Event {
            seq: 0,
            run_id: self.run,
            peer: Some(self.index),
            task: task.map(|i| self.task_name(i)),
            at_ms: now,
            kind,
        };
        self.effects.push_back(PeerEffect::Record(event));
    }

    /// The name of task `i`: a node of the plan, or (from `plan.len()` on) a task a switch of
    /// plan version dropped.
    fn task_name(&self, i: u32) -> std::sync::Arc<str> {
        let n = self.plan.len() as u32;
        match i.checked_sub(n) {
            None => self.plan.shared_name(i),
            Some(k) => self.replan.retired[k as usize].0.clone(),
        }
    }

    /// Task `i`'s slot, numbered as [`task_name`](Self::task_name) numbers it.
    fn slot_mut(&mut self, i: u32) -> Option<&mut PeerTask> {
        let n = self.tasks.len();
        match (i as usize).checked_sub(n) {
            None => self.tasks.get_mut(i as usize),
            Some(k) => self.replan.retired.get_mut(k).map(|(_, t)| t),
        }
    }

    fn reject(&mut self, now: u64, task: Option<u32>, reason: Rejection) {
        self.messages.count_rejection(reason);
        self.record(now, task, EventKind::rejected(reason));
    }
}

/// `true` while `task`'s attempt `attempt` runs on this peer's worker: a timeout of it counts.
fn live_attempt(task: &PeerTask, attempt: u32) -> bool {
    task.mine
        && task.worker_live
        && task.attempt == attempt
        && task.state == TaskState::Running
        && !task.settled()
        && !task.committing
}
