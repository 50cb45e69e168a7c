//! Scenario tests of the worker core's store preconditions, checked again before each write.

use super::*;

/// The gate checks a task's store preconditions again right before each write: a write whose
/// precondition stopped holding (another writer moved the key) is rejected and never runs; a
/// read is not checked.
#[test]
fn a_write_runs_only_while_the_tasks_store_preconditions_hold() {
    use quorate_protocols::Precondition;
    let steps = json!([
        { "do": "call", "tool": "db.read", "params": { "id": 1 }, "side-effect": "read-only" },
        { "do": "call", "tool": "db.save", "params": { "id": 1 } },
        { "do": "answer", "value": "done" },
    ]);
    for moved in [false, true] {
        let mut d = Driver::new(script(steps.clone()), vec![]);
        let quorate_state::CasOutcome::Committed(read_at) =
            d.store
                .cas_now("orders/1", None, json!({ "total": 5 }).into())
        else {
            panic!("a fresh key");
        };
        if moved {
            // Another writer changes the record after the task was planned against it.
            let moved_to = d
                .store
                .cas_now("orders/1", Some(read_at), json!({ "total": 6 }).into());
            assert!(matches!(moved_to, quorate_state::CasOutcome::Committed(_)));
        }
        let mut assignment = Driver::assignment(&["db.read", "db.save"], budget());
        assignment.preconditions = vec![Precondition::KeyAtVersion {
            key: "orders/1".into(),
            version: read_at,
        }];
        d.assign(0, assignment);
        d.drive();
        let write = ActionId::new(d.task, 1, 0);
        assert_eq!(d.checked, vec![write], "only the write is checked");
        let tools: Vec<&str> = d.calls.iter().map(|(_, t)| t.as_str()).collect();
        let report = d.last();
        if moved {
            assert_eq!(tools, ["db.read"], "the write never ran");
            assert_eq!(d.world.effects_of("db.save"), 0);
            let rejected: Vec<(&str, &str)> = report.rejected_calls().collect();
            assert_eq!(rejected.len(), 1);
            assert!(
                rejected[0]
                    .1
                    .starts_with("precondition does not hold before the write: orders/1 is at"),
                "{rejected:?}"
            );
            assert_eq!(report.actions.rejected, 1);
            assert_eq!(d.core.action(&write).unwrap().state, ActionState::Rejected);
            assert_eq!(
                report.spent.tool_calls, 1,
                "the write's reservation went back: only the read is charged"
            );
        } else {
            assert_eq!(tools, ["db.read", "db.save"]);
            assert_eq!(d.world.effects_of("db.save"), 1);
            assert_eq!(report.rejected_calls().count(), 0);
        }
    }
}

/// A write waiting for its store preconditions when the task is cancelled never runs, and
/// nothing of it is charged.
#[test]
fn a_write_cancelled_while_its_preconditions_are_checked_costs_nothing() {
    use quorate_protocols::Precondition;
    let mut d = Driver::new(
        script(json!([{ "do": "call", "tool": "db.save", "params": { "id": 1 } }])),
        vec![],
    );
    let mut assignment = Driver::assignment(&["db.save"], budget());
    assignment.preconditions = vec![Precondition::KeyAbsent {
        key: "lock/orders".into(),
    }];
    d.assign(0, assignment);
    // The check is asked for; the shell has not answered yet when the cancel comes.
    let Some(crate::Effect::CheckPreconditions { action, .. }) = d.core.poll_effect() else {
        panic!("the write waits for its preconditions");
    };
    d.control(Control::Cancel).unwrap();
    d.drive();
    // The answer comes after the cancel: it starts nothing.
    assert_eq!(
        d.core.handle_preconditions(d.now, action, Ok(())),
        Err(crate::InputError::AttemptEnded {
            task: d.task,
            attempt: 0
        })
    );
    d.drive();
    assert!(d.calls.is_empty());
    assert_eq!(d.last().outcome, Outcome::Cancelled);
    assert_eq!(d.last().spent.tool_calls, 0, "the reservation went back");
}

/// A retried write (its first call's outcome was unknown, and a query found nothing) whose
/// precondition stopped holding ends its action as failed, as a refused retry does, instead of
/// leaving it unknown.
#[test]
fn a_retry_refused_by_its_precondition_ends_the_action() {
    use quorate_protocols::Precondition;
    let mut d = Driver::new(
        script(json!([
            { "do": "call", "tool": "db.save", "params": { "id": 1 }, "outcome": "timeout-before-commit" },
        ])),
        vec![],
    );
    let mut assignment = Driver::assignment(&["db.save"], budget());
    assignment.preconditions = vec![Precondition::KeyAbsent {
        key: "lock/orders".into(),
    }];
    d.assign(0, assignment);
    // The first check passes and the call goes out (and times out); then the lock appears.
    while d.calls.is_empty() {
        assert!(d.step(), "the first call goes out");
    }
    let locked = d.store.cas_now("lock/orders", None, json!(true).into());
    assert!(matches!(locked, quorate_state::CasOutcome::Committed(_)));
    d.drive();
    let write = ActionId::new(d.task, 0, 0);
    assert_eq!(
        d.checked,
        vec![write, write],
        "the first call and its retry were checked"
    );
    assert_eq!(d.calls.len(), 1, "the retry did not run");
    assert_eq!(d.core.action(&write).unwrap().state, ActionState::Failed);
    assert_eq!(d.world.effects_of("db.save"), 0);
}

/// A worker whose driver has no store to check against (an actor built without `with_store`)
/// refuses a guarded write in its core: no check is asked of the driver, the write never runs,
/// and the agent sees why; a read, and a write of a task without store preconditions, run.
#[test]
fn without_a_store_the_core_refuses_guarded_writes_itself() {
    use quorate_protocols::Precondition;
    let steps = json!([
        { "do": "call", "tool": "db.read", "params": { "id": 1 }, "side-effect": "read-only" },
        { "do": "call", "tool": "db.save", "params": { "id": 1 } },
        { "do": "answer", "value": "done" },
    ]);
    for guarded in [true, false] {
        let mut d = Driver::new(script(steps.clone()), vec![]);
        d.core.set_store_checks(false);
        let mut assignment = Driver::assignment(&["db.read", "db.save"], budget());
        if guarded {
            assignment.preconditions = vec![Precondition::KeyExists {
                key: "orders/1".into(),
            }];
        }
        d.assign(0, assignment);
        d.drive();
        assert!(d.checked.is_empty(), "nothing is asked of the driver");
        let tools: Vec<&str> = d.calls.iter().map(|(_, t)| t.as_str()).collect();
        let rejected: Vec<(&str, &str)> = d.last().rejected_calls().collect();
        if guarded {
            assert_eq!(tools, ["db.read"], "the write never ran");
            assert_eq!(
                rejected,
                [(
                    "db.save",
                    "precondition does not hold before the write: \
                     no store to check the task's preconditions against"
                )]
            );
            let write = ActionId::new(d.task, 1, 0);
            assert_eq!(d.core.action(&write).unwrap().state, ActionState::Rejected);
            assert_eq!(d.last().spent.tool_calls, 1, "only the read is charged");
        } else {
            assert_eq!(tools, ["db.read", "db.save"]);
            assert!(rejected.is_empty());
        }
    }
}
