//! Peer cores wired by a tiny deterministic driver: claims contend through a shared CAS store,
//! only one peer executes each task, terminal records reach every peer, duplicate and late
//! broadcasts are rejected, a terminal task is never reactivated, and all peers agree on the
//! stop reason.

mod support;

use std::collections::VecDeque;

use quorate_coordinator::peer::{PeerEffect, PeerMsg, Terminal};
use quorate_coordinator::{ApprovalPolicy, PeerCore, StopReason, SupervisorConfig};
use quorate_protocols::{
    ActionId, AgentId, Budget, Envelope, NodeSpec, ResultKind, Role, RunId, Sender, TaskId,
    TaskState,
};
use quorate_state::{Account, AccountId, MemoryStore};
use quorate_workers::messages::{ActionCounts, Assignment, Control, Outcome, Report};
use serde_json::json;

use support::{needs_key, node, spec_of, sub_task_action};

const ROOT: &str = "budget/root";

struct Net {
    cores: Vec<PeerCore>,
    workers: Vec<Sender>,
    claims: MemoryStore<usize>,
    states: MemoryStore<Terminal>,
    budget: MemoryStore<Account>,
    /// Results and data: what store preconditions check.
    results: MemoryStore<serde_json::Value>,
    /// Broadcasts in flight: (to, envelope).
    inbox: VecDeque<(usize, Envelope<PeerMsg>)>,
    /// Every broadcast ever sent (for replays).
    sent: Vec<Envelope<PeerMsg>>,
    /// Assignments handed to each peer's worker, not yet answered.
    running: Vec<(usize, Envelope<Assignment>)>,
    executed: Vec<(usize, String)>,
    /// Controls sent to the peers' workers: (peer, task, control).
    controls: Vec<(usize, TaskId, Control)>,
    /// Result keys committed, by peer.
    committed: Vec<(usize, String)>,
    done: Vec<Option<StopReason>>,
}

impl Net {
    /// `n` peers on `nodes`; `root` overrides the shared root account's limit (e.g. another
    /// run already drew on it).
    fn new(n: usize, nodes: Vec<NodeSpec>, root: Option<Budget>) -> Self {
        Self::with_results(n, nodes, root, MemoryStore::new())
    }

    /// As [`Net::new`], over a result store that already holds some keys.
    fn with_results(
        n: usize,
        nodes: Vec<NodeSpec>,
        root: Option<Budget>,
        results: MemoryStore<serde_json::Value>,
    ) -> Self {
        Self::build(n, nodes, root, results, SupervisorConfig::default())
    }

    /// As [`Net::new`], with the peers' `config` (e.g. their approval policy).
    fn with_config(n: usize, nodes: Vec<NodeSpec>, config: SupervisorConfig) -> Self {
        Self::build(n, nodes, None, MemoryStore::new(), config)
    }

    fn build(
        n: usize,
        nodes: Vec<NodeSpec>,
        root: Option<Budget>,
        results: MemoryStore<serde_json::Value>,
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
        let mut net = Self {
            cores,
            workers,
            claims: MemoryStore::new(),
            states: MemoryStore::new(),
            budget,
            results,
            inbox: VecDeque::new(),
            sent: vec![],
            running: vec![],
            executed: vec![],
            controls: vec![],
            committed: vec![],
            done: vec![None; n],
        };
        for p in 0..n {
            net.cores[p].start(0);
            net.drain(p);
        }
        net
    }

    fn drain(&mut self, p: usize) {
        while let Some(effect) = self.cores[p].poll_effect() {
            match effect {
                PeerEffect::TryClaim { node } => {
                    let won = self
                        .claims
                        .cas_now(&format!("claim/{node}"), None, p)
                        .is_committed();
                    self.cores[p].handle_claim_result(0, node, won);
                }
                PeerEffect::Allocate { node, task, slice } => {
                    let cur = self.budget.get_now(ROOT).expect("root");
                    let mut acc = cur.value.clone();
                    let out = acc
                        .allocate(AccountId::Root, AccountId::Task(task), slice)
                        .map(|_| ());
                    if out.is_ok() {
                        assert!(self
                            .budget
                            .cas_now(ROOT, Some(cur.version), acc)
                            .is_committed());
                    }
                    self.cores[p].handle_allocation(0, node, out);
                }
                PeerEffect::CloseSlice { task, spent } => {
                    let cur = self.budget.get_now(ROOT).expect("root");
                    let mut acc = cur.value.clone();
                    assert_eq!(acc.child_closed(AccountId::Task(task), spent), Ok(true));
                    assert!(self
                        .budget
                        .cas_now(ROOT, Some(cur.version), acc)
                        .is_committed());
                }
                PeerEffect::CheckPreconditions { node, checks } => {
                    let outcome = quorate_state::check_preconditions(&self.results, &checks);
                    self.cores[p].handle_preconditions(0, node, outcome);
                }
                PeerEffect::Execute(env) => {
                    self.executed.push((p, env.payload.node.to_string()));
                    self.running.push((p, *env));
                }
                PeerEffect::Control(env) => self.controls.push((p, env.task, env.payload)),
                PeerEffect::CommitTerminal(record) => {
                    let key = format!("state/{}", record.node);
                    match self.states.cas_now(&key, None, record.clone()) {
                        quorate_state::CasOutcome::Committed(v) => {
                            self.cores[p].handle_commit(0, record, v.raw(), true)
                        }
                        quorate_state::CasOutcome::Conflict { current: Some(c) } => {
                            self.cores[p].handle_commit(0, c.value, c.version.raw(), false)
                        }
                        other => panic!("{other:?}"),
                    }
                }
                PeerEffect::CommitResult { key, .. } => self.committed.push((p, key)),
                PeerEffect::Broadcast(env) => {
                    self.sent.push((*env).clone());
                    for q in (0..self.cores.len()).filter(|&q| q != p) {
                        self.inbox.push_back((q, (*env).clone()));
                    }
                }
                PeerEffect::Record(_) => {}
                PeerEffect::Done(reason) => {
                    assert!(self.done[p].is_none(), "a peer is done once");
                    self.done[p] = Some(reason);
                }
            }
        }
        let acc = self.budget.get_now(ROOT).expect("root").value;
        assert!(
            acc.invariant_holds(),
            "reserve + children <= limit: {acc:?}"
        );
    }

    /// Answers the oldest running assignment of `node` with `outcome`.
    fn answer(&mut self, node: &str, outcome: Outcome) {
        self.reply(node, outcome, false);
    }

    /// Tells the peer running `node` a non-final `outcome`: the attempt keeps running.
    fn tell(&mut self, node: &str, outcome: Outcome) {
        self.reply(node, outcome, true);
    }

    fn reply(&mut self, node: &str, outcome: Outcome, keep_running: bool) {
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
        let reply = env.reply(
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
        self.cores[p].handle_worker_reply(0, reply);
        self.drain(p);
    }

    /// `node`'s worker reports a failure ("boom"); the stop reason every peer should reach.
    fn fail(&mut self, node: &str) -> StopReason {
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

    fn ok(&mut self, node: &str) {
        let value = json!({ "from": node });
        self.answer(
            node,
            Outcome::Answer {
                value,
                receipts: vec![],
            },
        );
    }

    fn deliver_all(&mut self) {
        while let Some((q, env)) = self.inbox.pop_front() {
            self.cores[q].handle_broadcast(0, env);
            self.drain(q);
        }
    }

    fn deliver(&mut self, q: usize, env: Envelope<PeerMsg>) {
        self.cores[q].handle_broadcast(0, env);
        self.drain(q);
    }

    fn running_nodes(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .running
            .iter()
            .map(|(_, e)| e.payload.node.to_string())
            .collect();
        v.sort();
        v
    }
}

fn diamond() -> Vec<NodeSpec> {
    vec![
        node("a", &[]),
        node("b", &[]),
        node("c", &["a", "b"]),
        node("d", &["c"]),
    ]
}

#[test]
fn claims_contend_and_each_task_runs_on_exactly_one_peer() {
    let mut net = Net::new(3, diamond(), None);
    // Peers run one task at a time: a and b are claimed by different peers.
    assert_eq!(net.running_nodes(), ["a", "b"]);
    let owners: Vec<usize> = net.executed.iter().map(|(p, _)| *p).collect();
    assert_ne!(owners[0], owners[1]);
    net.ok("a");
    net.ok("b");
    net.deliver_all();
    assert_eq!(net.running_nodes(), ["c"]);
    net.ok("c");
    net.deliver_all();
    net.ok("d");
    net.deliver_all();
    let mut ran: Vec<&str> = net.executed.iter().map(|(_, n)| n.as_str()).collect();
    ran.sort_unstable();
    assert_eq!(ran, ["a", "b", "c", "d"], "each task executed exactly once");
    // Each result is merged once, by the peer that ran the task and won its terminal record.
    let mut keys: Vec<&str> = net
        .committed
        .iter()
        .map(|(_, k)| k.rsplit('/').next().unwrap())
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    for (p, key) in &net.committed {
        let node = key.rsplit('/').next().unwrap();
        assert!(
            net.executed.contains(&(*p, node.to_string())),
            "{key} merged by its runner"
        );
    }
    for (p, core) in net.cores.iter().enumerate() {
        assert_eq!(net.done[p], Some(StopReason::Completed), "peer {p}");
        for i in 0..4 {
            assert_eq!(core.task_state(i), TaskState::Completed);
            assert!(core.result(i).is_some(), "peer {p} knows result {i}");
        }
        for i in 0..4u32 {
            let claimed = net.cores.iter().filter(|c| c.claimed(i)).count();
            assert_eq!(claimed, 1, "node {i} claimed by one peer");
        }
    }
    // One broadcast per task, n - 1 messages each; all delivered, none rejected.
    let sent: u64 = net.cores.iter().map(|c| c.messages().sent).sum();
    let delivered: u64 = net.cores.iter().map(|c| c.messages().delivered).sum();
    assert_eq!((sent, delivered), (8, 8));
    let root = net.budget.get_now(ROOT).unwrap().value;
    assert!(root.children.is_empty(), "every slice closed");
    assert_eq!(root.spent().unwrap(), Budget::steps(4));
}

#[test]
fn duplicate_forged_and_late_broadcasts_are_rejected_and_never_reactivate() {
    let mut net = Net::new(2, vec![node("a", &[]), node("b", &[])], None);
    net.ok("a");
    let env = net.sent[0].clone();
    let receiver = 1 - net.executed[0].0;
    net.deliver_all();
    // The same envelope again: duplicate.
    net.deliver(receiver, env.clone());
    assert_eq!(net.cores[receiver].messages().rejected_duplicate, 1);
    // A fresh envelope claiming another terminal state for a completed task: late, no change.
    let mut forged = env.clone();
    forged.dedupe = crate::support::ids().dedupe_key();
    let PeerMsg::Terminal { record, .. } = &mut forged.payload;
    record.state = TaskState::Failed;
    record.cause = Some(StopReason::Cancelled);
    net.deliver(receiver, forged.clone());
    assert_eq!(net.cores[receiver].messages().rejected_late, 1);
    assert_eq!(net.cores[receiver].task_state(0), TaskState::Completed);
    // From someone who is not a peer: unauthorized.
    let mut stranger = forged;
    stranger.dedupe = crate::support::ids().dedupe_key();
    stranger.sender.agent = AgentId::from_u128(999);
    net.deliver(receiver, stranger);
    assert_eq!(net.cores[receiver].messages().rejected_unauthorized, 1);
    net.ok("b");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
}

#[test]
fn a_failure_stops_every_peer_with_the_same_reason() {
    let mut net = Net::new(3, diamond(), None);
    net.ok("a");
    let want = net.fail("b");
    net.deliver_all();
    // The late answer of the cancelled attempt, if any, changes nothing; every peer agrees.
    assert_eq!(net.done, vec![Some(want); 3]);
    for core in &net.cores {
        assert_eq!(core.task_state(0), TaskState::Completed);
        assert_eq!(core.task_state(1), TaskState::Failed);
        assert_eq!(core.task_state(2), TaskState::Cancelled);
        assert_eq!(core.task_state(3), TaskState::Cancelled);
    }
    assert_eq!(net.executed.len(), 2, "nothing runs after the failure");
    let root = net.budget.get_now(ROOT).unwrap().value;
    assert!(root.children.is_empty());
}

#[test]
fn a_budget_that_cannot_cover_a_slice_stops_with_stopped_limit() {
    // Room for one 10-step slice after the 4-step reserve, not two.
    let mut net = Net::new(
        2,
        vec![node("a", &[]), node("b", &[])],
        Some(Budget::new(20, 20, 1000, 100)),
    );
    net.deliver_all();
    assert_eq!(net.executed.len(), 1);
    net.ok(&net.executed[0].1.clone());
    net.deliver_all();
    for d in &net.done {
        assert!(matches!(d, Some(StopReason::StoppedLimit { .. })), "{d:?}");
    }
    let root = net.budget.get_now(ROOT).unwrap().value;
    assert!(root.invariant_holds() && root.children.is_empty());
}

#[test]
fn store_preconditions_are_checked_by_the_peers_and_a_failed_one_fails_its_task() {
    let results = MemoryStore::new();
    assert!(results
        .cas_now("config/on", None, json!(true))
        .is_committed());
    let mut net = Net::with_results(
        2,
        vec![
            needs_key("a", &[], "config/on"),
            needs_key("b", &["a"], "config/off"),
        ],
        None,
        results,
    );
    // a's key is there: it runs; b's is not: once a is done, b fails with the observation
    // instead of running.
    assert_eq!(net.running_nodes(), ["a"]);
    net.ok("a");
    net.deliver_all();
    assert!(net.executed.iter().all(|(_, n)| n != "b"), "b never ran");
    for p in 0..2 {
        assert_eq!(net.cores[p].task_state(0), TaskState::Completed);
        assert_eq!(net.cores[p].task_state(1), TaskState::Failed);
        match &net.done[p] {
            Some(StopReason::Failed { node, observation }) => {
                assert_eq!(node, "b");
                assert!(observation.contains("config/off"), "{observation}");
            }
            other => panic!("peer {p}: {other:?}"),
        }
    }
}

/// The id the peers give node `i` in these tests.
fn task_id(i: u32) -> TaskId {
    TaskId::from_u128(1000 + u128::from(i))
}

/// Two peers running `nodes`, where nobody decides approvals.
fn asking(nodes: Vec<NodeSpec>) -> Net {
    let config = SupervisorConfig {
        approvals: ApprovalPolicy::Ask,
        ..SupervisorConfig::default()
    };
    Net::with_config(2, nodes, config)
}

/// Two peers, one task "a" whose delegated sub-task parked a call for a human (nobody decides).
fn parked_sub_task_request() -> (Net, ActionId) {
    let net = asking(vec![node("a", &[])]);
    assert_eq!(net.running_nodes(), ["a"]);
    (net, sub_task_action())
}

fn request(action: ActionId) -> Outcome {
    Outcome::ApprovalRequested {
        action,
        reason: "drops a table".into(),
    }
}

#[test]
fn a_sub_task_request_settles_its_task_only_once_the_worker_says_quiet() {
    let (mut net, action) = parked_sub_task_request();
    net.tell("a", request(action));
    net.deliver_all();
    // a's other sub-tasks may still be calling tools: nothing is settled, no peer is done.
    assert_eq!(net.done, vec![None, None]);
    assert!(net.states.is_empty(), "no terminal record yet");
    // A Quiet for another action is not this request's.
    net.tell(
        "a",
        Outcome::Quiet {
            action: ActionId::new(TaskId::from_u128(98), 0, 0),
        },
    );
    net.deliver_all();
    assert_eq!(net.done, vec![None, None]);
    net.tell("a", Outcome::Quiet { action });
    net.deliver_all();
    let want = StopReason::WaitingApproval { node: "a".into() };
    assert_eq!(net.done, vec![Some(want.clone()), Some(want)]);
    for core in &net.cores {
        assert_eq!(core.task_state(0), TaskState::WaitingApproval);
    }
}

#[test]
fn a_quiet_that_overtakes_its_request_is_kept_for_it_and_an_own_request_needs_none() {
    let (mut net, action) = parked_sub_task_request();
    net.tell("a", Outcome::Quiet { action });
    net.deliver_all();
    assert_eq!(net.done, vec![None, None], "a Quiet alone settles nothing");
    net.tell("a", request(action));
    net.deliver_all();
    let want = StopReason::WaitingApproval { node: "a".into() };
    assert_eq!(net.done, vec![Some(want.clone()), Some(want.clone())]);

    // The task's own request: nothing else of the task works, so it settles at once.
    let (mut net, _) = parked_sub_task_request();
    let own = ActionId::new(task_id(0), 0, 0);
    net.tell("a", request(own));
    net.deliver_all();
    assert_eq!(net.done, vec![Some(want.clone()), Some(want)]);
}

#[test]
fn a_stop_while_a_task_waits_for_quiet_cancels_it() {
    let mut net = asking(vec![node("a", &[]), node("b", &[])]);
    assert_eq!(net.running_nodes(), ["a", "b"]);
    let action = sub_task_action();
    net.tell("a", request(action));
    let want = net.fail("b");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(want.clone()), Some(want)]);
    for core in &net.cores {
        assert_eq!(core.task_state(0), TaskState::Cancelled);
    }
    // a's worker, whose other sub-tasks may still be calling tools, is told to stop.
    let a = task_id(0);
    let runner = net
        .executed
        .iter()
        .find(|(_, n)| n == "a")
        .expect("a ran")
        .0;
    assert_eq!(net.controls, vec![(runner, a, Control::Cancel)]);
    // Its Quiet, coming after the stop, is late and changes nothing.
    let late = net.cores[runner].messages().rejected_late;
    net.tell("a", Outcome::Quiet { action });
    net.deliver_all();
    assert_eq!(net.cores[runner].task_state(0), TaskState::Cancelled);
    assert_eq!(net.cores[runner].messages().rejected_late, late + 1);
}
