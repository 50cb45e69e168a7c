//! One schedule: the supervisor core, the worker cores, the result store, the scripted world and
//! a network of in-flight envelopes, driven in a single thread on a virtual clock.
//!
//! The loop takes the earliest of (the next queued delivery, the supervisor's
//! [`poll_timeout`](quorate_coordinator::SupervisorCore::poll_timeout)), feeds it to its core,
//! carries out the effects (which may queue more deliveries, drawn from the seeded RNG) and checks
//! the invariants. Ties go to the item queued first, so a seed fixes the whole schedule.

use std::collections::{BTreeMap, HashMap};

use quorate_coordinator::{Event, SupervisorConfig, SupervisorCore};
use quorate_protocols::wire::{Assignment, Control, Report};
use quorate_protocols::{
    ActionId, AgentId, Envelope, IdSource, NodeId, Plan, Role, RunId, Sender, TaskId, TaskState,
};
use quorate_state::MemoryStore;
use quorate_workers::{ScriptBook, ToolAnswer, WorkerCore, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use crate::check::{Checker, Delivering, Invariant};
use crate::fault::{Fault, FaultCounts};
use crate::gen::{scenario, FaultPlan};

mod failover;
mod options;
mod peer;
mod supervisor;
mod trace;
mod worker;

pub use options::{Options, Outcome, Persistence, Topology};
use trace::Trace;
use worker::worker_core;

#[derive(Clone, Debug)]
enum Msg {
    Assign(usize, Box<Envelope<Assignment>>),
    Control(usize, Box<Envelope<Control>>),
    Report(Box<Envelope<Report>>),
    /// (worker, incarnation, sim call id, the core's call tag, action, answer)
    ToolAnswer(usize, u32, u64, u64, ActionId, ToolAnswer),
    ToolTimeout(usize, u32, u64, u64, ActionId),
    QueryAnswer(usize, u32, ActionId, Option<ToolAnswer>),
    QueryTimeout(usize, u32, ActionId),
    WorkerCrash(usize),
    CoordinatorCrash,
    Cancel,
    Approval(u32, bool),
    /// Another writer takes node `.0`'s lock in the store (see [`crate::gen::lock_key`]).
    StoreChange(usize),
    /// Worker `.0` goes silent until `.1` (never: lost for good).
    WorkerSilent(usize, Option<u64>),
    /// Worker `.0`'s lease expired.
    LeaseExpired(usize),
    /// Worker `.0` is back and renews its lease.
    WorkerBack(usize),
    /// Peer mode: a terminal record's broadcast to peer `.0`.
    Broadcast(usize, Box<Envelope<quorate_coordinator::PeerMsg>>),
}

struct WorkerSlot {
    core: WorkerCore,
    incarnation: u32,
    down_until: u64,
    /// Current attempt and its tool-call slice, per task (from delivered assignments).
    current: HashMap<TaskId, (u32, u64)>,
    calls: HashMap<(TaskId, u32), u64>,
    /// Silent (paused or lost) until then: its messages wait (`u64::MAX`: lost for good).
    silent_until: u64,
}

struct OpenCall {
    worker: usize,
    incarnation: u32,
    action: ActionId,
    /// The worker core's tag of this call.
    tag: u64,
    answered: bool,
}

/// One schedule in progress.
pub struct Sim {
    seed: u64,
    rng: ChaCha8Rng,
    opts: Options,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Msg>,
    run: RunId,
    plan: Plan,
    /// The `[fallback]` plan the supervisor switches to when a store precondition fails.
    fallback: Option<quorate_protocols::PlanSpec>,
    config: SupervisorConfig,
    me: Sender,
    senders: Vec<Sender>,
    core: supervisor::CoreSlot,
    log: Vec<Event>,
    results: MemoryStore<quorate_protocols::Payload>,
    workers: Vec<WorkerSlot>,
    book: ScriptBook,
    world: World,
    faults: FaultPlan,
    counts: FaultCounts,
    checker: Checker,
    calls: BTreeMap<u64, OpenCall>,
    next_call: u64,
    crash_armed: bool,
    stopped: bool,
    trace: Trace,
    steps: u64,
    /// Tool calls per task over all attempts and workers.
    task_calls: HashMap<TaskId, u64>,
    slice_reused: bool,
    /// Actions that received an answer after their call had timed out.
    late_answered: std::collections::HashSet<ActionId>,
    /// The store preconditions each task's assignment carried (none for most).
    guards: HashMap<TaskId, Vec<quorate_protocols::Precondition>>,
    /// Seeded from the schedule's seed: every core's id source is forked from it (a restarted
    /// core gets a fresh fork), so a seed fixes every id of the run.
    ids: IdSource,
    /// The store of record's action books, by task ([`quorate_workers::StoredBook`]).
    books: HashMap<TaskId, quorate_workers::StoredBook>,
    /// Workers whose lease expired and was not renewed.
    lost: Vec<bool>,
    /// Peer mode: the peers (`None`: the supervisor core runs the schedule).
    peer: Option<Box<peer::PeerSide>>,
}

impl Sim {
    /// Builds schedule `seed` (the scenario and every fault come from the seed).
    #[must_use]
    pub fn new(seed: u64, opts: Options) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut sc = scenario(&mut rng, opts.liveness.map(|(heal, _)| heal));
        let horizon = opts.liveness.map_or(4_000, |(heal, _)| heal);
        let peer_mode = opts.topology.is_peer(seed);
        if peer_mode {
            // Two to four peers, each with its own worker, given the same fallback as the star
            // would be; what peer schedules do not draw yet is named in `peer.rs`.
            sc.config.workers += 1;
        } else {
            sc.faults.worker_loss = crate::gen::worker_loss(seed, sc.config.workers, horizon);
        }
        let workers_n = sc.config.workers;
        let mut ids = IdSource::seeded(seed);
        let run = ids.run_id();
        let me = Sender {
            agent: AgentId::from_u128(1),
            role: Role::Supervisor,
        };
        let senders: Vec<Sender> = (0..sc.config.workers)
            .map(|i| Sender {
                agent: AgentId::from_u128(100 + i as u128),
                role: Role::Worker,
            })
            .collect();
        let workers = senders
            .iter()
            .map(|s| WorkerSlot {
                core: worker_core(s.agent, &sc.book, ids.fork()),
                incarnation: 0,
                down_until: 0,
                current: HashMap::new(),
                calls: HashMap::new(),
                silent_until: 0,
            })
            .collect();
        let mut core = SupervisorCore::new(
            run,
            sc.plan.clone(),
            sc.config.clone(),
            me,
            senders.clone(),
            ids.fork(),
        );
        if let Some(fallback) = &sc.fallback {
            core.set_fallback_plan(fallback.clone());
        }
        let fallback_plan = sc.fallback.as_ref().map(|f| {
            f.clone()
                .validate()
                .expect("generated fallback plans are valid")
        });
        let peer = peer_mode.then(|| {
            Box::new(peer::PeerSide::new(
                run,
                &sc.plan,
                sc.fallback.as_ref(),
                &sc.config,
                &senders,
                &mut ids,
            ))
        });
        let mut sim = Self {
            peer,
            seed,
            rng,
            opts,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            run,
            checker: Checker::new(&sc.plan, fallback_plan.as_ref()),
            plan: sc.plan,
            fallback: sc.fallback,
            config: sc.config,
            me,
            senders,
            core: supervisor::CoreSlot::new(core),
            log: Vec::new(),
            results: MemoryStore::new(),
            workers,
            book: sc.book,
            world: sc.world,
            faults: sc.faults,
            counts: FaultCounts::default(),
            calls: BTreeMap::new(),
            next_call: 0,
            crash_armed: false,
            stopped: false,
            trace: Trace::new(&opts),
            steps: 0,
            task_calls: HashMap::new(),
            slice_reused: false,
            late_answered: std::collections::HashSet::new(),
            guards: HashMap::new(),
            ids,
            books: HashMap::new(),
            lost: vec![false; workers_n],
        };
        sim.schedule_worker_loss();
        let f = sim.faults;
        for (at, w) in f.worker_crashes.into_iter().flatten() {
            sim.schedule(at, Msg::WorkerCrash(w));
        }
        // Peer schedules draw no crash and no cancel yet. Hook for peer resume: schedule the
        // crashes in peer mode too, and on `Msg::CoordinatorCrash` rebuild the crashed peer's
        // core with `peer::resume::rebuild` (the run's events and the shared stores' records)
        // and `PeerCore::resume`, as `resume` in supervisor.rs does for the star.
        let star = sim.peer.is_none();
        for at in f.coordinator_crashes.into_iter().flatten().filter(|_| star) {
            sim.schedule(at, Msg::CoordinatorCrash);
        }
        if let Some(at) = f.cancel_at.filter(|_| star) {
            sim.schedule(at, Msg::Cancel);
        }
        if let Some((at, node)) = f.store_change {
            sim.schedule(at, Msg::StoreChange(node));
        }
        sim
    }

    /// Runs the schedule to its end and checks the end-of-run invariants.
    pub fn run(mut self) -> Outcome {
        if self.peer.is_some() {
            self.start_peers();
        } else {
            self.core.start(0);
            self.drain_supervisor();
        }
        while self.checker.violation.is_none() {
            self.steps += 1;
            if self.steps > self.opts.step_bound {
                self.fail(
                    Invariant::StepBound,
                    format!("no end after {} steps", self.opts.step_bound),
                );
                break;
            }
            let next = self.queue.keys().next().map(|&(t, _)| t);
            let tick = match &self.peer {
                _ if self.stopped => None,
                Some(side) => side.poll_timeout(),
                None => self.core.poll_timeout(),
            };
            match (next, tick) {
                (None, None) => {
                    if !self.stopped {
                        let c = &self.checker;
                        let after_approval: Vec<usize> = (0..c.state.len())
                            .filter(|&i| {
                                c.state[i] == TaskState::Running
                                    && c.previous[i] == TaskState::WaitingApproval
                            })
                            .collect();
                        // In peer mode, each peer's view (the star's shadow is unused there).
                        let states = match &self.peer {
                            Some(side) => side.states(),
                            None => format!("{:?}", c.state),
                        };
                        let detail = format!(
                            "stuck: nothing in flight, no timer, no stop reason; tasks {states}; \
                             running again after an approval: {after_approval:?}"
                        );
                        self.fail(Invariant::StepBound, detail);
                    }
                    break;
                }
                (Some(q), Some(t)) if t < q => self.tick(t),
                (None, Some(t)) => self.tick(t),
                _ => {
                    let ((at, _), msg) = self.queue.pop_first().expect("non-empty");
                    self.now = self.now.max(at);
                    self.trace.delivery(at, &msg);
                    self.deliver(msg);
                }
            }
            self.after_step();
        }
        self.finish()
    }

    fn healed(&self) -> bool {
        self.opts.liveness.is_some_and(|(heal, _)| self.now >= heal)
    }

    fn fail(&mut self, invariant: Invariant, detail: String) {
        self.checker.fail(invariant, self.now, detail);
    }

    fn schedule(&mut self, at: u64, msg: Msg) {
        self.seq += 1;
        self.queue.insert((at, self.seq), msg);
    }

    /// Puts an envelope on the network: latency, then drop / delay / reorder / duplicate.
    fn send(&mut self, msg: Msg) {
        let latency = self.rng.gen_range(1..=20);
        if self.healed() {
            self.schedule(self.now + latency, msg);
            return;
        }
        let f = self.faults;
        if self.rng.gen_bool(f.drop) {
            self.counts.bump(Fault::Drop);
            if matches!(msg, Msg::Broadcast(..)) {
                self.redeliver(msg);
            }
            return;
        }
        let mut extra = 0;
        if self.rng.gen_bool(f.delay) {
            self.counts.bump(Fault::Delay);
            extra += self.rng.gen_range(50..400);
        }
        if self.rng.gen_bool(f.reorder) {
            self.counts.bump(Fault::Reorder);
            extra += self.rng.gen_range(1_000..3_000);
        }
        if self.rng.gen_bool(f.dup) {
            self.counts.bump(Fault::Duplicate);
            let again = self.rng.gen_range(1..1_500);
            self.schedule(self.now + again, msg.clone());
        }
        self.schedule(self.now + latency + extra, msg);
    }

    fn tick(&mut self, at: u64) {
        if self.peer.is_some() {
            self.tick_peers(at);
            return;
        }
        self.now = self.now.max(at);
        self.trace.note(at, format_args!("supervisor tick"));
        self.core.handle_tick(self.now);
        self.drain_supervisor();
    }

    fn deliver(&mut self, msg: Msg) {
        let now = self.now;
        let Some(msg) = self.held(msg) else {
            return;
        };
        match msg {
            Msg::Report(env) if self.peer.is_some() => self.peer_reply(env),
            Msg::Broadcast(q, env) => self.peer_broadcast(q, env),
            Msg::Report(env) => {
                if let Some(granted) = self.granted_of(env.task) {
                    if !env.payload.spent.fits_within(&granted) {
                        let detail = format!(
                            "a worker reported spending {} of a {granted} slice",
                            env.payload.spent
                        );
                        self.fail(Invariant::Budget, detail);
                    }
                }
                self.checker.delivering = Some(Delivering {
                    task: env.task,
                    attempt: env.attempt,
                    version: env.state_version,
                });
                // Duplicate, late and stale deliveries are the point: refusals are expected,
                // and the checker judges what they changed.
                let _refused = self.core.handle_report(self.now, *env);
                self.drain_supervisor();
                self.checker.delivering = None;
            }
            Msg::Assign(w, env) => {
                if self.now < self.workers[w].down_until {
                    return;
                }
                let (task, attempt, slice) = (env.task, env.attempt, env.payload.budget.tool_calls);
                if !env.payload.preconditions.is_empty() {
                    self.guards.insert(task, env.payload.preconditions.clone());
                }
                if self.assign(w, env) {
                    self.workers[w].current.insert(task, (attempt, slice));
                }
                self.drain_worker(w);
            }
            Msg::Control(w, env) => {
                if self.now < self.workers[w].down_until {
                    return;
                }
                let _late_or_stale = self.workers[w].core.handle_control(now, *env);
                self.drain_worker(w);
            }
            Msg::ToolAnswer(w, inc, call, tag, action, answer) => {
                if inc != self.workers[w].incarnation {
                    return;
                }
                match self.calls.get_mut(&call) {
                    Some(c) => c.answered = true,
                    None => {
                        self.late_answered.insert(action);
                    }
                }
                let _late = self.workers[w]
                    .core
                    .handle_tool_answer(now, action, tag, answer);
                self.drain_worker(w);
            }
            Msg::ToolTimeout(w, inc, call, tag, action) => {
                if inc != self.workers[w].incarnation {
                    return;
                }
                if self.calls.remove(&call).is_some_and(|c| c.answered) {
                    return;
                }
                if self.world.effects_for(&action) > 0 {
                    self.counts.bump(Fault::TimeoutAfterCommit);
                } else {
                    self.counts.bump(Fault::TimeoutBeforeCommit);
                }
                let _late = self.workers[w].core.handle_tool_timeout(now, action, tag);
                self.drain_worker(w);
            }
            Msg::QueryAnswer(w, inc, action, answer) => {
                if inc == self.workers[w].incarnation {
                    let _late = self.workers[w]
                        .core
                        .handle_query_answer(now, action, answer);
                    self.drain_worker(w);
                }
            }
            Msg::QueryTimeout(w, inc, action) => {
                if inc == self.workers[w].incarnation {
                    let _late = self.workers[w].core.handle_query_timeout(now, action);
                    self.drain_worker(w);
                }
            }
            Msg::WorkerCrash(w) => self.crash_worker(w),
            failover @ (Msg::WorkerSilent(..) | Msg::LeaseExpired(_) | Msg::WorkerBack(_)) => {
                self.on_failover(failover);
            }
            Msg::CoordinatorCrash => {
                if !self.stopped {
                    self.crash_armed = true;
                }
            }
            Msg::StoreChange(node) => {
                let key = crate::gen::lock_key(node);
                if let quorate_state::CasOutcome::Committed(_) =
                    self.results.cas_now(&key, None, Value::Bool(true).into())
                {
                    self.counts.bump(Fault::StoreChange);
                }
            }
            Msg::Cancel => {
                if !self.stopped {
                    self.counts.bump(Fault::Cancel);
                    // A cancel of a run that is stopping already, or has nothing left, is refused.
                    let _refused = self.core.handle_cancel(self.now);
                    self.drain_supervisor();
                }
            }
            Msg::Approval(shadow, approved) => {
                // The approval names the node by its shadow index, which a replan keeps.
                let name = &self.checker.node_names[shadow as usize];
                let node = NodeId::new(name.as_str())
                    .ok()
                    .and_then(|id| self.core.plan().index_of(&id));
                let Some(node) = node else {
                    return;
                };
                if !self.stopped && self.core.task_state(node) == TaskState::WaitingApproval {
                    self.counts.bump(Fault::Approval);
                    let decided = self.core.handle_approval(self.now, node, approved);
                    debug_assert!(decided.is_ok(), "{decided:?}: the task was waiting");
                    self.drain_supervisor();
                }
            }
        }
    }

    fn granted_of(&self, task: TaskId) -> Option<quorate_protocols::Budget> {
        self.checker.granted_of(task)
    }

    /// The shadow index of node `i` of the supervisor's current plan.
    fn shadow(&self, i: u32) -> usize {
        let name = self.core.plan().node(i).id.as_str();
        self.checker
            .index_of(name)
            .expect("every node of a plan has a shadow")
    }

    fn after_step(&mut self) {
        if self.peer.is_some() {
            self.peer_after_step();
            return;
        }
        let report = self.core.snapshot();
        self.checker.on_snapshot(self.now, &report);
    }

    fn finish(mut self) -> Outcome {
        if self.checker.violation.is_none() {
            if self.peer.is_some() {
                self.peer_end_checks();
            } else {
                self.end_checks();
            }
        }
        let stop = match self.peer {
            Some(_) => self.peer_stop(),
            None => self.checker.stops.first().map(|(_, r)| r.clone()),
        };
        let (trace_hash, trace) = self.trace.finish();
        Outcome {
            seed: self.seed,
            violation: self.checker.violation.take(),
            faults: self.counts,
            trace_hash,
            trace,
            steps: self.steps,
            stop,
            tasks: self.plan.len(),
            slice_reused: self.slice_reused,
            peer: self.peer.is_some(),
        }
    }

    fn end_checks(&mut self) {
        let stops = self.checker.stops.clone();
        if stops.len() != 1 {
            let detail = format!("{} stop reasons: {stops:?}", stops.len());
            self.fail(Invariant::StopReason, detail);
            return;
        }
        let (stopped_at, reason) = &stops[0];
        // The tasks of the plan the run ended on (a replan cancels the ones it drops).
        let states: Vec<TaskState> = (0..self.core.plan().len() as u32)
            .map(|i| self.checker.state[self.shadow(i)])
            .collect();
        if reason == "completed" && states.iter().any(|s| *s != TaskState::Completed) {
            self.fail(
                Invariant::StopReason,
                format!("stopped `completed` with tasks {states:?}"),
            );
        }
        for i in 0..self.core.plan().len() as u32 {
            if self.checker.confirmed[self.shadow(i)] {
                let key = self.core.result_key(i);
                if self.results.get_now(&key).is_none() {
                    self.fail(Invariant::ResultLost, format!("result {key} is missing"));
                }
            }
        }
        if let Some((heal, delta)) = self.opts.liveness {
            let live: Vec<usize> = (0..states.len())
                .filter(|&i| !states[i].is_terminal())
                .collect();
            if *stopped_at > heal + delta || !live.is_empty() {
                self.fail(
                    Invariant::Liveness,
                    format!(
                        "healed at {heal} ms; stopped `{reason}` at {stopped_at} ms; live tasks {live:?}"
                    ),
                );
            }
        }
    }
}
