//! The peer-core test driver: `n` peer cores over shared CAS stores, with hand-made worker
//! replies, every broadcast queued and every effect collected.
#![allow(dead_code)]

use std::collections::VecDeque;

use quorate_coordinator::peer::drive::{drive, PeerEnv, StoredResult};
use quorate_coordinator::peer::{
    commit_terminal, fence_after, fence_written, propose_plan, update_root_once, PeerMsg,
    PlanVersion, RootUpdate, Terminal, TerminalCommit,
};
use quorate_coordinator::trace::check_terminal_is_final;
use quorate_coordinator::{Event, PeerCore, StopReason, SupervisorConfig};
use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::{ActionCounts, Assignment, Control, Outcome, Report};
use quorate_protocols::{
    AgentId, Budget, Envelope, NodeSpec, Payload, Precondition, ResultKind, Role, RunId, Sender,
    TaskId,
};
use quorate_state::{Account, AccountId, CasOutcome, MemoryStore, PreconditionFailure};
use serde_json::json;

#[allow(unused_imports)] // each test binary uses some of them
pub(crate) use crate::support::{needs_key, node, spec_of, sub_task_action};

pub(crate) const ROOT: &str = "budget/root";

pub(crate) struct Net {
    pub cores: Vec<PeerCore>,
    pub workers: Vec<Sender>,
    pub claims: MemoryStore<usize>,
    pub states: MemoryStore<Terminal>,
    pub budget: MemoryStore<Account>,
    /// `plan/<run>`: the plan version the run switched to.
    pub plans: MemoryStore<PlanVersion>,
    /// Results and data: what store preconditions check.
    pub results: MemoryStore<quorate_protocols::Payload>,
    /// Broadcasts in flight: (to, envelope).
    pub inbox: VecDeque<(usize, Envelope<PeerMsg>)>,
    /// Every broadcast ever sent (for replays).
    pub sent: Vec<Envelope<PeerMsg>>,
    /// Assignments handed to each peer's worker, not yet answered.
    pub running: Vec<(usize, Envelope<Assignment>)>,
    pub executed: Vec<(usize, String)>,
    /// Controls sent to the peers' workers: (peer, task, control).
    pub controls: Vec<(usize, TaskId, Control)>,
    /// Result keys committed, by peer.
    pub committed: Vec<(usize, String)>,
    pub done: Vec<Option<StopReason>>,
    /// Allocations still to be answered `Contended` (another peer's CAS came first).
    pub contend: u32,
    /// Terminal commits still to be answered `Vanished`.
    pub vanish: u32,
    /// The events each peer recorded, in its order.
    pub events: Vec<Vec<Event>>,
    /// Each task's fence (`fence/<task id>`): the attempt that owns it (fenced cores only).
    pub fences: MemoryStore<u32>,
    /// Fences raised, in order: (peer, node, the attempt, or `None` when refused).
    pub raised: Vec<(usize, String, Option<u32>)>,
    /// Fence raises still to lose the answer of a CAS that committed (an etcd leader lost
    /// mid-request): the shell makes the same CAS again, as the process shell's retry does.
    pub lose_fence: u32,
}

impl Net {
    /// `n` peers on `nodes`; `root` overrides the shared root account's limit (e.g. another
    /// run already drew on it).
    pub(crate) fn new(n: usize, nodes: Vec<NodeSpec>, root: Option<Budget>) -> Self {
        Self::with_results(n, nodes, root, MemoryStore::new())
    }

    /// As [`Net::new`], over a result store that already holds some keys.
    pub(crate) fn with_results(
        n: usize,
        nodes: Vec<NodeSpec>,
        root: Option<Budget>,
        results: MemoryStore<quorate_protocols::Payload>,
    ) -> Self {
        Self::build_unstarted(n, nodes, root, results, SupervisorConfig::default()).started()
    }

    /// As [`Net::new`], with the peers' `config` (e.g. their approval policy).
    pub(crate) fn with_config(n: usize, nodes: Vec<NodeSpec>, config: SupervisorConfig) -> Self {
        Self::build_unstarted(n, nodes, None, MemoryStore::new(), config).started()
    }

    /// This net, started.
    fn started(mut self) -> Self {
        self.start();
        self
    }

    fn build_unstarted(
        n: usize,
        nodes: Vec<NodeSpec>,
        root: Option<Budget>,
        results: MemoryStore<quorate_protocols::Payload>,
        config: SupervisorConfig,
    ) -> Self {
        let plan = spec_of(nodes).validate().expect("valid plan");
        let run = RunId::from_u128(7);
        let peers: Vec<Sender> = (0..n)
            .map(|i| Sender {
                agent: AgentId::from_u128(10 + i as u128),
                role: Role::Peer,
            })
            .collect();
        let workers: Vec<Sender> = (0..n)
            .map(|i| Sender {
                agent: AgentId::from_u128(100 + i as u128),
                role: Role::Worker,
            })
            .collect();
        let ids: Vec<TaskId> = (0..plan.len()).map(|i| task_id(i as u32)).collect();
        let budget = MemoryStore::new();
        PeerCore::open_root(&plan, &budget, ROOT);
        if let Some(limit) = root {
            let cur = budget.get_now(ROOT).expect("root");
            let acc = Account::open(None, limit, Budget::steps(4)).expect("account");
            assert!(budget.cas_now(ROOT, Some(cur.version), acc).is_committed());
        }
        let cores = (0..n)
            .map(|i| {
                PeerCore::new(
                    run,
                    plan.clone(),
                    config.clone(),
                    i,
                    peers.clone(),
                    workers[i],
                    ids.clone(),
                    crate::support::ids(),
                )
            })
            .collect();
        Self {
            cores,
            workers,
            claims: MemoryStore::new(),
            states: MemoryStore::new(),
            budget,
            plans: MemoryStore::new(),
            results,
            inbox: VecDeque::new(),
            sent: vec![],
            running: vec![],
            executed: vec![],
            controls: vec![],
            committed: vec![],
            done: vec![None; n],
            contend: 0,
            vanish: 0,
            events: vec![Vec::new(); n],
            fences: MemoryStore::new(),
            raised: vec![],
            lose_fence: 0,
        }
    }

    /// As [`Net::with_results`], with `fallback` as every peer's fallback plan.
    pub(crate) fn with_fallback(
        n: usize,
        nodes: Vec<NodeSpec>,
        fallback: Vec<NodeSpec>,
        results: MemoryStore<quorate_protocols::Payload>,
    ) -> Self {
        let mut net = Self::build_unstarted(n, nodes, None, results, SupervisorConfig::default());
        for core in &mut net.cores {
            core.set_fallback_plan(spec_of(fallback.clone()));
        }
        net.started()
    }

    /// As [`Net::with_fallback`], with the peers' `config` (e.g. a deadline).
    pub(crate) fn with_fallback_config(
        n: usize,
        nodes: Vec<NodeSpec>,
        fallback: Vec<NodeSpec>,
        results: MemoryStore<quorate_protocols::Payload>,
        config: SupervisorConfig,
    ) -> Self {
        let mut net = Self::build_unstarted(n, nodes, None, results, config);
        for core in &mut net.cores {
            core.set_fallback_plan(spec_of(fallback.clone()));
        }
        net.started()
    }

    /// `n` fenced peers ([`PeerCore::set_fenced`]) on `nodes`, started.
    pub(crate) fn fenced(n: usize, nodes: Vec<NodeSpec>) -> Self {
        let mut net = Self::unstarted(n, nodes, SupervisorConfig::default());
        for core in &mut net.cores {
            core.set_fenced(true);
        }
        net.started()
    }

    /// As [`Net::with_config`], not started yet (see [`Net::start`]).
    pub(crate) fn unstarted(n: usize, nodes: Vec<NodeSpec>, config: SupervisorConfig) -> Self {
        Self::build_unstarted(n, nodes, None, MemoryStore::new(), config)
    }

    /// Starts every peer, in index order.
    pub(crate) fn start(&mut self) {
        for p in 0..self.cores.len() {
            self.cores[p].start(0);
            self.drain(p);
        }
    }

    /// Carries out peer `p`'s effects through the peer core's one drive loop ([`drive`]).
    pub(crate) fn drain(&mut self, p: usize) {
        let mut cores = std::mem::take(&mut self.cores);
        let n = cores.len();
        let flow = drive(&mut cores[p], &mut NetPeer { net: self, p, n });
        self.cores = cores;
        assert_eq!(flow, Flow::Continue, "nothing halts a test net");
        // Each peer's trace names it, and a task ends once in its view.
        assert!(self.events[p].iter().all(|e| e.peer == Some(p)));
        if let Err(e) = check_terminal_is_final(&self.events[p]) {
            panic!("{e}");
        }
        let acc = self.budget.get_now(ROOT).expect("root").value;
        assert!(
            acc.invariant_holds(),
            "reserve + children <= limit: {acc:?}"
        );
    }

    /// Time `now` reaches peer `p`.
    pub(crate) fn tick(&mut self, p: usize, now: u64) {
        self.cores[p].handle_tick(now);
        self.drain(p);
    }

    /// Answers the oldest running assignment of `node` with `outcome`.
    pub(crate) fn answer(&mut self, node: &str, outcome: Outcome) {
        self.reply(node, outcome, false);
    }

    /// Tells the peer running `node` a non-final `outcome`: the attempt keeps running.
    pub(crate) fn tell(&mut self, node: &str, outcome: Outcome) {
        self.reply(node, outcome, true);
    }

    pub(crate) fn reply(&mut self, node: &str, outcome: Outcome, keep_running: bool) {
        let k = self
            .running
            .iter()
            .position(|(_, e)| e.payload.node.as_str() == node)
            .expect("running");
        let (p, env) = if keep_running {
            self.running[k].clone()
        } else {
            self.running.remove(k)
        };
        let mut reply = env.reply(
            self.workers[p],
            ResultKind::VerifiedConclusion,
            Report {
                outcome,
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                calls: vec![],
            },
            &mut crate::support::ids(),
        );
        crate::support::rests_on_a_call(&mut reply);
        self.cores[p].handle_worker_reply(0, reply);
        self.drain(p);
    }

    /// `node`'s worker reports a failure ("boom"); the stop reason every peer should reach.
    pub(crate) fn fail(&mut self, node: &str) -> StopReason {
        let observation = String::from("boom");
        self.answer(
            node,
            Outcome::Failed {
                observation: observation.clone(),
            },
        );
        StopReason::Failed {
            node: node.into(),
            observation,
        }
    }

    pub(crate) fn ok(&mut self, node: &str) {
        let value = json!({ "from": node });
        self.answer(
            node,
            Outcome::Answer {
                value: value.into(),
                receipts: vec![],
            },
        );
    }

    pub(crate) fn deliver_all(&mut self) {
        while let Some((q, env)) = self.inbox.pop_front() {
            self.cores[q].handle_broadcast(0, env);
            self.drain(q);
        }
    }

    pub(crate) fn deliver(&mut self, q: usize, env: Envelope<PeerMsg>) {
        self.cores[q].handle_broadcast(0, env);
        self.drain(q);
    }

    pub(crate) fn running_nodes(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .running
            .iter()
            .map(|(_, e)| e.payload.node.to_string())
            .collect();
        v.sort();
        v
    }
}

pub(crate) fn diamond() -> Vec<NodeSpec> {
    vec![
        node("a", &[]),
        node("b", &[]),
        node("c", &["a", "b"]),
        node("d", &["c"]),
    ]
}

/// The id the peers give node `i` in these tests.
pub(crate) fn task_id(i: u32) -> TaskId {
    TaskId::from_u128(1000 + u128::from(i))
}

/// Two peers run `a`; its worker answers, and after the terminal record settled `a` it sends
/// another answer for the same attempt under a fresh dedupe key (a worker that retried its
/// reply). The peer must take it as late. The driver checks each peer's trace after every step
/// (a reply accepted after a terminal transition panics). Returns the net and `a`'s runner.
pub(crate) fn second_answer_after_settled() -> (Net, usize) {
    let mut net = Net::new(2, vec![node("a", &[])], None);
    let runner = net.executed[0].0;
    let answer = |n: u32| Outcome::Answer {
        value: serde_json::json!({ "n": n }).into(),
        receipts: vec![],
    };
    net.tell("a", answer(1));
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    net.answer("a", answer(2));
    (net, runner)
}

/// `load`, then `publish`, which needs `config/channel` (absent from the store).
pub(crate) fn replan_first_plan() -> Vec<NodeSpec> {
    vec![
        node("load", &[]),
        needs_key("publish", &["load"], "config/channel"),
    ]
}

/// The fallback of [`replan_first_plan`]: `load` carried over, `draft` instead of `publish`.
pub(crate) fn replan_fallback() -> Vec<NodeSpec> {
    vec![node("load", &[]), node("draft", &["load"])]
}

/// Three peers run [`replan_first_plan`]; `publish`'s precondition fails on every peer, each
/// proposes version 2 of `plan/<run>`, one proposal is written and every peer switches to it:
/// all give `draft` the stored id, it runs once, and every peer ends completed.
pub(crate) fn switch_to_fallback() -> Net {
    let mut net = Net::with_fallback(
        3,
        replan_first_plan(),
        replan_fallback(),
        MemoryStore::new(),
    );
    assert_eq!(net.running_nodes(), ["load"]);
    net.ok("load");
    net.deliver_all();
    let stored = net.plans.get_now("plan").expect("a plan version").value;
    assert_eq!(stored.version, 2);
    assert_eq!(net.running_nodes(), ["draft"]);
    for (p, core) in net.cores.iter().enumerate() {
        assert_eq!(
            core.task_id(1),
            stored.tasks[1],
            "peer {p} gives draft the stored id"
        );
    }
    net.ok("draft");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 3]);
    net
}

/// Peer `p` of `n` in a [`Net`] as its core's drive environment: store calls are answered at
/// once (with the contention and vanished records the test asked for), envelopes are queued.
struct NetPeer<'a> {
    net: &'a mut Net,
    p: usize,
    n: usize,
}

impl PeerEnv for NetPeer<'_> {
    fn now(&mut self) -> u64 {
        0
    }

    fn try_claim(&mut self, _: u32, name: &str) -> Answer<bool> {
        let key = format!("claim/{name}");
        Answer::Now(self.net.claims.cas_now(&key, None, self.p).is_committed())
    }

    fn allocate(&mut self, _: u32, task: TaskId, slice: Budget) -> Answer<RootUpdate> {
        Answer::Now(if self.net.contend > 0 {
            // Another peer got there first, `contend` times in a row.
            self.net.contend -= 1;
            RootUpdate::Contended
        } else {
            update_root_once(&self.net.budget, ROOT, |acc| {
                acc.allocate(AccountId::Root, AccountId::Task(task), slice)
            })
        })
    }

    fn close_slice(&mut self, _: u32, task: TaskId, spent: Budget) -> Answer<RootUpdate> {
        let outcome = update_root_once(&self.net.budget, ROOT, |acc| {
            acc.child_closed(AccountId::Task(task), spent)
                .map(|closed| assert!(closed, "a slice is returned once"))
        });
        assert_eq!(outcome, RootUpdate::Done);
        Answer::Now(outcome)
    }

    fn check_preconditions(
        &mut self,
        _: u32,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        Answer::Now(quorate_state::check_preconditions(
            &self.net.results,
            &checks,
        ))
    }

    fn raise_fence(&mut self, _: u32, name: &str, task: TaskId, past: u32) -> Answer<Option<u32>> {
        // Raised by CAS, only by the claim's holder, and only up, as the process shell does
        // (`src/process/peer/shell.rs`): a CAS that did not commit is judged by what the fence
        // holds (`fence_written`), else the fence is read again.
        let claim = format!("claim/{name}");
        let key = format!("fence/{task}");
        let fences = &self.net.fences;
        let raised = loop {
            // The claim is compared in the CAS's own transaction (etcd's guard).
            if self.net.claims.get_now(&claim).map(|c| c.value) != Some(self.p) {
                break None;
            }
            let current = fences.get_now(&key);
            let attempt = fence_after(current.as_ref().map(|f| f.value), past);
            let version = current.map(|f| f.version);
            let mut outcome = fences.cas_now(&key, version, attempt);
            if self.net.lose_fence > 0 && outcome.is_committed() {
                // Its answer lost: the same CAS again.
                self.net.lose_fence -= 1;
                outcome = fences.cas_now(&key, version, attempt);
            }
            match outcome {
                CasOutcome::Committed(_) => break Some(attempt),
                CasOutcome::Conflict { current } => {
                    if fence_written(attempt, current.map(|f| f.value)) {
                        break Some(attempt);
                    }
                }
            }
        };
        self.net.raised.push((self.p, name.to_string(), raised));
        Answer::Now(raised)
    }

    fn execute(&mut self, env: Box<Envelope<Assignment>>) {
        self.net
            .executed
            .push((self.p, env.payload.node.to_string()));
        self.net.running.push((self.p, *env));
    }

    fn control(&mut self, env: Envelope<Control>) {
        self.net.controls.push((self.p, env.task, env.payload));
    }

    fn commit_terminal(
        &mut self,
        name: &str,
        claimed: bool,
        record: Terminal,
    ) -> Answer<TerminalCommit> {
        let key = format!("state/{name}");
        // A claimed task's record only while the claim is the peer's (as etcd's guarded
        // transaction).
        let unclaimed = claimed
            && self
                .net
                .claims
                .get_now(&format!("claim/{name}"))
                .map(|c| c.value)
                != Some(self.p);
        Answer::Now(if unclaimed {
            match self.net.states.get_now(&key) {
                Some(c) => TerminalCommit::Taken {
                    record: c.value,
                    version: c.version.raw(),
                },
                None => TerminalCommit::Unclaimed { record },
            }
        } else if self.net.vanish > 0 {
            // The key reads as taken, yet holds nothing, `vanish` times in a row.
            self.net.vanish -= 1;
            TerminalCommit::Vanished { record }
        } else {
            commit_terminal(&self.net.states, &key, record)
        })
    }

    fn commit_result(&mut self, _: u32, key: &str, value: Payload) -> Answer<StoredResult> {
        let stored = match self.net.results.create_now(key.to_string(), value) {
            quorate_state::CasOutcome::Committed(_) => None,
            quorate_state::CasOutcome::Conflict { current } => current,
        };
        self.net.committed.push((self.p, key.to_string()));
        Answer::Now(stored)
    }

    fn propose_plan(&mut self, record: PlanVersion) -> Answer<Option<PlanVersion>> {
        Answer::Now(propose_plan(&self.net.plans, "plan", record))
    }

    fn read_plan(&mut self) -> Answer<Option<PlanVersion>> {
        Answer::Now(self.net.plans.get_now("plan").map(|v| v.value))
    }

    fn broadcast(&mut self, env: Box<Envelope<PeerMsg>>) {
        self.net.sent.push((*env).clone());
        for q in (0..self.n).filter(|&q| q != self.p) {
            self.net.inbox.push_back((q, (*env).clone()));
        }
    }

    fn record(&mut self, event: Event) {
        self.net.events[self.p].push(event);
    }

    fn done(&mut self, _: &PeerCore, reason: StopReason) {
        assert!(self.net.done[self.p].is_none(), "a peer is done once");
        self.net.done[self.p] = Some(reason);
    }
}
