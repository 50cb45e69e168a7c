//! BUG-5 (docs/reliability.md): a peer's check of a guarded node fails while another peer, whose
//! check passed before the lock was taken, claimed and runs the node. The switch to the fallback
//! (which drops the node) is decided on the node's terminal record: the peer whose check failed
//! commits it as dropped by version 2 before it proposes the switch, and the record committed
//! first decides, in every order of the two peers' steps:
//!
//! * the claimant's record first (it ran the node, or cancelled it while stopping): adopted, no
//!   switch, every peer ends on plan version 1;
//! * the dropped record first: the claimant finds it when it commits the node (its answer, or
//!   its stop's cancellation), cancels its attempt and switches too;
//! * a dropped record whose writer never proposed the switch: the peer that finds it proposes
//!   (also a resumed run whose store holds it).

mod peer_net;
mod support;

use quorate_coordinator::peer::Terminal;
use quorate_coordinator::{EventKind, StopReason, SupervisorConfig};
use quorate_protocols::wire::Control;
use quorate_protocols::TaskState;
use quorate_state::MemoryStore;
use serde_json::json;

use peer_net::{replan_fallback as fallback, replan_first_plan as first_plan, Net};

/// The lock key `publish` needs.
const KEY: &str = "config/channel";
/// The deadline of the peers that stop in these tests.
const DEADLINE: u64 = 100;

/// Two peers; `KEY` is there when the peer that ran `load` checks `publish`, so it claims and
/// runs it; then another writer takes the lock (the key goes) before the other peer learns of
/// `load`. Returns the net, the claimant and the other peer.
fn claimant_runs_publish(config: SupervisorConfig) -> (Net, usize, usize) {
    let results = MemoryStore::new();
    assert!(results.create_now(KEY, json!("mail").into()).is_committed());
    let mut net = Net::with_fallback_config(2, first_plan(), fallback(), results, config);
    net.ok("load");
    assert_eq!(net.running_nodes(), ["publish"]);
    let claimant = net.executed.iter().find(|(_, n)| n == "publish").unwrap().0;
    let version = net.results.get_now(KEY).unwrap().version;
    let deleted = net.results.delete_now(KEY, version);
    assert!(matches!(deleted, quorate_state::DeleteOutcome::Deleted));
    (net, claimant, 1 - claimant)
}

fn deadline() -> SupervisorConfig {
    SupervisorConfig {
        deadline_ms: Some(DEADLINE),
        ..SupervisorConfig::default()
    }
}

/// `publish`'s record in the shared state store.
fn stored_publish(net: &Net) -> Terminal {
    net.states.get_now("state/publish").expect("a record").value
}

fn replanned(net: &Net, p: usize) -> usize {
    net.events[p]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Replanned { .. }))
        .count()
}

fn precondition_failed(net: &Net, p: usize) -> bool {
    net.events[p]
        .iter()
        .any(|e| matches!(e.kind, EventKind::PreconditionFailed { .. }))
}

#[test]
fn the_claimants_record_first_keeps_the_plan() {
    let (mut net, claimant, other) = claimant_runs_publish(SupervisorConfig::default());
    net.ok("publish");
    // The other peer learns of load now: its check of publish fails, its dropped record loses
    // to the claimant's and it adopts that record.
    net.deliver_all();
    assert!(precondition_failed(&net, other));
    assert_eq!(stored_publish(&net).state, TaskState::Completed);
    assert_eq!(stored_publish(&net).by, claimant);
    assert!(net.plans.get_now("plan").is_none(), "no switch proposed");
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    for p in 0..2 {
        assert_eq!(net.cores[p].plan_version(), 1, "peer {p}");
        assert_eq!(replanned(&net, p), 0, "peer {p}");
        assert_eq!(net.cores[p].task_state(1), TaskState::Completed, "peer {p}");
    }
}

#[test]
fn the_dropped_record_first_switches_the_claimant_when_it_commits() {
    let (mut net, claimant, other) = claimant_runs_publish(SupervisorConfig::default());
    net.deliver_all();
    assert!(precondition_failed(&net, other));
    let record = stored_publish(&net);
    assert_eq!((record.dropped_by, record.by), (Some(2), other));
    assert_eq!(net.cores[other].plan_version(), 2);
    assert_eq!(net.cores[claimant].plan_version(), 1);
    assert_eq!(net.running_nodes(), ["draft", "publish"]);
    // The claimant's attempt ends; its commit finds the dropped record: it switches as well.
    net.ok("publish");
    assert_eq!(net.cores[claimant].plan_version(), 2);
    assert_eq!(stored_publish(&net), record, "the dropped record stays");
    let cancelled = net.events[claimant].iter().any(|e| {
        e.task.as_deref() == Some("publish")
            && matches!(
                e.kind,
                EventKind::Transition {
                    to: TaskState::Cancelled,
                    ..
                }
            )
    });
    assert!(cancelled, "publish cancelled in the claimant's view");
    net.ok("draft");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    for p in 0..2 {
        assert_eq!(net.cores[p].plan_version(), 2, "peer {p}");
        assert_eq!(replanned(&net, p), 1, "peer {p}");
    }
}

#[test]
fn the_dropped_record_first_cancels_a_running_claimant_attempt() {
    // As above, but the claimant's attempt is still running when it learns of the switch from
    // `draft`'s record: the attempt is told to cancel and its answer comes too late.
    let (mut net, claimant, _) = claimant_runs_publish(SupervisorConfig::default());
    net.deliver_all();
    net.ok("draft");
    net.deliver_all();
    assert_eq!(net.cores[claimant].plan_version(), 2);
    assert!(net
        .controls
        .iter()
        .any(|(p, t, c)| *p == claimant && *t == peer_net::task_id(1) && *c == Control::Cancel));
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    assert_eq!(stored_publish(&net).dropped_by, Some(2));
}

#[test]
fn a_stop_that_cancelled_the_node_first_keeps_the_plan() {
    // BUG-6: the claimant stops (deadline) and commits publish cancelled before the other peer's
    // check fails: the other peer adopts the cancellation and stops too, on plan version 1.
    let (mut net, claimant, other) = claimant_runs_publish(deadline());
    net.tick(claimant, DEADLINE);
    assert_eq!(stored_publish(&net).state, TaskState::Cancelled);
    assert_eq!(stored_publish(&net).dropped_by, None);
    net.deliver_all();
    assert!(precondition_failed(&net, other));
    assert!(net.plans.get_now("plan").is_none(), "no switch proposed");
    assert_eq!(net.done, vec![Some(StopReason::Deadline); 2]);
    for p in 0..2 {
        assert_eq!(net.cores[p].plan_version(), 1, "peer {p}");
        assert_eq!(replanned(&net, p), 0, "peer {p}");
    }
}

#[test]
fn a_stop_after_the_dropped_record_switches_and_cancels_the_new_node() {
    // The switch first; then the claimant stops: its cancellation of publish finds the dropped
    // record, so it switches while stopping and cancels draft, which the other peer adopts.
    let (mut net, claimant, other) = claimant_runs_publish(deadline());
    net.deliver_all();
    assert_eq!(net.cores[other].plan_version(), 2);
    net.tick(claimant, DEADLINE);
    assert_eq!(net.cores[claimant].plan_version(), 2);
    let draft = net
        .states
        .get_now("state/draft")
        .expect("draft's record")
        .value;
    assert_eq!(
        (draft.state, draft.cause, draft.by),
        (TaskState::Cancelled, Some(StopReason::Deadline), claimant)
    );
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Deadline); 2]);
    for p in 0..2 {
        assert_eq!(net.cores[p].plan_version(), 2, "peer {p}");
        assert_eq!(net.cores[p].task_state(1), TaskState::Cancelled, "peer {p}");
    }
}

#[test]
fn a_dropped_record_without_a_proposal_is_proposed_by_the_peer_that_finds_it() {
    // The other peer wrote the dropped record and ended before it proposed the switch.
    let (mut net, claimant, other) = claimant_runs_publish(SupervisorConfig::default());
    let record = Terminal {
        node: 1,
        state: TaskState::Cancelled,
        result: None,
        evidence: Vec::new(),
        cause: None,
        by: other,
        dropped_by: Some(2),
    };
    assert!(net
        .states
        .cas_now("state/publish", None, record)
        .is_committed());
    net.ok("publish");
    let plan = net.plans.get_now("plan").expect("proposed").value;
    assert_eq!((plan.version, plan.by), (2, claimant));
    assert_eq!(net.cores[claimant].plan_version(), 2);
    assert_eq!(net.running_nodes(), ["draft"]);
    net.deliver_all();
    net.ok("draft");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    for p in 0..2 {
        assert_eq!(net.cores[p].plan_version(), 2, "peer {p}");
    }
}

#[test]
fn a_resumed_run_whose_store_holds_a_dropped_record_switches() {
    // The run ended (every peer's process) after peer 1 wrote publish's dropped record and
    // before anyone proposed the switch: the resumed peers propose it and follow it.
    use quorate_coordinator::peer::resume::{LastAttempt, PeerResume};
    use quorate_coordinator::PeerCore;
    use quorate_protocols::{AgentId, Role, RunId, Sender};

    let mut net = Net::unstarted(2, first_plan(), SupervisorConfig::default());
    let plan = support::spec_of(first_plan()).validate().unwrap();
    let slice = plan.node(0).budget;
    let record = |node, state, by, dropped_by| Terminal {
        node,
        state,
        result: (state == TaskState::Completed).then(|| json!({ "from": "load" }).into()),
        evidence: Vec::new(),
        cause: None,
        by,
        dropped_by,
    };
    let from = PeerResume {
        plan: plan.clone(),
        plan_version: 1,
        tasks: vec![peer_net::task_id(0), peer_net::task_id(1)],
        terminals: vec![
            Some((record(0, TaskState::Completed, 0, None), 1)),
            Some((record(1, TaskState::Cancelled, 1, Some(2)), 2)),
        ],
        attempts: vec![
            Some(LastAttempt {
                peer: 0,
                attempt: 1,
                granted: slice,
                closed: Some(slice),
            }),
            None,
        ],
        views: vec![vec![TaskState::Completed, TaskState::Pending]; 2],
        root: net.budget.get_now(peer_net::ROOT).unwrap().value,
        seq: 0,
        replayed: 0,
    };
    let peers: Vec<Sender> = (0..2)
        .map(|i| Sender {
            agent: AgentId::from_u128(10 + i),
            role: Role::Peer,
        })
        .collect();
    for p in 0..2 {
        let mut core = PeerCore::resume(
            RunId::from_u128(7),
            &from,
            SupervisorConfig::default(),
            p,
            peers.clone(),
            net.workers[p],
            support::ids(),
        );
        core.set_fallback_plan(support::spec_of(fallback()));
        net.cores[p] = core;
    }
    net.start();
    let stored = net.plans.get_now("plan").expect("proposed on resume").value;
    assert_eq!(stored.version, 2);
    assert_eq!(net.running_nodes(), ["draft"]);
    net.ok("draft");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    for p in 0..2 {
        assert_eq!(net.cores[p].plan_version(), 2, "peer {p}");
        assert_eq!(replanned(&net, p), 1, "peer {p}");
    }
}
