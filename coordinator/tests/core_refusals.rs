//! The supervisor core refuses inputs that do not fit with a typed error naming the input and
//! the rule, and a refused input changes nothing but the counters and the trace (rejected
//! replies are still counted as before).

mod support;

use quorate_coordinator::{
    EventKind, InputRefused, ReplanError, ReplyRefusal, StopReason, SupervisorConfig,
};
use quorate_protocols::{Budget, RunId, TaskId, TaskState};
use quorate_state::PreconditionFailure;
use serde_json::json;

use support::{needs_key, node, spec_of, Harness};

#[test]
fn replies_of_another_run_an_unknown_task_or_an_old_attempt_are_refused_by_name() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let task = h.core.task_id(0);
    let mut other_run = h.answer("a", json!(1));
    other_run.run = RunId::from_u128(99);
    let found = other_run.run;
    h.send(1, other_run);
    let mut unknown = h.answer("a", json!(1));
    unknown.task = TaskId::from_u128(12345);
    h.send(1, unknown);
    let mut old = h.answer("a", json!(1));
    old.attempt = 0;
    h.send(1, old);
    let run = h.core.run();
    assert_eq!(
        h.refusals,
        vec![
            InputRefused::Reply {
                task,
                why: ReplyRefusal::WrongRun {
                    expected: run,
                    found
                },
            },
            InputRefused::Reply {
                task: TaskId::from_u128(12345),
                why: ReplyRefusal::UnknownTask,
            },
            InputRefused::Reply {
                task,
                why: ReplyRefusal::OldAttempt {
                    current: 1,
                    found: 0
                },
            },
        ]
    );
    assert_eq!(h.state(0), TaskState::Running, "nothing moved");
    let m = h.core.snapshot().messages;
    // Another run's reply is a replay (stale); an unknown task is not this run's to answer.
    assert_eq!(
        (m.rejected_stale, m.rejected_unauthorized, m.rejected_late),
        (1, 1, 1)
    );
    assert_eq!(
        h.refusals[2].to_string(),
        format!("reply for task {task} refused: it names attempt 0; the task is at attempt 1")
    );
}

#[test]
fn a_reply_for_a_task_a_replan_dropped_is_refused_as_dropped() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let b = h.core.task_id(1);
    let answer = h.answer("b", json!("late"));
    h.core
        .handle_replan(1, spec_of(vec![node("a", &[])]))
        .expect("a narrower plan");
    h.drain();
    h.send(2, answer);
    assert_eq!(
        h.refusals,
        vec![InputRefused::Reply {
            task: b,
            why: ReplyRefusal::Dropped,
        }]
    );
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
}

#[test]
fn a_cancel_is_refused_while_stopping_after_the_stop_and_when_nothing_is_left() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    assert_eq!(h.core.handle_cancel(1), Ok(()));
    h.drain();
    // a's worker owes the acknowledgement: the run is stopping.
    assert_eq!(
        h.core.handle_cancel(2),
        Err(InputRefused::AlreadyStopping {
            reason: StopReason::Cancelled
        })
    );
    let cancels = h
        .events
        .iter()
        .filter(|e| matches!(e, EventKind::CancelRequested))
        .count();
    assert_eq!(cancels, 1, "the refused cancel logged nothing");
    h.send(3, h.cancel_ack("a", Budget::steps(1)));
    h.tick(3);
    assert_eq!(h.stops, vec![StopReason::Cancelled]);
    assert_eq!(
        h.core.handle_cancel(4),
        Err(InputRefused::Stopped {
            reason: StopReason::Cancelled
        })
    );

    // Every task ended, and the run waits only for the acknowledgement of a replan's cancel:
    // a cancel finds nothing to cancel, and the run completes.
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    h.core
        .handle_replan(1, spec_of(vec![node("a", &[])]))
        .expect("a narrower plan");
    h.drain();
    h.send(2, h.answer("a", json!(1)));
    assert!(h.stops.is_empty(), "b's worker owes its acknowledgement");
    assert_eq!(h.core.handle_cancel(3), Err(InputRefused::NothingToCancel));
    // Nor is there anything to replan: the run is over but for the acknowledgement.
    assert_eq!(
        h.core
            .handle_replan(3, spec_of(vec![node("a", &[]), node("c", &[])])),
        Err(ReplanError::Stopped)
    );
    h.tick(2 + SupervisorConfig::default().attempt_timeout_ms);
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn precondition_answers_for_an_unknown_node_or_no_check_are_refused() {
    let mut h = Harness::new(
        vec![needs_key("a", &[], "config/a"), node("b", &[])],
        SupervisorConfig::default(),
    );
    let ticket = h.tickets[0];
    let missing = || {
        Err(PreconditionFailure::Missing {
            key: "config/a".into(),
        })
    };
    // b never asked: a ticket naming it (here: a's, after a's answer) is not awaited.
    assert_eq!(h.core.handle_preconditions(1, ticket, Ok(())), Ok(()));
    h.drain();
    assert_eq!(h.state(0), TaskState::Running);
    assert_eq!(
        h.core.handle_preconditions(2, ticket, missing()),
        Err(InputRefused::NotChecking { node: 0 }),
        "a second answer to one check"
    );
    assert_eq!(h.state(0), TaskState::Running, "and it failed nothing");
}

#[test]
fn a_kept_result_of_a_task_a_replan_dropped_is_refused() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let b = h.core.task_id(1);
    let key = h.core.result_key(1);
    h.store_result(&key, json!("before"));
    // b answers; before the shell carries out the commit, a replan drops b.
    h.core
        .handle_report(1, h.answer("b", json!("after")))
        .expect("b's answer");
    h.core
        .handle_replan(1, spec_of(vec![node("a", &[])]))
        .expect("a narrower plan");
    h.drain();
    assert_eq!(
        h.refusals,
        vec![InputRefused::UnknownTask { task: b }],
        "the commit's answer names a task no longer in the plan"
    );
}

#[test]
fn a_reply_replayed_from_an_earlier_run_is_stale_even_for_a_task_this_run_lacks() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let mut replay = h.answer("a", json!(1));
    replay.run = RunId::from_u128(98);
    replay.task = TaskId::from_u128(4242);
    let found = replay.run;
    h.send(1, replay);
    let run = h.core.run();
    assert_eq!(
        h.refusals,
        vec![InputRefused::Reply {
            task: TaskId::from_u128(4242),
            why: ReplyRefusal::WrongRun {
                expected: run,
                found
            },
        }]
    );
    let m = h.core.snapshot().messages;
    assert_eq!((m.rejected_stale, m.rejected_unauthorized), (1, 0));
    assert_eq!(h.state(0), TaskState::Running, "nothing moved");
}

#[test]
fn a_reply_the_transport_refused_is_counted_and_logged_as_unauthorized() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let before = h.core.snapshot().messages;
    h.core
        .handle_unauthorized_delivery(1)
        .expect("taken while the run goes on");
    h.drain();
    let m = h.core.snapshot().messages;
    assert_eq!(m.rejected_unauthorized, before.rejected_unauthorized + 1);
    assert_eq!(m.delivered, before.delivered + 1);
    assert_eq!(
        h.logged("rejected-unauthorized"),
        vec![(None, EventKind::RejectedUnauthorized)],
        "logged, naming no task"
    );
    assert_eq!(h.state(0), TaskState::Running, "nothing moved");
    // Once the final report was taken, it is refused as finished.
    h.send(2, h.answer("a", json!(1)));
    h.answer_commits(2);
    assert!(h.core.stop_reason().is_some(), "the run completed");
    let _ = h.core.final_report();
    assert_eq!(
        h.core.handle_unauthorized_delivery(3),
        Err(InputRefused::Finished)
    );
}
