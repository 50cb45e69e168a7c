//! The supervisor core driven directly, with hand-made worker replies: scheduling, reply
//! rejection, acceptance, failure, cancels and their acknowledgements, lost replies and deadlines.

mod support;

use quorate_coordinator::{
    ApprovalPolicy, EventKind, InputRefused, ReplyRefusal, StopControl, StopReason,
    SupervisorConfig,
};
use quorate_protocols::wire::{Control, Outcome};
use quorate_protocols::{AgentId, Budget, ResultKind, Role, Sender, TaskState};
use serde_json::json;

use support::{node, sub_task_action, Harness};

#[test]
fn dependencies_gate_dispatch_and_results_flow_downstream() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[]), node("c", &["a", "b"])],
        SupervisorConfig::default(),
    );
    assert_eq!(h.dispatched.len(), 2, "a and b are dispatched, c waits");
    h.send(1, h.answer("a", json!("A")));
    assert_eq!(h.dispatched.len(), 2, "c still waits for b");
    h.send(2, h.answer("b", json!("B")));
    let (_, c) = h.assignment("c");
    let inputs: Vec<_> = c
        .payload
        .inputs
        .iter()
        .map(|i| (i.node.to_string(), i.value.value().clone()))
        .collect();
    assert_eq!(
        inputs,
        vec![("a".into(), json!("A")), ("b".into(), json!("B"))]
    );
    h.send(3, h.answer("c", json!("C")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.commits.len(), 3);
    let report = h.core.snapshot();
    assert_eq!(report.budget.granted, Budget::new(30, 6, 300, 30));
    assert_eq!(report.budget.spent, Budget::steps(3));
    assert_eq!(report.budget.returned, Budget::new(27, 6, 300, 30));
}

#[test]
fn duplicate_late_stale_and_forged_replies_are_rejected_and_counted() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"])],
        SupervisorConfig::default(),
    );
    let good = h.answer("a", json!(1));
    let good_key = good.dedupe;
    let mut stale = good.clone();
    stale.dedupe = crate::support::ids().dedupe_key();
    stale.state_version = quorate_protocols::Version::new(99);
    h.send(1, stale);
    assert_eq!(h.state(0), TaskState::Running);
    let mut forged = h.answer("a", json!("evil"));
    forged.sender = Sender {
        agent: AgentId::from_u128(666),
        role: Role::Worker,
    };
    h.send(1, forged);
    h.send(2, good.clone());
    assert_eq!(h.state(0), TaskState::Completed);
    // The same envelope again: its dedupe key was seen, so it is a duplicate (and changes
    // nothing), even though the task is terminal now.
    h.send(3, good);
    let mut late = h.answer("a", json!(2));
    late.dedupe = crate::support::ids().dedupe_key();
    h.send(4, late);
    assert_eq!(h.state(0), TaskState::Completed);
    let m = h.core.snapshot().messages;
    assert_eq!(
        (m.rejected_stale, m.rejected_unauthorized, m.rejected_late),
        (1, 1, 1)
    );
    assert_eq!(m.rejected_duplicate, 1);
    // Each refusal names its rule and what it compared.
    let task = h.core.task_id(0);
    let refused = |why| InputRefused::Reply { task, why };
    assert_eq!(
        h.refusals,
        vec![
            refused(ReplyRefusal::StaleVersion {
                current: quorate_protocols::Version::new(1),
                found: quorate_protocols::Version::new(99),
            }),
            refused(ReplyRefusal::WrongSender {
                agent: AgentId::from_u128(666),
                role: Role::Worker,
            }),
            refused(ReplyRefusal::Duplicate { dedupe: good_key }),
            refused(ReplyRefusal::AfterTerminal {
                state: TaskState::Completed
            }),
        ]
    );
}

#[test]
fn a_suggestion_does_not_complete_a_task() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    h.send(
        1,
        h.reply(
            "a",
            ResultKind::Suggestion,
            Outcome::Answer {
                value: json!("I think it worked").into(),
                receipts: vec![],
            },
        ),
    );
    assert_eq!(h.state(0), TaskState::Failed);
    assert!(
        matches!(&h.stops[..], [StopReason::Failed { observation, .. }] if observation.contains("suggestion"))
    );
}

#[test]
fn a_failure_stops_the_run_and_cancels_running_tasks() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[]), node("c", &["a"])],
        SupervisorConfig::default(),
    );
    h.send(
        1,
        h.reply(
            "a",
            ResultKind::Suggestion,
            Outcome::Failed {
                observation: "input missing: orders.csv".into(),
            },
        ),
    );
    assert_eq!(h.state(0), TaskState::Failed);
    assert_eq!(h.state(1), TaskState::Cancelled);
    assert_eq!(h.state(2), TaskState::Cancelled);
    assert!(h.controls.iter().any(|(_, c)| c.payload == Control::Cancel));
    assert!(h.stops.is_empty(), "waits for b's worker to acknowledge");
    // b's answer, sent before b's worker got the cancel, arrives after it: late, counted,
    // nothing changes. It is the final reply of the attempt told to stop, so it acknowledges
    // the cancel (the worker has nothing more to say): the drain ends, and the run stops at the
    // next tick instead of after the attempt timeout.
    let mut answer = h.answer("b", json!("B"));
    answer.payload.actions.executed = 1;
    h.send(2, answer);
    assert_eq!(h.state(1), TaskState::Cancelled);
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
    assert_eq!(
        h.core.snapshot().actions.executed,
        1,
        "its actions are counted"
    );
    assert_eq!(h.core.poll_timeout(), Some(2));
    h.tick(2);
    assert_eq!(
        h.stops,
        vec![StopReason::Failed {
            node: "a".into(),
            observation: "input missing: orders.csv".into()
        }]
    );
    assert_eq!(h.stops.len(), 1, "exactly one stop reason");
}

#[test]
fn lost_replies_lead_to_a_new_attempt_and_the_old_attempt_is_late() {
    let cfg = SupervisorConfig {
        attempt_timeout_ms: 100,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[])], cfg);
    let first = h.answer("a", json!(1));
    assert_eq!(h.core.poll_timeout(), Some(100));
    h.tick(100);
    let (_, second) = h.assignment("a");
    assert_eq!(second.attempt, 2);
    h.send(101, first);
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
    h.send(102, h.answer("a", json!(2)));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.core.snapshot().tasks[0].attempts, 2);
}

#[test]
fn deadline_and_limits_stop_the_run() {
    let cfg = SupervisorConfig {
        deadline_ms: Some(50),
        attempt_timeout_ms: 1_000,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[]), node("b", &["a"])], cfg);
    h.tick(50);
    // a was running: its worker never acknowledges the cancel, so the drain ends at its bound.
    assert!(h.stops.is_empty());
    assert_eq!(h.core.poll_timeout(), Some(1_050));
    h.tick(1_049);
    assert!(h.stops.is_empty());
    h.tick(1_050);
    assert_eq!(h.stops, vec![StopReason::Deadline]);
    assert!(h
        .core
        .snapshot()
        .tasks
        .iter()
        .all(|t| t.state.is_terminal()));

    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    h.send(1, h.answer("a", json!(1)));
    h.send(
        2,
        h.reply(
            "b",
            ResultKind::Suggestion,
            Outcome::LimitReached {
                component: quorate_protocols::Component::ToolCalls,
                needed: 1,
            },
        ),
    );
    assert_eq!(
        h.stops,
        vec![StopReason::StoppedLimit {
            component: quorate_protocols::Component::ToolCalls
        }]
    );
    assert_eq!(
        h.state(0),
        TaskState::Completed,
        "completed results are kept"
    );
    assert_eq!(h.state(1), TaskState::StoppedLimit);
}

#[test]
fn cancel_after_steps_cancels_everything_once() {
    let cfg = SupervisorConfig {
        cancel_after_steps: Some(2),
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"]), node("c", &["b"])],
        cfg,
    );
    h.send(1, h.answer("a", json!(1)));
    assert_eq!(h.stops, vec![StopReason::Cancelled]);
    assert_eq!(h.state(0), TaskState::Completed);
    assert_eq!(h.state(1), TaskState::Cancelled);
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, EventKind::CancelRequested)));
}

#[test]
fn a_cancel_after_the_last_step_finds_nothing_to_cancel_and_the_run_completes() {
    // a then b: dispatch a (1), a's reply (2), dispatch b (3), b's reply (4). A cancel due at
    // 3 or 4 is checked after b's reply, when every task has completed.
    for k in [3, 4] {
        let cfg = SupervisorConfig {
            cancel_after_steps: Some(k),
            ..SupervisorConfig::default()
        };
        let mut h = Harness::new(vec![node("a", &[]), node("b", &["a"])], cfg);
        h.send(1, h.answer("a", json!(1)));
        assert!(h.stops.is_empty(), "k = {k}: b is still to run");
        h.send(2, h.answer("b", json!(2)));
        assert_eq!(h.stops, vec![StopReason::Completed], "k = {k}");
        assert_eq!(h.state(1), TaskState::Completed);
        assert!(
            !h.events
                .iter()
                .any(|e| matches!(e, EventKind::CancelRequested)),
            "k = {k}: no cancel was requested"
        );
    }
}

#[test]
fn an_empty_input_fails_the_dependent_and_names_the_input() {
    let mut b = node("b", &["a"]);
    b.preconditions = vec![quorate_protocols::Precondition::InputsNonEmpty];
    let mut h = Harness::new(vec![node("a", &[]), b], SupervisorConfig::default());
    h.send(1, h.answer("a", json!([])));
    assert_eq!(h.state(0), TaskState::Completed);
    assert_eq!(h.state(1), TaskState::Failed);
    assert_eq!(h.core.snapshot().tasks[1].attempts, 0, "never dispatched");
    assert_eq!(
        h.stops,
        vec![StopReason::Failed {
            node: "b".into(),
            observation: "precondition does not hold: empty input from a".into()
        }]
    );
}

#[test]
fn replies_of_a_batch_after_the_run_stopped_are_not_handled() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    // A failure stops the run at once (an answer waits for its result commit first).
    let failure = Outcome::Failed {
        observation: "broken".into(),
    };
    let done = h.reply("a", ResultKind::Suggestion, failure);
    let mut after = h.answer("a", json!(2));
    after.dedupe = crate::support::ids().dedupe_key();
    let refused = h.core.handle_reports(1, vec![done, after]);
    h.drain();
    let reason = StopReason::Failed {
        node: "a".into(),
        observation: "broken".into(),
    };
    assert_eq!(refused, vec![InputRefused::Stopped { reason }]);
    assert_eq!(h.state(0), TaskState::Failed);
    let m = h.core.snapshot().messages;
    assert_eq!(
        (m.delivered, m.rejected_late),
        (1, 0),
        "the second reply came after the stop"
    );
}

/// A second answer of the attempt, in the same batch as the accepted one, finds the task's
/// result commit out: the task takes no more replies (refused as settled, counted late), and
/// it completes with the first answer once the commit is answered.
#[test]
fn a_reply_behind_an_accepted_answer_finds_the_task_settled() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let done = h.answer("a", json!(1));
    let mut after = h.answer("a", json!(2));
    after.dedupe = crate::support::ids().dedupe_key();
    let task = after.task;
    let refused = h.core.handle_reports(1, vec![done, after]);
    assert_eq!(
        refused,
        vec![InputRefused::Reply {
            task,
            why: quorate_coordinator::ReplyRefusal::Settled {
                state: TaskState::Running
            }
        }]
    );
    h.drain();
    assert_eq!(h.state(0), TaskState::Completed);
    assert_eq!(h.results[&h.core.result_key(0)], json!(1));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let m = h.core.snapshot().messages;
    assert_eq!((m.delivered, m.rejected_late), (2, 1));
}

/// a fails while b runs: b is cancelled, its worker not yet heard from; and b's slice.
fn b_cancelled_by_a_failure() -> (Harness, Budget) {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let failure = Outcome::Failed {
        observation: "broken".into(),
    };
    h.send(1, h.reply("a", ResultKind::Suggestion, failure));
    let slice = h.core.snapshot().tasks[1].granted;
    (h, slice)
}

#[test]
fn a_cancelled_task_is_charged_what_its_worker_acknowledges() {
    let (mut h, slice) = b_cancelled_by_a_failure();
    // b was running and had not reported: charged its whole slice when cancelled.
    let before = h.core.snapshot();
    assert_eq!(before.tasks[1].state, TaskState::Cancelled);
    assert_eq!(before.tasks[1].spent, slice);
    // Its worker acknowledges the cancel: the attempt spent three steps and one tool call.
    let ack = h.cancel_ack("b", Budget::new(3, 1, 0, 0));
    h.send(2, ack);
    let after = h.core.snapshot();
    assert_eq!(after.tasks[1].spent, Budget::new(3, 1, 0, 0));
    let a_spent = after.tasks[0].spent;
    assert_eq!(
        after.budget.spent,
        a_spent.checked_add(&Budget::new(3, 1, 0, 0)).unwrap()
    );
    assert_eq!(
        after.budget.returned,
        before
            .budget
            .returned
            .checked_add(&Budget::new(7, 1, 100, 10))
            .unwrap(),
        "the unused part of b's slice goes back"
    );
    assert!(h.events.iter().any(
        |e| matches!(e, EventKind::TaskSettled { spent } if *spent == Budget::new(3, 1, 0, 0))
    ));
    // The log carries the correction: a supervisor rebuilt from it reports the same budget.
    let rebuilt = h.rebuilt(None).unwrap();
    assert_eq!(rebuilt.snapshot().budget, after.budget);
    assert_eq!(rebuilt.snapshot().tasks[1].spent, after.tasks[1].spent);
}

#[test]
fn a_resumed_supervisor_still_awaits_the_acknowledgement_of_a_cancel_sent_before_the_crash() {
    let (mut h, slice) = b_cancelled_by_a_failure();
    assert!(h.stops.is_empty(), "the stop waits for b's worker");
    // Crash before b's worker answers: the log says a cancel went out and nothing came back.
    h.crash_and_resume(None, 10);
    assert!(
        h.stops.is_empty(),
        "the resumed stop waits for b's worker too"
    );
    assert_eq!(h.core.snapshot().tasks[1].spent, slice);
    // The acknowledgement, sent to the old supervisor's address, reaches the new one: b is
    // charged what it spent, and the stop completes at the next tick.
    let ack = h.cancel_ack("b", Budget::steps(1));
    h.send(11, ack);
    assert_eq!(h.core.snapshot().tasks[1].spent, Budget::steps(1));
    h.tick(11);
    assert!(
        matches!(h.stops[..], [StopReason::Failed { .. }]),
        "{:?}",
        h.stops
    );

    // Crashed after the acknowledgement instead: nothing is awaited, the resumed run stops
    // at once, and b keeps the charge its acknowledgement settled.
    let (mut h, _) = b_cancelled_by_a_failure();
    let ack = h.cancel_ack("b", Budget::steps(1));
    h.send(2, ack);
    let b = Some("b".to_string());
    let cancel = EventKind::ControlSent {
        control: StopControl::Cancel,
    };
    assert_eq!(h.logged("control-sent"), [(b.clone(), cancel)]);
    let acknowledged = EventKind::ControlAcknowledged {
        spent: Budget::steps(1),
    };
    assert_eq!(h.logged("control-acknowledged"), [(b, acknowledged)]);
    // The log cut right after the acknowledgement (its `task-settled` lost): settled anyway.
    let settled = h.log.iter().position(|e| e.kind.name() == "task-settled");
    let rebuilt = h.rebuilt_from(&h.log[..settled.expect("logged")], None);
    assert_eq!(rebuilt.unwrap().snapshot().tasks[1].spent, Budget::steps(1));
    h.crash_and_resume(None, 10);
    assert!(
        matches!(h.stops[..], [StopReason::Failed { .. }]),
        "{:?}",
        h.stops
    );
    assert_eq!(h.core.snapshot().tasks[1].spent, Budget::steps(1));

    // No acknowledgement at all: the resumed stop ends when the attempt timeout has passed.
    let (mut h, _) = b_cancelled_by_a_failure();
    h.crash_and_resume(None, 10);
    h.tick(10 + h.config.attempt_timeout_ms - 1);
    assert!(h.stops.is_empty());
    h.tick(10 + h.config.attempt_timeout_ms);
    assert!(
        matches!(h.stops[..], [StopReason::Failed { .. }]),
        "{:?}",
        h.stops
    );
}

#[test]
fn a_task_told_to_stop_is_closed_at_its_whole_slice_even_after_a_report() {
    let config = SupervisorConfig {
        approvals: ApprovalPolicy::Ask,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[]), node("b", &[])], config);
    // b reports one step spent (passing up a sub-task's request) while its other sub-tasks
    // may go on spending.
    let request = Outcome::ApprovalRequested {
        action: sub_task_action(),
        reason: "drop".into(),
    };
    h.send(1, h.reply("b", ResultKind::Suggestion, request));
    let failure = Outcome::Failed {
        observation: "broken".into(),
    };
    h.send(2, h.reply("a", ResultKind::Suggestion, failure));
    // b is told to stop and closed at its whole slice, not at the one step it reported: what
    // the close returns may be granted again, so a later, larger figure could not be charged.
    let slice = h.core.snapshot().tasks[1].granted;
    assert_eq!(h.core.snapshot().tasks[1].spent, slice);
    let ack = h.cancel_ack("b", Budget::steps(3));
    h.send(3, ack);
    assert_eq!(h.core.snapshot().tasks[1].spent, Budget::steps(3));
}

#[test]
fn an_acknowledgement_reporting_more_than_the_slice_is_charged_the_slice() {
    let (mut h, slice) = b_cancelled_by_a_failure();
    let ack = h.cancel_ack("b", Budget::new(50, 5, 500, 50));
    h.send(2, ack);
    assert_eq!(h.core.snapshot().tasks[1].spent, slice);
    assert!(
        !h.events
            .iter()
            .any(|e| matches!(e, EventKind::TaskSettled { .. })),
        "min(report, slice) is the slice: nothing to correct"
    );
}
