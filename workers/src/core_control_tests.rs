//! Scenario tests of the worker core told to stop or decide: cancels (also ones that overtake
//! their assignment or a retry) and approvals.

use super::*;

#[test]
fn cancel_stops_further_calls() {
    let mut d = start(
        json!([
            { "do": "call", "tool": "db.save", "params": { "id": 1 } },
            { "do": "call", "tool": "db.save", "params": { "id": 2 } },
        ]),
        &["db.save"],
    );
    // The first call is in flight; cancel arrives before its answer.
    let Some(crate::Effect::CallTool(crate::ToolCall { action, call, .. })) = d.core.poll_effect()
    else {
        panic!("expected a call")
    };
    cancel_during_call(&mut d, action, call);
    assert!(d.calls.is_empty(), "no call started after the cancel");
    assert_eq!(d.replies.len(), 1);
    assert_eq!(d.last().outcome, Outcome::Cancelled);
    assert_eq!(
        d.core.action(&action).unwrap().state,
        ActionState::Succeeded
    );
    assert!(matches!(
        d.control(Control::Cancel),
        Err(InputError::AttemptEnded { .. })
    ));
}

#[test]
fn a_cancel_that_overtakes_its_assignment_ends_it_before_it_runs() {
    let mut d = Driver::new(
        script(json!([{ "do": "call", "tool": "db.save", "params": { "id": 1 } }])),
        vec![],
    );
    let mut assignment = Envelope::new(
        RunId::from_u128(9),
        d.task,
        crate::testing::supervisor(),
        Driver::assignment(&["db.save"], budget()),
        &mut ids(),
    );
    assignment.attempt = 2;
    let cancel = assignment.reply(
        crate::testing::supervisor(),
        ResultKind::Suggestion,
        Control::Cancel,
        &mut ids(),
    );
    // The cancel arrives first: acknowledged at once, with nothing spent.
    d.core.handle_control(d.now, cancel.clone()).unwrap();
    d.drive();
    assert_eq!(d.replies.len(), 1);
    assert_eq!(d.last().outcome, Outcome::Cancelled);
    assert_eq!(d.last().spent, Budget::ZERO);
    assert_eq!(d.replies[0].attempt, 2);
    // Its assignment, arriving after, is refused: nothing runs, no call is made.
    assert_eq!(
        d.core.handle_assignment(d.now, assignment.clone()),
        Err(InputError::DuplicateAssignment {
            task: d.task,
            attempt: 2
        })
    );
    d.drive();
    assert!(d.calls.is_empty(), "no call after the cancel");
    assert_eq!(d.replies.len(), 1);
    // A second copy of the cancel is not acknowledged twice.
    assert!(d.core.handle_control(d.now, cancel).is_err());
    // A later attempt of the same task still runs.
    assignment.attempt = 3;
    d.core.handle_assignment(d.now, assignment).unwrap();
    d.drive();
    assert_eq!(d.calls.len(), 1);
}

#[test]
fn a_cancel_overtaking_a_retry_also_stops_the_stale_attempt_still_running() {
    let mut d = Driver::new(
        script(json!([
            { "do": "call", "tool": "db.save", "params": { "id": 1 } },
            { "do": "call", "tool": "db.save", "params": { "id": 2 } },
        ])),
        vec![],
    );
    d.assign(1, Driver::assignment(&["db.save"], budget()));
    // Attempt 1 waits on its first call; the supervisor gave up on it, sent attempt 2 and then
    // cancelled the run, and the cancel of attempt 2 arrives first.
    let Some(crate::Effect::CallTool(_)) = d.core.poll_effect() else {
        panic!("expected a call")
    };
    let mut retry = d.assignment.clone().expect("assigned");
    retry.attempt = 2;
    let cancel = retry.reply(
        crate::testing::supervisor(),
        ResultKind::Suggestion,
        Control::Cancel,
        &mut ids(),
    );
    d.core.handle_control(d.now, cancel).unwrap();
    d.drive();
    let cancelled: Vec<u32> = d
        .replies
        .iter()
        .filter(|r| r.payload.outcome == Outcome::Cancelled)
        .map(|r| r.attempt)
        .collect();
    assert_eq!(
        cancelled,
        vec![1, 2],
        "the stale attempt ends, the cancel is acknowledged"
    );
    // The stale attempt's reply is late at the supervisor: the acknowledgement carries what it
    // did (its first call, whose answer never came).
    let ack = d.replies.last().expect("the acknowledgement");
    assert_eq!(ack.attempt, 2);
    assert_ne!(ack.payload.actions, Default::default());
    assert_eq!(ack.payload.actions, d.replies[0].payload.actions);
    // ... and what it spent: the supervisor charges the task that, not nothing.
    assert_ne!(ack.payload.spent, Budget::ZERO);
    assert_eq!(ack.payload.spent, d.replies[0].payload.spent);
    assert_eq!(
        d.core.handle_assignment(d.now, retry),
        Err(InputError::DuplicateAssignment {
            task: d.task,
            attempt: 2
        })
    );
    d.drive();
    assert!(d.calls.is_empty(), "no call after the cancel");
}

#[test]
fn approval_parks_then_resumes_and_reject_cancels() {
    let steps = json!([
        { "do": "call", "tool": "db.drop", "params": {}, "needs-approval": true, "output": "gone" },
    ]);
    let mut d = run(steps.clone(), &["db.drop"]);
    let action = ActionId::new(d.task, 0, 0);
    assert!(d.calls.is_empty());
    assert_eq!(d.replies.len(), 1);
    assert_eq!(d.replies[0].result_kind, Some(ResultKind::Suggestion));
    assert!(
        matches!(&d.last().outcome, Outcome::ApprovalRequested { action: a, .. } if *a == action)
    );
    let other = ActionId::new(d.task, 5, 0);
    assert_eq!(
        d.control(Control::Approve { action: other }),
        Err(InputError::NotParked { action: other })
    );
    d.control(Control::Approve { action }).unwrap();
    d.drive();
    assert_eq!(d.calls, vec![(action, "db.drop".to_owned())]);
    assert!(matches!(&d.last().outcome, Outcome::Answer { value, .. } if value == &json!("gone")));

    let mut d = run(steps, &["db.drop"]);
    reject_cancels(&mut d, action);
}
