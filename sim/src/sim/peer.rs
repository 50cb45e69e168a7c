//! Peer mode in a schedule: `n` [`PeerCore`]s (one per worker, each running its own worker)
//! over the shared stores (claims, terminal records, the root budget account, results), their
//! broadcasts on the faulty network, and the invariants checked per peer.
//!
//! Each peer has its own [`Checker`] fed with the events it writes (every event names its peer),
//! so "no transition after a terminal state", "no reply accepted for a terminal task", "no
//! stale reply accepted" and "no conclusion resting on nothing recorded" hold per peer. The
//! worker side (tool calls, the world's effects per action, crashes, slices per attempt,
//! guarded writes) is the star's, so those checks are the same. At the end every peer must be
//! done with one stop reason, all peers the same; every task must have the same state in every
//! peer's view; a completed task's result must be in the result store, and every peer must hold
//! that stored value. After every step the shared root account keeps its invariant (reserve +
//! outstanding slices <= limit).
//!
//! A `[fallback]` plan is drawn as for the star (`gen::fallback_plan`) and given to every
//! peer: a peer whose readiness check of the guarded node fails proposes the switch by CAS on
//! the plan version (`plan/<run>`, [`quorate_coordinator::PeerEffect::ProposePlan`]) and every peer follows what the
//! key holds. Claims and terminal records are keyed by node name, as the actor's stores key
//! them (a switch renumbers the nodes). The checkers shadow the plan and its fallback by node
//! name, so the per-peer rows hold across the switch; at the end every peer must be on the
//! same plan version, and the end checks are over the plan the run ended on.
//!
//! What peer schedules do not draw yet: a peer crash that resumes from the log (the
//! coordinator crashes of the fault plan are not scheduled in peer mode: the hook is in
//! `Sim::new`), a user's cancel, a human's approval decision, and worker loss by lease (the
//! peer and its worker are one process).
//!
//! The peers' transport delivers at least once (as NATS JetStream does): a broadcast the
//! network drops comes again 500-1 500 ms later. The peer core learns another peer's terminal
//! record from its broadcast, or from the store only when it commits one of its own for that
//! task, so a broadcast lost for good can leave a peer waiting.

use quorate_coordinator::peer::drive::{drive, PeerEnv, StoredResult};
use quorate_coordinator::peer::{commit_terminal, propose_plan, update_root_once, PeerMsg};
use quorate_coordinator::peer::{PlanVersion, RootUpdate, Terminal, TerminalCommit};
use quorate_coordinator::{Event, EventKind};
use quorate_coordinator::{PeerCore, StopReason, SupervisorConfig};
use quorate_protocols::drive::Answer;
use quorate_protocols::wire::{Assignment, Control, Report};
use quorate_protocols::{AgentId, Envelope, IdSource, Plan, PlanSpec, Role, RunId, Sender};
use quorate_protocols::{Budget, Payload, Precondition, TaskId, TaskState};
use quorate_state::{Account, AccountId, CasOutcome, MemoryStore, PreconditionFailure};
use rand::Rng;

use super::{Msg, Sim};
use crate::check::{Checker, Delivering, Invariant};
use crate::fault::Fault;

/// The root budget account's key in the simulated budget store.
const ROOT: &str = "budget/root";
/// The plan version's key in the simulated plan store.
const PLAN: &str = "plan/run";

/// The peers of a peer-mode schedule and their shared stores.
pub(super) struct PeerSide {
    cores: Vec<PeerCore>,
    claims: MemoryStore<usize>,
    states: MemoryStore<Terminal>,
    budget: MemoryStore<Account>,
    plans: MemoryStore<PlanVersion>,
    /// One shadow per peer, fed with the events that peer writes.
    checkers: Vec<Checker>,
    done: Vec<Option<StopReason>>,
    /// The run log's sequence, shared by every peer of the run.
    seq: u64,
}

impl PeerSide {
    /// `workers.len()` peers over `plan` (each given `fallback`, a `[fallback]` plan, if there
    /// is one); peer `p` runs worker `workers[p]`.
    pub(super) fn new(
        run: RunId,
        plan: &Plan,
        fallback: Option<&PlanSpec>,
        config: &SupervisorConfig,
        workers: &[Sender],
        ids: &mut IdSource,
    ) -> Self {
        let n = workers.len();
        let peers: Vec<Sender> = (0..n)
            .map(|p| Sender {
                agent: AgentId::from_u128(10 + p as u128),
                role: Role::Peer,
            })
            .collect();
        let tasks: Vec<_> = (0..plan.len()).map(|_| ids.task_id()).collect();
        let budget = MemoryStore::new();
        PeerCore::open_root(plan, &budget, ROOT);
        let cores = (0..n)
            .map(|p| {
                let mut core = PeerCore::new(
                    run,
                    plan.clone(),
                    config.clone(),
                    p,
                    peers.clone(),
                    workers[p],
                    tasks.clone(),
                    ids.fork(),
                );
                if let Some(spec) = fallback {
                    core.set_fallback_plan(spec.clone());
                }
                core
            })
            .collect();
        let fallback = fallback.map(|f| {
            f.clone()
                .validate()
                .expect("generated fallback plans are valid")
        });
        Self {
            cores,
            claims: MemoryStore::new(),
            states: MemoryStore::new(),
            budget,
            plans: MemoryStore::new(),
            checkers: (0..n)
                .map(|_| Checker::new(plan, fallback.as_ref()))
                .collect(),
            done: vec![None; n],
            seq: 0,
        }
    }

    /// Every peer's view of the tasks (by shadow index), for a report.
    pub(super) fn states(&self) -> String {
        let views: Vec<_> = self.checkers.iter().map(|c| &c.state).collect();
        format!("per peer {views:?}")
    }

    /// The earliest wake-up of any peer.
    pub(super) fn poll_timeout(&self) -> Option<u64> {
        self.cores.iter().filter_map(PeerCore::poll_timeout).min()
    }
}

impl Sim {
    fn peers(&mut self) -> &mut PeerSide {
        self.peer.as_deref_mut().expect("a peer-mode schedule")
    }

    /// Starts every peer, in index order.
    pub(super) fn start_peers(&mut self) {
        for p in 0..self.peers().cores.len() {
            self.peers().cores[p].start(0);
            self.drain_peer(p);
        }
    }

    /// Time `at` reaches every peer that has something to do by then.
    pub(super) fn tick_peers(&mut self, at: u64) {
        self.now = self.now.max(at);
        for p in 0..self.peers().cores.len() {
            if self.peers().cores[p]
                .poll_timeout()
                .is_some_and(|t| t <= at)
            {
                self.trace.note(at, format_args!("peer {p} tick"));
                let now = self.now;
                self.peers().cores[p].handle_tick(now);
                self.drain_peer(p);
            }
        }
    }

    /// A reply of worker `w` reaches its own peer `w`.
    pub(super) fn peer_reply(&mut self, env: Box<Envelope<Report>>) {
        let Some(p) = self.senders.iter().position(|s| *s == env.sender) else {
            return;
        };
        let now = self.now;
        let side = self.peers();
        if let Some(granted) = side.checkers[p].granted_of(env.task) {
            if !env.payload.spent.fits_within(&granted) {
                let detail = format!(
                    "a worker reported spending {} of a {granted} slice",
                    env.payload.spent
                );
                self.fail(Invariant::Budget, detail);
            }
        }
        let side = self.peers();
        side.checkers[p].delivering = Some(Delivering {
            task: env.task,
            attempt: env.attempt,
            version: env.state_version,
        });
        side.cores[p].handle_worker_reply(now, *env);
        self.drain_peer(p);
        self.peers().checkers[p].delivering = None;
    }

    /// Another peer's broadcast reaches peer `q`.
    pub(super) fn peer_broadcast(&mut self, q: usize, env: Box<Envelope<PeerMsg>>) {
        let now = self.now;
        self.peers().cores[q].handle_broadcast(now, *env);
        self.drain_peer(q);
    }

    /// Carries out peer `p`'s effects through the peer core's one drive loop
    /// ([`quorate_coordinator::peer::drive::drive`], with [`SimPeer`] as its environment).
    fn drain_peer(&mut self, p: usize) {
        // The cores leave the sim while one is driven (the environment is the rest of the sim).
        let mut cores = std::mem::take(&mut self.peers().cores);
        let n = cores.len();
        let _ = drive(&mut cores[p], &mut SimPeer { sim: self, p, n });
        self.peers().cores = cores;
    }
    /// After every step: the shared root account holds reserve + outstanding slices <= limit.
    pub(super) fn peer_after_step(&mut self) {
        let side = self.peers();
        let Some(acc) = side.budget.get_now(ROOT) else {
            self.fail(Invariant::Budget, "the root account vanished".into());
            return;
        };
        if !acc.value.invariant_holds() {
            let detail = format!("reserve + outstanding slices > limit: {:?}", acc.value);
            self.fail(Invariant::Budget, detail);
        }
    }

    /// At the end: every peer done with one stop reason, all the same, on the same plan
    /// version; the same state of every task of the plan the run ended on in every peer's
    /// view; completed results stored, and held by every peer.
    pub(super) fn peer_end_checks(&mut self) {
        let side = self.peer.as_deref().expect("peer mode");
        let n = side.cores.len();
        let plan = side.cores[0].plan().clone();
        let mut problems: Vec<(Invariant, String)> = Vec::new();
        let reasons: Vec<Option<&str>> = side
            .checkers
            .iter()
            .map(|c| match c.stops.as_slice() {
                [(_, r)] => Some(r.as_str()),
                _ => None,
            })
            .collect();
        if reasons.iter().any(Option::is_none) || reasons.windows(2).any(|w| w[0] != w[1]) {
            let stops: Vec<_> = side.checkers.iter().map(|c| &c.stops).collect();
            problems.push((Invariant::StopReason, format!("per peer: {stops:?}")));
        }
        let versions: Vec<u32> = side.cores.iter().map(PeerCore::plan_version).collect();
        if versions.windows(2).any(|w| w[0] != w[1]) {
            let detail = format!("the peers ended on plan versions {versions:?}");
            problems.push((Invariant::StopReason, detail));
        }
        // Shadow indices of the plan the run ended on (a switch cancels the tasks it drops).
        let shadow: Vec<usize> = (0..plan.len() as u32)
            .map(|i| {
                side.checkers[0]
                    .index_of(plan.node(i).id.as_str())
                    .expect("every node of a plan has a shadow")
            })
            .collect();
        for (i, &s) in shadow.iter().enumerate() {
            let states: Vec<TaskState> = side.checkers.iter().map(|c| c.state[s]).collect();
            if states.windows(2).any(|w| w[0] != w[1]) {
                let detail = format!("task {i} ended {states:?} in the peers' views");
                problems.push((Invariant::StopReason, detail));
            }
            if reasons[0] == Some("completed") && states[0] != TaskState::Completed {
                let detail = format!("stopped `completed` with task {i} {}", states[0]);
                problems.push((Invariant::StopReason, detail));
            }
            if side.checkers.iter().any(|c| c.confirmed[s]) {
                let key =
                    quorate_coordinator::result_key(self.run, plan.node(i as u32).id.as_str());
                let stored = self.results.get_now(&key).map(|v| v.value);
                let held = (0..n).find(|&p| {
                    side.cores[p].result(i as u32) != stored.as_ref().map(|v| v.value())
                });
                if stored.is_none() || held.is_some() {
                    let detail =
                        format!("result {key}: stored {stored:?}, peer {held:?} holds another");
                    problems.push((Invariant::ResultLost, detail));
                }
            }
        }
        if let Some((heal, delta)) = self.opts.liveness {
            let last = side
                .checkers
                .iter()
                .filter_map(|c| c.stops.first())
                .map(|(t, _)| *t)
                .max();
            let live = side
                .checkers
                .iter()
                .any(|c| shadow.iter().any(|&s| !c.state[s].is_terminal()));
            if live || last.is_none_or(|t| t > heal + delta) {
                let states: Vec<_> = side.checkers.iter().map(|c| &c.state).collect();
                let detail =
                    format!("healed at {heal} ms; last stop at {last:?}; states {states:?}");
                problems.push((Invariant::Liveness, detail));
            }
        }
        for (invariant, detail) in problems {
            self.fail(invariant, detail);
        }
    }

    /// The stop reason every peer reached (the first peer's).
    pub(super) fn peer_stop(&self) -> Option<String> {
        let side = self.peer.as_deref()?;
        side.checkers[0].stops.first().map(|(_, r)| r.clone())
    }

    /// A dropped broadcast: the transport redelivers it later (at least once).
    pub(super) fn redeliver(&mut self, msg: Msg) {
        let again = self.rng.gen_range(500..1_500);
        self.schedule(self.now + again, msg);
    }
}

/// Peer `p` of `n` in a sim as its core's drive environment: store calls are answered at once,
/// envelopes go to the network, and every answer is checked against the invariants.
struct SimPeer<'a> {
    sim: &'a mut Sim,
    p: usize,
    n: usize,
}

impl PeerEnv for SimPeer<'_> {
    fn now(&mut self) -> u64 {
        self.sim.now
    }

    fn try_claim(&mut self, _: u32, name: &str) -> Answer<bool> {
        let key = format!("claim/{name}");
        Answer::Now(
            self.sim
                .peers()
                .claims
                .cas_now(&key, None, self.p)
                .is_committed(),
        )
    }

    fn allocate(&mut self, _: u32, task: TaskId, slice: Budget) -> Answer<RootUpdate> {
        Answer::Now(update_root_once(&self.sim.peers().budget, ROOT, |acc| {
            acc.allocate(AccountId::Root, AccountId::Task(task), slice)
        }))
    }

    fn close_slice(&mut self, node: u32, task: TaskId, spent: Budget) -> Answer<RootUpdate> {
        let mut twice = false;
        let outcome = update_root_once(&self.sim.peers().budget, ROOT, |acc| {
            acc.child_closed(AccountId::Task(task), spent)
                .map(|closed| twice = !closed)
        });
        if twice && outcome == RootUpdate::Done {
            let detail = format!("peer {} returned node {node}'s slice twice", self.p);
            self.sim.fail(Invariant::Budget, detail);
        }
        Answer::Now(outcome)
    }

    fn check_preconditions(
        &mut self,
        _: u32,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        Answer::Now(quorate_state::check_preconditions(
            &self.sim.results,
            &checks,
        ))
    }

    fn execute(&mut self, envelope: Box<Envelope<Assignment>>) {
        self.sim.send(Msg::Assign(self.p, envelope));
    }

    fn control(&mut self, envelope: Envelope<Control>) {
        self.sim.send(Msg::Control(self.p, Box::new(envelope)));
    }

    fn commit_terminal(
        &mut self,
        name: &str,
        _claimed: bool,
        record: Terminal,
    ) -> Answer<TerminalCommit> {
        let key = format!("state/{name}");
        Answer::Now(commit_terminal(&self.sim.peers().states, &key, record))
    }

    fn commit_result(&mut self, _: u32, key: &str, value: Payload) -> Answer<StoredResult> {
        Answer::Now(match self.sim.results.create_now(key.to_string(), value) {
            CasOutcome::Committed(_) => None,
            CasOutcome::Conflict { current } => current,
        })
    }

    fn result_kept(
        &mut self,
        _: u32,
        key: &str,
        stored: &serde_json::Value,
        held: Option<&serde_json::Value>,
    ) {
        if held != Some(stored) {
            let detail = format!("result {key}: peer {} kept another value", self.p);
            self.sim.fail(Invariant::ResultLost, detail);
        }
    }

    fn propose_plan(&mut self, record: PlanVersion) -> Answer<Option<PlanVersion>> {
        Answer::Now(propose_plan(&self.sim.peers().plans, PLAN, record))
    }

    fn read_plan(&mut self) -> Answer<Option<PlanVersion>> {
        Answer::Now(self.sim.peers().plans.get_now(PLAN).map(|v| v.value))
    }

    fn broadcast(&mut self, envelope: Box<Envelope<PeerMsg>>) {
        for q in (0..self.n).filter(|&q| q != self.p) {
            self.sim.send(Msg::Broadcast(q, envelope.clone()));
        }
    }

    fn record(&mut self, mut event: Event) {
        let (p, now) = (self.p, self.sim.now);
        let side = self.sim.peers();
        event.seq = side.seq;
        side.seq += 1;
        if event.peer != Some(p) {
            let detail = format!("peer {p} wrote an event naming {:?}", event.peer);
            self.sim.fail(Invariant::StopReason, detail);
        }
        self.sim.trace.event(now, &event);
        if matches!(event.kind, EventKind::Replanned { .. }) {
            // Each peer that switches counts once.
            self.sim.counts.bump(Fault::Replan);
        }
        let side = self.sim.peers();
        side.checkers[p].on_event(now, &event);
        if let Some(v) = side.checkers[p].violation.take() {
            let detail = format!("peer {p}: {}", v.detail);
            self.sim.checker.fail(v.invariant, v.at_ms, detail);
        }
    }

    fn done(&mut self, _: &PeerCore, reason: StopReason) {
        let p = self.p;
        if self.sim.peers().done[p].replace(reason).is_some() {
            self.sim
                .fail(Invariant::StopReason, format!("peer {p} was done twice"));
        }
        self.sim.stopped = self.sim.peers().done.iter().all(Option::is_some);
    }
}
