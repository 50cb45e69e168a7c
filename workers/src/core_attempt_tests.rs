//! Scenario tests of the worker core across attempts: a new attempt of a task gets recorded
//! answers, starts with what earlier attempts spent, and is not settled by an earlier call.

use super::*;

#[test]
fn a_new_attempt_gets_recorded_answers_instead_of_second_effects() {
    let mut d = run(
        json!([{ "do": "call", "tool": "db.save", "params": { "id": 1 }, "output": "saved" }]),
        &["db.save"],
    );
    assert_eq!(d.calls.len(), 1);
    d.assign(1, Driver::assignment(&["db.save"], budget()));
    d.drive();
    assert_eq!(d.calls.len(), 1, "attempt 1 did not call again");
    assert_eq!(d.world.effects().len(), 1);
    assert!(
        matches!(&d.last().outcome, Outcome::Answer { value, receipts }
        if value == &json!("saved") && receipts.len() == 1)
    );
    assert_eq!(d.last().actions.executed, 0);
    assert_eq!(d.replies[1].attempt, 1);

    let stale = d.assignment.clone().unwrap();
    assert!(matches!(
        d.core.handle_assignment(d.now, stale),
        Err(InputError::DuplicateAssignment { attempt: 1, .. })
    ));
}

#[test]
fn a_late_answer_of_an_earlier_call_does_not_settle_the_retry() {
    let mut d = start(
        json!([
            { "do": "call", "tool": "db.save", "params": { "id": 1 }, "outcome": "timeout-before-commit" },
            { "do": "answer", "value": "saved" },
        ]),
        &["db.save"],
    );
    let Some(crate::Effect::CallTool(crate::ToolCall {
        action,
        call: first,
        ..
    })) = d.core.poll_effect()
    else {
        panic!("expected a call")
    };
    d.core.handle_tool_timeout(d.now, action, first).unwrap();
    let Some(crate::Effect::QueryTool(_)) = d.core.poll_effect() else {
        panic!("expected a query")
    };
    d.core.handle_query_answer(d.now, action, None).unwrap();
    let Some(crate::Effect::CallTool(crate::ToolCall {
        action: again,
        call: second,
        ..
    })) = d.core.poll_effect()
    else {
        panic!("expected the retry")
    };
    assert_eq!(
        (again, second > first),
        (action, true),
        "same action, new call"
    );
    // The first call's error finally arrives: it must not fail the retry in flight.
    let late = crate::ToolAnswer::Err {
        class: "io".into(),
        message: "connection reset".into(),
    };
    assert_eq!(
        d.core.handle_tool_answer(d.now, action, first, late),
        Err(InputError::NotAwaited { action })
    );
    assert!(d.core.poll_effect().is_none(), "nothing moved");
    let ok = crate::ToolAnswer::Ok {
        output: json!("saved").into(),
        cost: Budget::ZERO,
        changed: true,
    };
    d.core
        .handle_tool_answer(d.now, action, second, ok)
        .unwrap();
    d.drive();
    assert!(
        matches!(d.last().outcome, Outcome::Answer { .. }),
        "{:?}",
        d.last().outcome
    );
    assert_eq!(
        d.core.action(&action).unwrap().state,
        ActionState::Succeeded
    );
}

#[test]
fn a_new_attempt_starts_with_what_earlier_attempts_spent() {
    let mut d = Driver::new(
        script(json!([
            { "do": "call", "tool": "db.save", "params": { "id": 1 }, "outcome": "timeout-before-commit" },
            { "do": "call", "tool": "db.save", "params": { "id": 2 } },
        ])),
        vec![],
    );
    // Slice: 10 steps, 1 tool call. Attempt 1 makes its call, which hangs.
    let slice = quorate_protocols::Budget::new(10, 1, 0, 0);
    d.assign(0, Driver::assignment(&["db.save"], slice));
    let Some(crate::Effect::CallTool(_)) = d.core.poll_effect() else {
        panic!("expected a call")
    };
    // The supervisor gives up on attempt 1 and assigns attempt 2 to this worker. Attempt 1's
    // call may still commit: it keeps the slice's only tool call, so attempt 2 cannot call again.
    d.assign(1, Driver::assignment(&["db.save"], slice));
    d.drive();
    assert!(
        d.calls.is_empty(),
        "no second call beyond the slice: {:?}",
        d.calls
    );
    assert_eq!(
        d.last().spent.tool_calls,
        1,
        "attempt 1's call is charged to the task"
    );
    assert!(
        matches!(d.last().outcome, Outcome::LimitReached { .. }),
        "{:?}",
        d.last().outcome
    );
}

#[test]
fn a_retry_that_cannot_start_reports_what_the_earlier_attempts_spent() {
    // Only the role "scripted" has an agent here.
    let world = crate::scripted::World::new();
    let mut book = crate::scripted::ScriptBook::new(world.clone());
    let steps = json!([{ "do": "call", "tool": "db.save", "params": { "id": 1 } }]);
    book.insert(quorate_protocols::NodeId::new("n").unwrap(), script(steps))
        .unwrap();
    let agents = AgentRegistry::new().with_role("scripted", book.factory());
    let mut d = Driver::with(agents, book.tools().unwrap(), world);
    // Attempt 1 spends a step and waits on its call; attempt 2 asks for a role with no agent.
    d.assign(1, Driver::assignment(&["db.save"], budget()));
    let Some(crate::Effect::CallTool(_)) = d.core.poll_effect() else {
        panic!("expected a call")
    };
    let mut retry = Driver::assignment(&["db.save"], budget());
    retry.role = "nobody".into();
    d.assign(2, retry);
    d.drive();
    let failed = d.last();
    assert!(
        matches!(&failed.outcome, Outcome::Failed { observation } if observation.contains("nobody")),
        "{:?}",
        failed.outcome
    );
    // It spent nothing itself, but the supervisor must not charge the task less than attempt
    // 1 spent (or holds reserved for its call).
    assert_ne!(failed.spent, Budget::ZERO);
    assert_eq!(
        (failed.spent.steps, failed.spent.tool_calls),
        (1, 1),
        "a step, and its call reserved"
    );
}
