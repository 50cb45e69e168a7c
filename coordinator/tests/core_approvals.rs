//! The supervisor core driven directly, with hand-made worker replies: approval requests and
//! decisions, the `Quiet` handshake of delegated sub-tasks, and their replies across a resume.

mod support;

use quorate_coordinator::{
    ApprovalPolicy, EventKind, InputRefused, StopControl, StopReason, SupervisorConfig,
};
use quorate_protocols::wire::{Control, Outcome, Report};
use quorate_protocols::{ActionId, Envelope, ResultKind, TaskState};
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
fn an_approval_for_an_unknown_node_is_refused() {
    let mut h = one_node(ApprovalPolicy::Ask);
    assert_eq!(
        h.core.handle_approval(1, 99, true),
        Err(InputRefused::UnknownNode { node: 99, nodes: 1 })
    );
    assert_eq!(
        h.core.handle_approval(1, 0, true),
        Err(InputRefused::NotWaiting {
            node: 0,
            state: TaskState::Running
        })
    );
    h.drain();
    assert_eq!(h.state(0), TaskState::Running);
    assert!(h.stops.is_empty());
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
