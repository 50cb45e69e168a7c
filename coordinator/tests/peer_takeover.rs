//! A peer that dies holding a claim: once its claim is gone from the store (its lease expired),
//! another peer adopts the task's terminal record if one was committed, or claims the task again
//! by CAS and runs it.

mod peer_net;
mod support;

use quorate_protocols::wire::Control;
use quorate_protocols::TaskState;
use quorate_state::DeleteOutcome;

use peer_net::{node, Net};
use quorate_coordinator::peer::{PeerEffect, RootUpdate};
use quorate_coordinator::StopReason;

/// Two peers on two independent tasks: peer 0 runs `a`, peer 1 runs `b`.
fn two_peers() -> Net {
    let net = Net::new(2, vec![node("a", &[]), node("b", &[])], None);
    assert_eq!(net.executed, [(0, "a".into()), (1, "b".into())]);
    net
}

/// Peer 0 dies: its assignment is never answered and its claim of `a` leaves the store.
fn peer_0_dies(net: &mut Net) {
    net.running.retain(|(p, _)| *p != 0);
    let claim = net.claims.get_now("claim/a").expect("a is claimed");
    assert_eq!(claim.value, 0);
    assert!(matches!(
        net.claims.delete_now("claim/a", claim.version),
        DeleteOutcome::Deleted
    ));
}

#[test]
fn a_lost_claim_without_a_record_is_claimed_again_and_its_task_run_by_another_peer() {
    let mut net = two_peers();
    net.ok("b");
    // Peer 1 waits on peer 0 for `a` only.
    assert_eq!(net.cores[1].awaiting_others(), [0]);
    assert!(net.cores[0].awaiting_others().is_empty(), "its own claim");
    peer_0_dies(&mut net);
    net.cores[1].handle_claim_lost(0, 0, None);
    net.drain(1);
    assert_eq!(net.claims.get_now("claim/a").map(|c| c.value), Some(1));
    assert_eq!(net.executed.last(), Some(&(1, "a".into())));
    assert!(net.cores[1].awaiting_others().is_empty());
    net.ok("a");
    assert_eq!(net.done[1], Some(StopReason::Completed));
    assert_eq!(net.cores[1].task_state(0), TaskState::Completed);
    assert!(net.cores[1].claimed(0));
    let record = net.states.get_now("state/a").expect("committed").value;
    assert_eq!(record.by, 1, "the peer that took over committed it");
}

#[test]
fn a_lost_claim_with_a_committed_record_is_adopted_without_running_again() {
    let mut net = two_peers();
    net.ok("b");
    net.ok("a");
    // Peer 0 committed `a` and died before its broadcast went out.
    net.inbox.retain(|(to, _)| *to != 1);
    peer_0_dies(&mut net);
    assert_eq!(net.cores[1].awaiting_others(), [0]);
    let stored = net.states.get_now("state/a").expect("committed");
    net.cores[1].handle_claim_lost(0, 0, Some((stored.value, stored.version.raw())));
    net.drain(1);
    assert_eq!(net.executed.iter().filter(|(_, n)| n == "a").count(), 1);
    assert_eq!(net.cores[1].task_state(0), TaskState::Completed);
    assert!(net.cores[1].result(0).is_some(), "the stored result");
    assert_eq!(net.done[1], Some(StopReason::Completed));
}

#[test]
fn a_lost_claim_changes_nothing_for_its_own_peer_or_a_settled_task() {
    let mut net = two_peers();
    // Peer 0's own claim: it keeps running `a` (the shell ends a peer whose lease is lost).
    net.cores[0].handle_claim_lost(0, 0, None);
    net.drain(0);
    assert_eq!(net.cores[0].task_state(0), TaskState::Running);
    assert_eq!(net.executed.len(), 2);
    net.ok("a");
    net.deliver_all();
    // Settled in peer 1's view: a late report of the claim's loss starts nothing.
    net.cores[1].handle_claim_lost(0, 0, None);
    net.drain(1);
    assert_eq!(net.cores[1].task_state(0), TaskState::Completed);
    assert_eq!(net.executed.len(), 2);
    assert!(net.cores[1].awaiting_others().is_empty());
}

/// Two fenced peers (their books live in a shared store) on two independent tasks.
fn two_fenced_peers() -> Net {
    let net = Net::fenced(2, vec![node("a", &[]), node("b", &[])]);
    assert_eq!(net.executed, [(0, "a".into()), (1, "b".into())]);
    net
}

/// The attempt of `node`'s running assignment.
fn running_attempt(net: &Net, node: &str) -> u32 {
    let (_, env) = net
        .running
        .iter()
        .find(|(_, e)| e.payload.node.as_str() == node)
        .expect("running");
    env.attempt
}

#[test]
fn a_fenced_peer_raises_the_fence_to_its_attempt_before_its_worker_runs() {
    let mut net = Net::unstarted(
        1,
        vec![node("a", &[])],
        quorate_coordinator::SupervisorConfig::default(),
    );
    net.cores[0].set_fenced(true);
    net.cores[0].start(0);
    // Claim, allocate: then the fence, and nothing for the worker until it is raised.
    let mut asked = None;
    while let Some(effect) = net.cores[0].poll_effect() {
        match effect {
            PeerEffect::TryClaim { node } => net.cores[0].handle_claim_result(0, node, true),
            PeerEffect::Allocate { node, .. } => {
                net.cores[0].handle_allocation(0, node, RootUpdate::Done);
            }
            PeerEffect::RaiseFence { node, task, past } => asked = Some((node, task, past)),
            PeerEffect::Execute(_) => panic!("the worker ran before the fence was raised"),
            _ => {}
        }
    }
    let (node, task, past) = asked.expect("a fence asked for");
    assert_eq!((node, task, past), (0, peer_net::task_id(0), 0));
    // The fence names attempt 3 (earlier attempts of other peers): the task runs as attempt 3.
    net.cores[0].handle_fence_raised(0, 0, Some(3));
    let mut executed = Vec::new();
    while let Some(effect) = net.cores[0].poll_effect() {
        assert!(!matches!(effect, PeerEffect::RaiseFence { .. }));
        if let PeerEffect::Execute(env) = effect {
            executed.push(env.attempt);
        }
    }
    assert_eq!(executed, [3]);
    // A second answer nobody asked for changes nothing.
    net.cores[0].handle_fence_raised(0, 0, Some(4));
    assert!(net.cores[0].poll_effect().is_none());
}

#[test]
fn an_unfenced_peer_raises_no_fence() {
    let net = two_peers();
    assert!(net.raised.is_empty());
    assert_eq!(running_attempt(&net, "a"), 1);
}

#[test]
fn a_fenced_peer_taking_a_task_over_runs_a_later_attempt_than_the_lost_peer() {
    let mut net = two_fenced_peers();
    assert_eq!(
        net.raised,
        [(0, "a".into(), Some(1)), (1, "b".into(), Some(1))]
    );
    assert_eq!(running_attempt(&net, "a"), 1);
    net.ok("b");
    peer_0_dies(&mut net);
    net.cores[1].handle_claim_lost(0, 0, None);
    net.drain(1);
    // Peer 1 won the claim and raised the fence past peer 0's attempt before running it.
    assert_eq!(net.raised.last(), Some(&(1, "a".into(), Some(2))));
    let fence = format!("fence/{}", peer_net::task_id(0));
    assert_eq!(net.fences.get_now(&fence).map(|f| f.value), Some(2));
    assert_eq!(net.executed.last(), Some(&(1, "a".into())));
    assert_eq!(running_attempt(&net, "a"), 2);
    net.ok("a");
    assert_eq!(net.done[1], Some(StopReason::Completed));
    assert_eq!(net.cores[1].execution(0).map(|e| e.0), Some(2));
}

/// Two fenced peers on two independent tasks whose first `lost` fence raises commit and lose
/// their answer (an etcd leader lost mid-request), started.
fn two_fenced_peers_losing_fence_answers(lost: u32) -> Net {
    let nodes = vec![node("a", &[]), node("b", &[])];
    let mut net = Net::unstarted(2, nodes, quorate_coordinator::SupervisorConfig::default());
    for core in &mut net.cores {
        core.set_fenced(true);
    }
    net.lose_fence = lost;
    net.start();
    net
}

#[test]
fn a_fence_raise_whose_answer_was_lost_runs_the_attempt_it_wrote() {
    // Peer 0's CAS raising `a`'s fence to 1 commits, its answer is lost, and the same CAS made
    // again finds the fence at 1: its own write. The task runs once, as attempt 1, and the run
    // counts one attempt. (Raising the fence again ran it as attempt 2, reported as 2 attempts
    // while attempt 1 never ran: `tests/processes_peer.rs`, an etcd leader lost mid-run.)
    let mut net = two_fenced_peers_losing_fence_answers(1);
    assert_eq!(net.lose_fence, 0, "an answer was lost");
    assert_eq!(
        net.raised,
        [(0, "a".into(), Some(1)), (1, "b".into(), Some(1))]
    );
    let fence = format!("fence/{}", peer_net::task_id(0));
    assert_eq!(net.fences.get_now(&fence).map(|f| f.value), Some(1));
    assert_eq!(running_attempt(&net, "a"), 1);
    net.ok("a");
    net.ok("b");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    assert_eq!(net.executed, [(0, "a".into()), (1, "b".into())]);
    // Attempts over the peers, as the peer processes' reports sum them: one.
    assert_eq!(net.cores[0].execution(0).map(|e| e.0), Some(1));
    assert_eq!(net.cores[1].execution(0), None);
}

#[test]
fn a_takeover_whose_fence_answer_was_lost_runs_the_attempt_after_the_lost_peers() {
    let mut net = two_fenced_peers();
    net.ok("b");
    peer_0_dies(&mut net);
    // Peer 1 takes `a` over: its CAS raising the fence past peer 0's attempt 1 commits and its
    // answer is lost; the same CAS again finds 2, its own write: it runs attempt 2, not 3.
    net.lose_fence = 1;
    net.cores[1].handle_claim_lost(0, 0, None);
    net.drain(1);
    assert_eq!(net.lose_fence, 0, "an answer was lost");
    assert_eq!(net.raised.last(), Some(&(1, "a".into(), Some(2))));
    assert_eq!(running_attempt(&net, "a"), 2);
    net.ok("a");
    assert_eq!(net.cores[1].execution(0).map(|e| e.0), Some(2));
    assert_eq!(net.done[1], Some(StopReason::Completed));
}

#[test]
fn a_paused_peer_whose_claim_was_taken_over_is_refused_its_fence_and_runs_nothing() {
    let mut net = two_fenced_peers();
    net.ok("b");
    // Peer 0 is paused past its lease (its assignment stays unanswered): peer 1 takes over.
    let paused = net.running.iter().position(|(p, _)| *p == 0).expect("a");
    let (_, stale) = net.running.remove(paused);
    peer_0_dies(&mut net);
    net.cores[1].handle_claim_lost(0, 0, None);
    net.drain(1);
    let executed = net.executed.len();
    // Peer 0 wakes up: its attempt timed out, and its retry's fence is refused (the claim is
    // peer 1's): it runs nothing and waits on the claim like any other peer's.
    net.tick(0, 60_000);
    assert_eq!(net.raised.last(), Some(&(0, "a".into(), None)));
    assert_eq!(net.executed.len(), executed);
    let fence = format!("fence/{}", peer_net::task_id(0));
    assert_eq!(net.fences.get_now(&fence).map(|f| f.value), Some(2));
    assert!(net.cores[0].awaiting_others().contains(&0));
    assert!(!net.cores[0].claimed(0));
    assert_eq!(stale.attempt, 1);
    // Peer 1's attempt completes the task; peer 0 adopts the record.
    net.ok("a");
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    let record = net.states.get_now("state/a").expect("committed").value;
    assert_eq!(record.by, 1);
}

#[test]
fn a_peer_whose_lease_lapsed_gives_its_claimed_task_up_and_waits_on_the_claim() {
    let mut net = two_fenced_peers();
    net.ok("b");
    net.deliver_all();
    // Peer 0 was paused past its lease: etcd deleted its claim of `a`; it took a new lease.
    let (_, stale) = net.running.remove(0);
    assert_eq!(stale.payload.node.as_str(), "a");
    peer_0_dies(&mut net);
    net.cores[0].handle_lease_lost(0);
    net.drain(0);
    assert!(!net.cores[0].claimed(0));
    assert_eq!(net.cores[0].awaiting_others(), [0]);
    assert!(
        net.controls.is_empty(),
        "its worker's attempt is left to the fence"
    );
    assert_eq!(net.cores[0].execution(0), None);
    // Its worker's late answer is not taken as the task's.
    let executed = net.executed.len();
    net.running.push((0, stale));
    net.ok("a");
    assert!(
        net.states.get_now("state/a").is_none(),
        "no record from a void claim"
    );
    // Peer 1 takes the task over as attempt 2; peer 0 adopts its record.
    peer_1_takes_a_over_and_completes_it(&mut net);
    assert_eq!(net.executed.len(), executed + 1);
}

#[test]
fn a_peer_whose_claim_lapsed_before_its_record_commits_nothing_and_the_new_holder_ends_the_task() {
    let mut net = two_fenced_peers();
    net.ok("b");
    net.deliver_all();
    // Peer 0's claim went with its lease (paused), and its worker, fenced off, answers
    // `cancelled` before the peer learns of the lapse: no record is written from the void claim.
    let stale = net
        .running
        .iter()
        .find(|(p, _)| *p == 0)
        .cloned()
        .expect("a");
    peer_0_dies(&mut net);
    net.running.push(stale);
    net.answer("a", quorate_protocols::wire::Outcome::Cancelled);
    assert!(
        net.states.get_now("state/a").is_none(),
        "no record from a void claim"
    );
    assert!(!net.cores[0].claimed(0));
    assert_eq!(net.cores[0].awaiting_others(), [0]);
    assert_eq!(net.done[0], None);
    // Peer 1 takes the task over and completes it; peer 0 adopts the record.
    peer_1_takes_a_over_and_completes_it(&mut net);
}

/// Peer 1 learns that `a`'s claim is gone, claims `a`, runs it as attempt 2 and completes it;
/// every peer hears of the record and the run completes.
fn peer_1_takes_a_over_and_completes_it(net: &mut Net) {
    net.cores[1].handle_claim_lost(0, 0, None);
    net.drain(1);
    assert_eq!(running_attempt(net, "a"), 2);
    net.ok("a");
    assert_eq!(net.cores[1].execution(0).map(|e| e.0), Some(2));
    net.deliver_all();
    assert_eq!(net.done, vec![Some(StopReason::Completed); 2]);
    assert_eq!(net.states.get_now("state/a").map(|r| r.value.by), Some(1));
}

#[test]
fn a_paused_peer_that_learns_the_takeover_from_the_new_record_does_not_count_its_attempt() {
    let mut net = two_fenced_peers();
    net.ok("b");
    net.deliver_all();
    // Peer 0 is paused past its lease; peer 1 takes `a` over and completes it as attempt 2.
    // Peer 0 wakes up and hears of peer 1's record before it learns that its lease lapsed: the
    // task is not its own any more. Its attempt is cancelled and not reported as the task's
    // (the run's attempts are peer 1's 2, not 1 + 2), and the slice is peer 1's to close.
    let paused = net.running.iter().position(|(p, _)| *p == 0).expect("a");
    let (_, stale) = net.running.remove(paused);
    peer_0_dies(&mut net);
    peer_1_takes_a_over_and_completes_it(&mut net);
    let closed_a = net.events[0]
        .iter()
        .filter(|e| {
            e.task.as_deref() == Some("a")
                && matches!(e.kind, quorate_coordinator::EventKind::TaskClosed { .. })
        })
        .count();
    assert_eq!(net.cores[0].task_state(0), TaskState::Completed);
    assert!(!net.cores[0].claimed(0));
    assert_eq!(net.cores[0].execution(0), None);
    assert_eq!(stale.attempt, 1);
    assert_eq!(closed_a, 0, "peer 0 closes no slice of `a`");
    assert!(
        net.controls
            .iter()
            .any(|(p, _, c)| *p == 0 && *c == Control::Cancel),
        "peer 0's attempt is cancelled"
    );
}
