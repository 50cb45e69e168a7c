//! A peer that dies holding a claim: once its claim is gone from the store (its lease expired),
//! another peer adopts the task's terminal record if one was committed, or claims the task again
//! by CAS and runs it.

mod peer_net;
mod support;

use quorate_protocols::TaskState;
use quorate_state::DeleteOutcome;

use peer_net::{node, Net};
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
