//! Scenario tests of the worker core with delegated sub-tasks: cancels and approvals reach
//! them at any depth, their approval requests go up one at a time, and they cannot widen
//! capabilities.

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
    let Some(crate::Effect::CallTool(crate::ToolCall {
        action, task, call, ..
    })) = d.core.poll_effect()
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
    assert_eq!(d.replies.len(), 2);
    assert!(d.replies.iter().all(|r| r.task == d.task));
    let Outcome::ApprovalRequested { action, .. } = d.replies[0].payload.outcome.clone() else {
        panic!("{:?}", d.replies[0].payload.outcome)
    };
    assert_ne!(action.task, d.task, "the action is the sub-task's");
    // Nothing else of the task works: the request is followed by `Quiet` at once.
    assert_eq!(d.last().outcome, Outcome::Quiet { action });
    // Approved: the decision, sent to the delegating task, goes down to the sub-task.
    d.control(Control::Approve { action }).unwrap();
    d.drive();
    assert_eq!(d.calls, vec![(action, "db.drop".to_owned())]);
    assert_eq!(d.replies.len(), 3);
    assert!(
        matches!(&d.last().outcome, Outcome::Answer { .. }),
        "{:?}",
        d.last().outcome
    );
    assert_eq!(d.last().actions.executed, 1);

    // Rejected: nothing runs, the action is recorded as rejected, the whole task is cancelled.
    let mut d = run(steps, &["db.drop"]);
    let action = requests(&d)[0];
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

/// The approval requests among `d`'s replies so far, by action.
fn requests(d: &Driver) -> Vec<ActionId> {
    d.replies
        .iter()
        .filter_map(|r| match &r.payload.outcome {
            Outcome::ApprovalRequested { action, .. } => Some(*action),
            _ => None,
        })
        .collect()
}

/// `mid` delegates `leaf`, whose drop needs approval, then saves.
fn nested() -> serde_json::Value {
    json!([
        { "do": "delegate", "subtasks": [
            { "name": "mid", "capabilities": ["db.drop", "db.save"], "budget": { "steps": 8, "tool_calls": 3 },
              "script": [
                { "do": "delegate", "subtasks": [
                    { "name": "leaf", "capabilities": ["db.drop"], "budget": { "steps": 3, "tool_calls": 1 },
                      "script": [ { "do": "call", "tool": "db.drop", "params": {}, "needs-approval": true } ] }
                ] },
                { "do": "call", "tool": "db.save", "params": { "id": 1 } }
              ] }
        ] },
    ])
}

#[test]
fn a_rejected_request_of_a_grandchild_stops_every_level_before_it_goes_on() {
    let mut d = run(nested(), &["db.drop", "db.save"]);
    let [action] = requests(&d)[..] else {
        panic!("one request: {:?}", d.replies)
    };
    d.control(Control::Reject { action }).unwrap();
    d.drive();
    assert!(
        d.calls.is_empty(),
        "neither the drop nor mid's save: {:?}",
        d.calls
    );
    assert_eq!(d.last().outcome, Outcome::Cancelled);
    assert_eq!(d.core.action(&action).unwrap().state, ActionState::Rejected);
}

#[test]
fn an_approved_request_of_a_grandchild_lets_every_level_go_on() {
    let mut d = run(nested(), &["db.drop", "db.save"]);
    let [action] = requests(&d)[..] else {
        panic!("one request: {:?}", d.replies)
    };
    d.control(Control::Approve { action }).unwrap();
    d.drive();
    let tools: Vec<&str> = d.calls.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(tools, ["db.drop", "db.save"]);
    assert!(
        matches!(d.last().outcome, Outcome::Answer { .. }),
        "{:?}",
        d.last().outcome
    );
}

/// Two sub-tasks, `x` and `y`, each dropping a table, a call that needs approval.
fn two_askers() -> serde_json::Value {
    let asks = |name: &str, table: &str| {
        json!({ "name": name, "capabilities": ["db.drop"], "budget": { "steps": 3, "tool_calls": 1 },
                "script": [ { "do": "call", "tool": "db.drop", "params": { "table": table }, "needs-approval": true } ] })
    };
    json!([{ "do": "delegate", "subtasks": [asks("x", "a"), asks("y", "b")] }])
}

#[test]
fn requests_of_two_sub_tasks_go_up_one_at_a_time() {
    let mut d = run(two_askers(), &["db.drop"]);
    let first = requests(&d);
    assert_eq!(first.len(), 1, "the supervisor parks one action per task");
    d.control(Control::Approve { action: first[0] }).unwrap();
    // y's request goes up now, while x's approved call is still out: no `Quiet` with it.
    let mut effects = Vec::new();
    while let Some(effect) = d.core.poll_effect() {
        effects.push(effect);
    }
    let reply = |e: &crate::Effect| match e {
        crate::Effect::Reply(r) => Some(r.payload.outcome.clone()),
        _ => None,
    };
    assert!(
        effects.iter().filter_map(reply).any(|o| matches!(
            o,
            Outcome::ApprovalRequested { action, .. } if action != first[0]
        )),
        "y's request goes up with the approval of x: {effects:?}"
    );
    assert!(
        !effects.iter().any(|e| matches!(
            e,
            crate::Effect::Reply(r) if matches!(r.payload.outcome, Outcome::Quiet { .. })
        )),
        "x is working: the task is not quiet"
    );
    for effect in effects {
        d.carry_out(effect);
    }
    d.drive();
    let both = requests(&d);
    assert_eq!(
        both.len(),
        2,
        "the second goes up once the first is decided"
    );
    assert_ne!(both[1], both[0]);
    assert_eq!(
        d.last().outcome,
        Outcome::Quiet { action: both[1] },
        "once x ended, nothing works but y's wait"
    );
    d.control(Control::Approve { action: both[1] }).unwrap();
    d.drive();
    assert_eq!(d.calls.len(), 2);
    assert!(
        matches!(d.last().outcome, Outcome::Answer { .. }),
        "{:?}",
        d.last().outcome
    );
    // The task answered: a late decision finds nothing to decide.
    assert!(matches!(
        d.control(Control::Reject { action: both[0] }),
        Err(InputError::AttemptEnded { .. })
    ));
}

#[test]
fn a_rejection_naming_an_ended_sub_task_still_cancels_the_task() {
    let mut d = run(two_askers(), &["db.drop"]);
    let x = requests(&d)[0];
    d.control(Control::Approve { action: x }).unwrap();
    d.drive();
    // x has run and ended; y's request is out. A rejection that names x (a stale decision)
    // cancels the task all the same: y never runs.
    d.control(Control::Reject { action: x }).unwrap();
    d.drive();
    assert_eq!(d.calls.len(), 1, "only x's drop");
    assert_eq!(d.last().outcome, Outcome::Cancelled);
}

#[test]
fn a_sub_task_request_is_followed_by_quiet_once_the_other_sub_tasks_stop_working() {
    let mut d = start(
        json!([
            { "do": "delegate", "subtasks": [
                { "name": "asker", "capabilities": ["db.drop"], "budget": { "steps": 4, "tool_calls": 1 },
                  "script": [ { "do": "call", "tool": "db.drop", "params": {}, "needs-approval": true } ] },
                { "name": "busy", "capabilities": ["db.save"], "budget": { "steps": 4, "tool_calls": 1 },
                  "script": [ { "do": "call", "tool": "db.save", "params": { "id": 1 } } ] }
            ] },
        ]),
        &["db.drop", "db.save"],
    );
    // busy's call is out while asker's request goes up: no `Quiet` yet.
    let mut out = None;
    while let Some(effect) = d.core.poll_effect() {
        match effect {
            crate::Effect::CallTool(crate::ToolCall { action, call, .. }) => {
                out = Some((action, call))
            }
            crate::Effect::Reply(reply) => d.replies.push(*reply),
            crate::Effect::QueryTool(_) => panic!("no query expected"),
            crate::Effect::CheckPreconditions { .. } => panic!("no preconditions"),
            crate::Effect::AbortCall { .. } => panic!("nothing is aborted"),
        }
    }
    let (busy, call) = out.expect("busy's call");
    assert_eq!(d.replies.len(), 1);
    let Outcome::ApprovalRequested { action, .. } = d.replies[0].payload.outcome.clone() else {
        panic!("{:?}", d.replies[0].payload.outcome)
    };
    // busy's call answers and busy ends: nothing below the task works any more.
    let answer = crate::ToolAnswer::Ok {
        output: json!(1).into(),
        cost: Budget::ZERO,
        changed: true,
    };
    d.core
        .handle_tool_answer(d.now, busy, call, answer)
        .unwrap();
    d.drive();
    assert_eq!(d.replies.len(), 2, "exactly one Quiet");
    assert_eq!(d.last().outcome, Outcome::Quiet { action });
}
