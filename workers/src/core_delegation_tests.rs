//! Scenario tests of the worker core with delegated sub-tasks: cancels and approvals reach
//! them, and they cannot widen capabilities.

use super::*;

#[test]
fn a_cancel_reaches_delegated_sub_tasks() {
    let mut d = start(
        json!([
            { "do": "delegate", "subtasks": [
                { "name": "child", "capabilities": ["db.save"], "budget": { "steps": 4, "tool_calls": 2 },
                  "script": [
                    { "do": "call", "tool": "db.save", "params": { "id": 1 } },
                    { "do": "call", "tool": "db.save", "params": { "id": 2 } }
                  ] }
            ] },
        ]),
        &["db.save"],
    );
    // The child's first call is in flight; it belongs to the child task, not the parent.
    let Some(crate::Effect::CallTool {
        action, task, call, ..
    }) = d.core.poll_effect()
    else {
        panic!("expected the child's call")
    };
    assert_ne!(task, d.task, "the call is the sub-task's");
    cancel_during_call(&mut d, action, call);
    assert!(
        d.calls.is_empty(),
        "no call started after the cancel, at any depth"
    );
    assert_eq!(
        d.replies.len(),
        1,
        "only the delegating task replies to the supervisor"
    );
    assert_eq!(d.last().outcome, Outcome::Cancelled);
    // The sub-task was still open: its whole slice (2 tool calls) is charged to the parent.
    assert_eq!(d.last().spent.tool_calls, 2);
}

#[test]
fn a_sub_task_asks_for_approval_through_its_parent() {
    let steps = json!([
        { "do": "delegate", "subtasks": [
            { "name": "child", "capabilities": ["db.drop"], "budget": { "steps": 4, "tool_calls": 2 },
              "script": [ { "do": "call", "tool": "db.drop", "params": {}, "needs-approval": true,
                            "output": "gone" } ] }
        ] },
    ]);
    // The request reaches the supervisor as the delegating task's non-final reply, naming the
    // sub-task's action.
    let mut d = run(steps.clone(), &["db.drop"]);
    assert!(d.calls.is_empty(), "nothing runs before the decision");
    assert_eq!(d.replies.len(), 1);
    assert_eq!(d.replies[0].task, d.task);
    let Outcome::ApprovalRequested { action, .. } = d.last().outcome.clone() else {
        panic!("{:?}", d.last().outcome)
    };
    assert_ne!(action.task, d.task, "the action is the sub-task's");
    // Approved: the decision, sent to the delegating task, goes down to the sub-task.
    d.control(Control::Approve { action }).unwrap();
    d.drive();
    assert_eq!(d.calls, vec![(action, "db.drop".to_owned())]);
    assert_eq!(d.replies.len(), 2);
    assert!(
        matches!(&d.last().outcome, Outcome::Answer { .. }),
        "{:?}",
        d.last().outcome
    );
    assert_eq!(d.last().actions.executed, 1);

    // Rejected: nothing runs, the action is recorded as rejected, the whole task is cancelled.
    let mut d = run(steps, &["db.drop"]);
    let Outcome::ApprovalRequested { action, .. } = d.last().outcome.clone() else {
        panic!("{:?}", d.last().outcome)
    };
    reject_cancels(&mut d, action);
}

#[test]
fn a_sub_task_cannot_widen_capabilities() {
    let d = run(
        json!([
            { "do": "delegate", "subtasks": [
                { "name": "child", "capabilities": ["db.delete"], "budget": { "steps": 2 },
                  "script": [ { "do": "call", "tool": "db.delete", "params": {} } ] }
            ] },
        ]),
        &["db.save"],
    );
    assert!(d.calls.is_empty());
    match &d.last().outcome {
        Outcome::Failed { observation } => {
            assert!(observation.contains("db.delete"), "{observation}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(d.last().actions.rejected, 1);
}
