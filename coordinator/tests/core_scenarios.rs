//! The supervisor core driven directly, with hand-made worker replies: scheduling, reply
//! rejection, acceptance, failure, approvals, lost replies and deadlines.

mod support;

use quorate_coordinator::{ApprovalPolicy, EventKind, StopControl, StopReason, SupervisorConfig};
use quorate_protocols::{ActionId, AgentId, Budget, Envelope, ResultKind, Role, Sender, TaskState};
use quorate_workers::messages::{Control, Outcome, Report};
use serde_json::json;

use support::{node, sub_task_action, Harness};

/// The worker of node "a" (task 0) asks approval for `action`, giving `reason`.
fn approval_request(h: &Harness, action: ActionId, reason: &str) -> Envelope<Report> {
    h.reply(
        "a",
        ResultKind::Suggestion,
        Outcome::ApprovalRequested {
            action,
            reason: reason.into(),
        },
    )
}

/// a's own first action.
fn own_action(h: &Harness) -> ActionId {
    ActionId::new(h.core.task_id(0), 0, 0)
}

/// The worker of node "a" says nothing below the task works any more after `action`'s request.
fn quiet(h: &Harness, action: ActionId) -> Envelope<Report> {
    h.reply("a", ResultKind::Suggestion, Outcome::Quiet { action })
}

/// The run stopped waiting for a's approval (and for nothing else).
#[track_caller]
fn assert_stopped_waiting_for_a(h: &Harness) {
    assert_eq!(
        h.stops,
        vec![StopReason::WaitingApproval { node: "a".into() }]
    );
}

/// A supervisor of the one node "a", answering approval requests by `approvals`.
fn one_node(approvals: ApprovalPolicy) -> Harness {
    let config = SupervisorConfig {
        approvals,
        ..SupervisorConfig::default()
    };
    Harness::new(vec![node("a", &[])], config)
}

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
        .map(|i| (i.node.to_string(), i.value.clone()))
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
}

#[test]
fn a_duplicate_of_a_live_reply_is_rejected() {
    let mut h = one_node(ApprovalPolicy::All);
    let ask = approval_request(&h, own_action(&h), "delete rows");
    h.send(1, ask.clone());
    assert_eq!(h.state(0), TaskState::Running, "approved at once");
    assert!(matches!(
        h.controls.last().unwrap().1.payload,
        Control::Approve { .. }
    ));
    h.send(2, ask);
    assert_eq!(h.core.snapshot().messages.rejected_duplicate, 1);
    h.send(3, h.answer("a", json!("done")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
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
                value: json!("I think it worked"),
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
fn approval_rejected_cancels_and_unanswered_waits() {
    let mut h = one_node(ApprovalPolicy::None);
    h.send(1, approval_request(&h, own_action(&h), "r"));
    assert_eq!(h.state(0), TaskState::Cancelled);
    assert!(
        h.stops.is_empty(),
        "waits for the worker to acknowledge the rejection"
    );
    h.send(2, h.reply("a", ResultKind::Suggestion, Outcome::Cancelled));
    h.tick(2);
    assert_eq!(h.stops, vec![StopReason::Cancelled]);

    let mut h = one_node(ApprovalPolicy::Ask);
    h.send(1, approval_request(&h, own_action(&h), "r"));
    assert_eq!(h.state(0), TaskState::WaitingApproval);
    assert_stopped_waiting_for_a(&h);

    // The default waits for a human, as `quorate run` without `--approve` does.
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    h.send(1, approval_request(&h, own_action(&h), "r"));
    assert_eq!(h.state(0), TaskState::WaitingApproval);
    assert_stopped_waiting_for_a(&h);
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
fn an_approval_for_an_unknown_node_is_ignored() {
    let mut h = one_node(ApprovalPolicy::Ask);
    h.core.handle_approval(1, 99, true);
    h.drain();
    assert_eq!(h.state(0), TaskState::Running);
    assert!(h.stops.is_empty());
}

#[test]
fn replies_of_a_batch_after_the_run_stopped_are_not_handled() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let done = h.answer("a", json!(1));
    let mut after = h.answer("a", json!(2));
    after.dedupe = crate::support::ids().dedupe_key();
    h.core.handle_reports(1, vec![done, after]);
    h.drain();
    assert_eq!(h.state(0), TaskState::Completed);
    let m = h.core.snapshot().messages;
    assert_eq!(
        (m.delivered, m.rejected_late),
        (1, 0),
        "the second reply came after the stop"
    );
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
fn a_resumed_supervisor_awaits_the_acknowledgement_of_a_rejection_sent_before_the_crash() {
    let mut h = one_node(ApprovalPolicy::None);
    let request = approval_request(&h, own_action(&h), "drop");
    h.send(1, request);
    assert_eq!(h.state(0), TaskState::Cancelled, "rejected");
    let reject = EventKind::ControlSent {
        control: StopControl::Reject,
    };
    assert!(h.log.iter().any(|e| e.kind == reject));
    assert!(h.stops.is_empty(), "waits for a's worker");
    h.crash_and_resume(None, 10);
    assert!(h.stops.is_empty(), "still waits after the crash");
    h.send(11, h.reply("a", ResultKind::Suggestion, Outcome::Cancelled));
    h.tick(11);
    assert_eq!(h.stops, vec![StopReason::Cancelled]);
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

#[test]
fn a_resumed_supervisor_sends_a_task_waiting_for_quiet_again_and_waits_for_the_new_quiet() {
    let action = sub_task_action();
    let mut h = one_node(ApprovalPolicy::Ask);
    let request = approval_request(&h, action, "drop");
    h.send(1, request);
    assert!(h.stops.is_empty());
    // Crash before the `Quiet`: the log has the request, not whether the task went quiet.
    h.dispatched.clear();
    h.crash_and_resume(None, 10);
    assert_eq!(h.dispatched.len(), 1, "a was in flight: sent again");
    assert_eq!(h.dispatched[0].1.attempt, 2);
    assert!(h.stops.is_empty(), "a runs again: the run is not idle");
    // The new attempt passes the sub-task's request up again; the run stops after its Quiet.
    let request = approval_request(&h, action, "drop");
    h.send(11, request);
    assert_eq!(h.state(0), TaskState::WaitingApproval);
    assert!(h.stops.is_empty());
    h.send(12, quiet(&h, action));
    assert_stopped_waiting_for_a(&h);
}

#[test]
fn a_sub_task_request_stops_the_run_only_once_its_task_is_quiet() {
    let action = sub_task_action();
    let mut h = one_node(ApprovalPolicy::Ask);
    let request = approval_request(&h, action, "drop");
    h.send(1, request);
    assert_eq!(h.state(0), TaskState::WaitingApproval);
    assert!(
        h.stops.is_empty(),
        "a's other sub-tasks may still be working: not idle"
    );
    h.send(2, quiet(&h, action));
    assert_stopped_waiting_for_a(&h);

    // A `Quiet` that overtakes its request (a reordering transport) still counts.
    let mut h = one_node(ApprovalPolicy::Ask);
    let request = approval_request(&h, action, "drop");
    h.send(1, quiet(&h, action));
    assert!(h.stops.is_empty());
    h.send(2, request);
    assert_stopped_waiting_for_a(&h);

    // A decision needs no `Quiet`: approved, the task runs on and completes.
    let mut h = one_node(ApprovalPolicy::All);
    let request = approval_request(&h, action, "drop");
    h.send(1, request);
    assert_eq!(h.state(0), TaskState::Running);
    h.send(2, h.answer("a", json!("done")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

/// A report without a stop reason (the run has not stopped: a bug if the CLI ever prints one)
/// exits with the runtime's own code, not with a task failure's.
#[test]
fn a_report_without_a_stop_reason_exits_with_the_runtime_failure_code() {
    let h = one_node(ApprovalPolicy::Ask);
    let report = h.core.snapshot();
    assert!(report.stop_reason.is_none());
    assert_eq!(report.stop_exit_code(), StopReason::EXIT_RUNTIME);
    assert_eq!(StopReason::EXIT_RUNTIME, 8, "docs/cli.md's exit codes");
}
