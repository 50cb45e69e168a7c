//! Peer cores wired by a tiny deterministic driver: claims contend through a shared CAS store,
//! only one peer executes each task, terminal records reach every peer, duplicate and late
//! broadcasts are rejected, a terminal task is never reactivated, and all peers agree on the
//! stop reason.

mod peer_net;
mod support;

use quorate_coordinator::peer::{PeerMsg, SharedStoreError, SHARED_CAS_TRIES};
use quorate_coordinator::{ApprovalPolicy, EventKind, StopReason, SupervisorConfig};
use quorate_protocols::wire::{Control, Outcome};
use quorate_protocols::{ActionId, AgentId, Budget, NodeSpec, TaskId, TaskState};
use quorate_state::MemoryStore;
use serde_json::json;

use peer_net::{diamond, needs_key, node, sub_task_action, task_id, Net, ROOT};

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
    // One the transport refused (its subject and claimed sender differ): counted and logged the
    // same way, though the core never reads it.
    let (delivered, logged) = (
        net.cores[receiver].messages().delivered,
        net.events[receiver].len(),
    );
    net.cores[receiver].handle_unauthorized_delivery(0);
    net.drain(receiver);
    assert_eq!(net.cores[receiver].messages().rejected_unauthorized, 2);
    assert_eq!(net.cores[receiver].messages().delivered, delivered + 1);
    let new: Vec<&EventKind> = net.events[receiver][logged..]
        .iter()
        .map(|e| &e.kind)
        .collect();
    assert_eq!(new, vec![&EventKind::RejectedUnauthorized]);
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
        .cas_now("config/on", None, json!(true).into())
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

#[test]
fn an_attempt_without_a_reply_runs_again_after_its_timeout_then_its_task_fails() {
    let config = SupervisorConfig {
        attempt_timeout_ms: 100,
        max_attempts: 2,
        ..SupervisorConfig::default()
    };
    let mut net = Net::with_config(2, vec![node("a", &[])], config);
    let (p, first) = net.running.remove(0); // its reply is lost
    assert_eq!(net.cores[p].poll_timeout(), Some(100));
    assert_eq!(
        net.cores[1 - p].poll_timeout(),
        None,
        "the other peer runs nothing"
    );
    net.tick(p, 99);
    assert_eq!(net.executed.len(), 1, "not yet");
    net.tick(p, 100);
    assert_eq!(net.executed, vec![(p, "a".into()), (p, "a".into())]);
    let (_, second) = net.running.last().expect("a runs again").clone();
    assert_eq!((first.attempt, second.attempt), (1, 2));
    assert_ne!(second.state_version, first.state_version);
    assert_eq!(net.cores[p].poll_timeout(), Some(200));
    // The first attempt's reply, found at last, is late.
    let late = first.reply(
        net.workers[p],
        quorate_protocols::ResultKind::VerifiedConclusion,
        quorate_protocols::wire::Report {
            outcome: Outcome::Failed {
                observation: "boom".into(),
            },
            spent: Budget::steps(1),
            actions: Default::default(),
            calls: vec![],
        },
        &mut support::ids(),
    );
    net.cores[p].handle_worker_reply(150, late);
    net.drain(p);
    assert_eq!(net.cores[p].messages().rejected_late, 1);
    assert_eq!(net.cores[p].task_state(0), TaskState::Running);
    // The second attempt is the last: it fails its task, and every peer stops on it.
    net.tick(p, 200);
    net.deliver_all();
    let want = StopReason::Failed {
        node: "a".into(),
        observation: "no reply after 2 attempts".into(),
    };
    assert_eq!(net.done, vec![Some(want.clone()), Some(want)]);
    assert_eq!(net.executed.len(), 2, "no third attempt");
    assert_eq!(net.controls, vec![(p, task_id(0), Control::Cancel)]);
}

/// Two peers on one task `a`, whose first `contend` allocations and first `vanish` terminal
/// commits meet another peer's change or an empty key.
fn faulty_store(contend: u32, vanish: u32) -> Net {
    let mut net = Net::unstarted(2, vec![node("a", &[])], SupervisorConfig::default());
    net.contend = contend;
    net.vanish = vanish;
    net.start();
    net
}

#[test]
fn root_account_contention_is_tried_again_by_the_core_then_given_up_with_a_typed_reason() {
    // A few contended CASes: the peer tries again, and the task runs.
    let mut net = faulty_store(3, 0);
    assert_eq!(net.contend, 0, "every contended CAS was answered");
    assert_eq!(net.running_nodes(), ["a"]);
    net.ok("a");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    // Contended every time: the task fails, naming contention (not an unknown account, not
    // a limit), and every peer stops on it.
    let mut net = faulty_store(SHARED_CAS_TRIES, 0);
    assert!(net.executed.is_empty(), "a never ran");
    net.deliver_all();
    let observation = format!(
        "budget: {}",
        SharedStoreError::RootContended {
            tries: SHARED_CAS_TRIES
        }
    );
    assert!(
        observation.contains("changed by other peers"),
        "{observation}"
    );
    let want = StopReason::Failed {
        node: "a".into(),
        observation,
    };
    assert_eq!(net.done, vec![Some(want.clone()), Some(want)]);
}

#[test]
fn a_terminal_record_that_vanished_is_committed_again_or_its_task_given_up() {
    // It vanished twice: the third commit holds, and the run completes.
    let mut net = faulty_store(0, 2);
    net.ok("a");
    assert_eq!(net.vanish, 0);
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    assert!(net.states.get_now("state/a").is_some());
    // Every time: the peer that ran `a` stops committing and gives it up as failed (before,
    // it stayed committing and never finished).
    let mut net = faulty_store(0, SHARED_CAS_TRIES);
    let runner = net.executed[0].0;
    net.ok("a");
    let observation = SharedStoreError::RecordVanished {
        tries: SHARED_CAS_TRIES,
    }
    .to_string();
    let want = StopReason::Failed {
        node: "a".into(),
        observation,
    };
    assert_eq!(net.done[runner], Some(want));
    assert_eq!(net.cores[runner].task_state(0), TaskState::Failed);
    assert_eq!(net.cores[runner].poll_effect(), None, "nothing more to do");
}

#[test]
fn a_result_found_in_the_store_is_kept_and_logged() {
    let mut net = Net::new(2, vec![node("a", &[]), node("b", &["a"])], None);
    let key = quorate_coordinator::result_key(quorate_protocols::RunId::from_u128(7), "a");
    let stored = json!({ "from": "earlier" });
    assert!(net
        .results
        .create_now(key, stored.clone().into())
        .is_committed());
    let runner = net.executed[0].0;
    net.ok("a");
    let kept = net.events[runner].iter().find_map(|e| match &e.kind {
        EventKind::ResultKept { same, result, .. } => Some((*same, result.value().clone())),
        _ => None,
    });
    assert_eq!(kept, Some((false, stored.clone())));
    assert_eq!(
        net.cores[runner].result(0),
        Some(&stored),
        "the stored one is a's result"
    );
}

#[test]
fn a_reply_for_a_settled_task_is_late_and_changes_nothing() {
    let (net, runner) = peer_net::second_answer_after_settled();
    let core = &net.cores[runner];
    assert_eq!(core.messages().rejected_late, 1);
    assert_eq!(core.task_state(0), TaskState::Completed);
    assert_eq!(
        core.result(0),
        Some(&json!({ "n": 1 })),
        "the first answer stands"
    );
    let accepted = net.events[runner]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ReplyAccepted))
        .count();
    assert_eq!(accepted, 1);
}
