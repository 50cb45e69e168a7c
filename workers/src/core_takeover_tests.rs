//! Failover scenarios of the worker core: a worker takes a task over from a lost one with the
//! book the store kept, and the old worker, back late, is fenced off at its next call.

use super::*;
use crate::failover::StoredBook;
use crate::scripted::{ScriptBook, World};
use crate::Effect;

/// Two workers over one world (the scripted tools' effects live in the store of record).
fn two_workers(steps: serde_json::Value) -> (Driver, Driver) {
    let world = World::new();
    let driver = || {
        let mut book = ScriptBook::new(world.clone());
        book.insert(
            quorate_protocols::NodeId::new("n").unwrap(),
            script(steps.clone()),
        )
        .unwrap();
        let agents = AgentRegistry::new().with_fallback(book.factory());
        Driver::with(agents, book.tools().unwrap(), world.clone())
    };
    (driver(), driver())
}

/// Carries out `d`'s effects as a shell with the store of record does: the task's book is
/// written (fenced by its attempt) before each call; a refused write stops the attempt. A call
/// commits in the world but its answer is lost with the worker when `die_on_call`.
fn drive_with_store(d: &mut Driver, stored: &mut Option<StoredBook>, die_on_call: bool) {
    let refused = d.drive_with(Some(stored), die_on_call);
    assert!(
        !refused.iter().any(|e| matches!(
            e,
            crate::InputError::StaleAttempt { .. } | crate::InputError::UnknownTask { .. }
        )),
        "every fence named a newer attempt: {refused:?}"
    );
}

fn two_saves() -> serde_json::Value {
    json!([
        { "do": "call", "tool": "db.save", "params": { "id": 1 }, "output": "saved" },
        { "do": "call", "tool": "db.save", "params": { "id": 2 }, "output": "saved" },
    ])
}

#[test]
fn a_takeover_queries_the_lost_workers_call_and_repeats_no_effect() {
    let (mut a, mut b) = two_workers(two_saves());
    let mut stored = None;
    let slice = Budget::new(10, 2, 0, 0);
    a.assign(1, Driver::assignment(&["db.save"], slice));
    // Worker A's first call commits, then A is lost before it hears the answer.
    drive_with_store(&mut a, &mut stored, true);
    assert_eq!(a.world.effects().len(), 1);
    // Worker B takes attempt 2 with the book as the store kept it.
    let book = StoredBook::claim(&mut stored, a.task, 2).unwrap();
    assert_eq!(book.spent.tool_calls, 1, "A's call is in the spending");
    let mut env = a.assignment.clone().unwrap();
    env.attempt = 2;
    b.core.handle_takeover(b.now, env, book).unwrap();
    drive_with_store(&mut b, &mut stored, false);
    let first = a.world.effects()[0].action;
    assert_eq!(
        b.queries,
        vec![first],
        "the in-flight call is queried first"
    );
    assert_eq!(
        b.calls.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        vec![ActionId::new(a.task, 1, 0)],
        "only the second save is called"
    );
    assert_eq!(b.world.effects().len(), 2, "one effect per action");
    let report = b.last();
    assert!(
        matches!(report.outcome, Outcome::Answer { .. }),
        "{report:?}"
    );
    assert_eq!(report.spent.tool_calls, 2, "the slice is not granted twice");
    assert_eq!(b.replies.last().unwrap().attempt, 2);
}

#[test]
fn a_worker_back_after_a_takeover_is_fenced_off_at_its_next_call() {
    let (mut a, mut b) = two_workers(two_saves());
    let mut stored = None;
    let slice = Budget::new(10, 2, 0, 0);
    a.assign(1, Driver::assignment(&["db.save"], slice));
    let Some(Effect::CallTool(crate::ToolCall {
        action,
        call,
        handle,
        params,
        ..
    })) = a.core.poll_effect()
    else {
        panic!("expected a call")
    };
    let book = a.core.stored_book(a.task).unwrap();
    StoredBook::write(&mut stored, a.task, book).unwrap();
    let answer = crate::testing::poll_once(handle.call(action, params)).unwrap();
    // A is paused past its lease: B takes over and finishes the task.
    let mut env = a.assignment.clone().unwrap();
    env.attempt = 2;
    let book = StoredBook::claim(&mut stored, a.task, 2).unwrap();
    b.core.handle_takeover(b.now, env, book).unwrap();
    drive_with_store(&mut b, &mut stored, false);
    assert_eq!(b.world.effects().len(), 2);
    // A comes back and hears its answer: its next call is refused by the store, and the
    // attempt stops (its reply names attempt 1, which the supervisor refuses as late).
    a.core
        .handle_tool_answer(a.now, action, call, answer)
        .unwrap();
    drive_with_store(&mut a, &mut stored, false);
    assert!(a.calls.is_empty(), "A made no second call: {:?}", a.calls);
    assert_eq!(a.world.effects().len(), 2, "no duplicate effect");
    let last = a.replies.last().expect("A's final reply");
    assert_eq!(
        (last.attempt, &last.payload.outcome),
        (1, &Outcome::Cancelled)
    );
    assert_eq!(stored.as_ref().unwrap().owner, 2);
    // A fence that names no newer attempt is refused.
    let stale = crate::Fenced {
        task: b.task,
        attempt: 1,
        owner: 2,
    };
    assert!(matches!(
        b.core.handle_fenced(b.now, stale),
        Err(InputError::UnknownTask { .. } | InputError::StaleAttempt { .. })
    ));
}

#[test]
fn a_stale_takeover_imports_nothing() {
    let (mut a, _) = two_workers(two_saves());
    a.assign(
        3,
        Driver::assignment(&["db.save"], Budget::new(10, 2, 0, 0)),
    );
    let mut env = a.assignment.clone().unwrap();
    env.attempt = 2;
    let mut book = StoredBook::default();
    let foreign = ActionId::new(a.task, 9, 0);
    book.records.insert(
        foreign,
        quorate_state::ActionRecord::new(
            "db.save",
            quorate_protocols::ParamDigest::of(&json!(0)),
            ActionState::Executing,
        ),
    );
    assert!(matches!(
        a.core.handle_takeover(a.now, env, book),
        Err(InputError::StaleAttempt { .. })
    ));
    assert!(a.core.action(&foreign).is_none());
}
