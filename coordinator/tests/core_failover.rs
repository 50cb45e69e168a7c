//! Worker failover in the supervisor core: a lost worker's running tasks get their next attempt
//! on another live worker, within the slice they were granted, and the lost worker's late replies
//! are refused as stale.

mod support;

use quorate_coordinator::{InputRefused, ReplyRefusal, StopReason, SupervisorConfig};
use quorate_protocols::TaskState;
use serde_json::json;

use support::{node, Harness};

fn two_tasks() -> Harness {
    Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    )
}

#[test]
fn a_lost_workers_task_moves_to_a_live_worker_with_the_next_attempt() {
    let mut h = two_tasks();
    let (wa, first) = h.assignment("a");
    let (wb, _) = h.assignment("b");
    assert_eq!((wa, wb), (0, 1));
    let granted = h.core.snapshot().budget.granted;
    // Worker 0's lease expires.
    h.core.handle_worker_lost(5, 0).unwrap();
    h.drain();
    assert!(h.core.worker_lost(0));
    let (w, second) = h.assignment("a");
    assert_eq!(w, 1, "the next attempt goes to the live worker");
    assert_eq!(second.attempt, first.attempt + 1);
    assert_ne!(second.state_version, first.state_version);
    assert_eq!(
        second.payload.budget, first.payload.budget,
        "the same slice"
    );
    assert_eq!(h.dispatched.len(), 3, "b is not moved");
    assert_eq!(
        h.core.snapshot().budget.granted,
        granted,
        "no slice is granted twice"
    );
    // The lost worker was only slow: its late answer names the old attempt and is refused.
    let late = first.reply(
        h.workers[0],
        quorate_protocols::ResultKind::VerifiedConclusion,
        quorate_protocols::wire::Report {
            outcome: quorate_protocols::wire::Outcome::Answer {
                value: json!("late").into(),
                receipts: vec![],
            },
            spent: quorate_protocols::Budget::steps(1),
            actions: Default::default(),
            calls: vec![],
        },
        &mut quorate_protocols::IdSource::seeded(7),
    );
    h.send(6, late);
    assert!(matches!(
        h.refusals.last(),
        Some(InputRefused::Reply {
            why: ReplyRefusal::OldAttempt {
                current: 2,
                found: 1
            },
            ..
        })
    ));
    assert_eq!(h.state(0), TaskState::Running);
    h.send(7, h.answer("a", json!("a")));
    h.send(8, h.answer("b", json!("b")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.core.task_result(0), Some(&json!("a")));
}

#[test]
fn with_every_worker_lost_tasks_wait_for_a_renewal() {
    let mut h = two_tasks();
    h.core.handle_worker_lost(5, 1).unwrap();
    h.drain();
    assert_eq!(h.assignment("b").0, 0, "b moves to worker 0");
    h.core.handle_worker_lost(6, 0).unwrap();
    h.drain();
    assert_eq!(h.dispatched.len(), 3, "nowhere to go");
    assert_eq!(
        (h.state(0), h.state(1)),
        (TaskState::Ready, TaskState::Ready)
    );
    // A second loss report changes nothing.
    h.core.handle_worker_lost(7, 0).unwrap();
    h.core.handle_worker_renewed(10, 1).unwrap();
    h.drain();
    assert_eq!(h.dispatched.len(), 5);
    let attempts: Vec<_> = h.dispatched[3..]
        .iter()
        .map(|(w, e)| (*w, e.attempt))
        .collect();
    assert_eq!(
        attempts,
        vec![(1, 2), (1, 3)],
        "a, then b, on the renewed worker"
    );
    // Retries after a timeout avoid the lost worker too.
    let timeout = h.config.attempt_timeout_ms;
    h.tick(10 + timeout);
    assert_eq!(h.dispatched.len(), 7);
    assert!(h.dispatched[5..].iter().all(|(w, _)| *w == 1));
}

#[test]
fn liveness_inputs_name_a_worker_of_the_run() {
    let mut h = two_tasks();
    assert_eq!(
        h.core.handle_worker_lost(1, 2),
        Err(InputRefused::UnknownWorker {
            worker: 2,
            workers: 2
        })
    );
    assert!(h.core.handle_worker_renewed(1, 9).is_err());
    h.drain();
    assert_eq!(h.dispatched.len(), 2, "nothing moved");
}
