//! Replanning in the supervisor core: switching to the fallback after a failed precondition,
//! refused replans, and what happens to the tasks, answers and replies a replan moves or drops.
//! (Resuming a crashed supervisor is in `core_resume.rs`.)

mod support;

use quorate_coordinator::{EventKind, InputRefused, StopControl, StopReason, SupervisorConfig};
use quorate_protocols::wire::{ActionCounts, Control, Outcome, Report};
use quorate_protocols::{Budget, Envelope, PlanSpec, ResultKind, TaskState};
use quorate_state::PreconditionFailure;
use serde_json::json;

use support::{fail_publish, needs_key, node, replanning_run, spec_of, Harness};

#[test]
fn precondition_failure_switches_to_the_fallback_plan_without_rerunning_completed_tasks() {
    // Fallback: same load, and a draft instead of publish; load has answered.
    let (mut h, _) = replanning_run();
    assert_eq!(
        h.checks,
        vec![1],
        "publish's store precondition goes to the shell"
    );
    assert_eq!(h.state(1), TaskState::Pending, "not ready until checked");
    fail_publish(&mut h);
    let report = h.core.snapshot();
    assert_eq!(report.plan_version, 2);
    let ids: Vec<_> = report
        .tasks
        .iter()
        .map(|t| (t.id.as_str(), t.state))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("load", TaskState::Completed),
            ("draft", TaskState::Running)
        ]
    );
    assert_eq!(
        h.dispatched
            .iter()
            .filter(|(_, e)| e.payload.node.as_str() == "load")
            .count(),
        1,
        "load is not re-run"
    );
    let (_, draft) = h.assignment("draft");
    assert_eq!(
        draft.payload.inputs.len(),
        1,
        "the carried-over result is the draft's input"
    );
    assert!(h.events.iter().any(|e| matches!(
        e,
        EventKind::Replanned {
            plan_version: 2,
            ..
        }
    )));
    // Recorded by node index before the switch, where index 1 is now "draft": the record keeps
    // the name it had.
    let failed: Vec<_> = h.logged("precondition-failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0.as_deref(), Some("publish"));
    h.send(3, h.answer("draft", json!("draft")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn replanning_cannot_widen_authority_and_cancels_dropped_tasks() {
    use quorate_coordinator::ReplanError;
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let mut wider = spec_of(vec![node("a", &[])]);
    wider.budget.steps = 101;
    assert!(matches!(
        h.core.handle_replan(1, wider),
        Err(ReplanError::WidensBudget {
            old: 100,
            new: 101,
            ..
        })
    ));
    let mut caps = spec_of(vec![node("a", &[])]);
    caps.capabilities = quorate_protocols::Capabilities::parse(["db.delete"]).unwrap();
    assert!(matches!(
        h.core.handle_replan(1, caps),
        Err(ReplanError::WidensCapabilities { .. })
    ));
    assert_eq!(
        h.core.snapshot().plan_version,
        1,
        "refused replans change nothing"
    );
    let old_b = h.answer("b", json!("late"));
    h.core
        .handle_replan(2, spec_of(vec![node("a", &[])]))
        .unwrap();
    h.drain();
    assert!(
        h.controls.iter().any(|(_, c)| c.payload == Control::Cancel),
        "running b is told to stop"
    );
    h.send(3, old_b);
    assert_eq!(
        h.core.snapshot().messages.rejected_late,
        1,
        "b's reply is late after the replan"
    );
    h.send(4, h.answer("a", json!(1)));
    // The run waits (bounded) for b's worker to acknowledge the cancel, then stops.
    h.tick(10_000);
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn evidence_text_moves_with_its_task_across_a_replan() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"])],
        SupervisorConfig::default(),
    );
    h.core.set_evidence_text(1, vec!["doc for b".into()]);
    // The new version lists the same tasks in another order: node indexes change.
    h.core
        .handle_replan(1, spec_of(vec![node("b", &["a"]), node("a", &[])]))
        .unwrap();
    h.drain();
    h.send(2, h.answer("a", json!("A")));
    let (_, b) = h.assignment("b");
    assert_eq!(b.payload.evidence_text, vec!["doc for b".to_string()]);
}

/// Node `id` after `deps`, needing `config/<id>` in the store.
fn guarded(id: &str, deps: &[&str]) -> quorate_protocols::NodeSpec {
    needs_key(id, deps, &format!("config/{id}"))
}

#[test]
fn a_moved_task_is_checked_again_and_the_old_versions_answers_are_ignored() {
    let mut h = Harness::new(
        vec![guarded("x", &[]), guarded("y", &[])],
        SupervisorConfig::default(),
    );
    // In the fallback, x is gone and y sits where x was.
    h.core
        .set_fallback_plan(spec_of(vec![guarded("y", &[]), node("z", &[])]));
    assert_eq!(h.checks, vec![0, 1], "both checks go to the shell");
    let (x_check, y_check) = (h.tickets[0], h.tickets[1]);
    let y = h.core.task_id(1);
    h.core
        .handle_preconditions(
            1,
            x_check,
            Err(PreconditionFailure::Missing {
                key: "config/x".into(),
            }),
        )
        .expect("x's check is awaited");
    h.drain();
    assert_eq!(h.core.snapshot().plan_version, 2);
    assert_eq!(h.core.task_id(0), y, "y moved to index 0 and kept its id");
    // The new version asks about y again; the answer to the old version's question is ignored.
    assert_eq!(h.checks, vec![0, 1, 0]);
    let stale = Err(InputRefused::StalePlanVersion {
        asked: 1,
        current: 2,
    });
    assert_eq!(h.core.handle_preconditions(2, y_check, Ok(())), stale);
    h.drain();
    assert_eq!(
        h.state(0),
        TaskState::Pending,
        "a stale answer moves nothing"
    );
    assert_eq!(h.core.handle_preconditions(2, h.tickets[2], Ok(())), Ok(()));
    h.drain();
    assert_eq!(h.state(0), TaskState::Running, "y was dispatched");
    assert_eq!(h.assignment("y").1.task, y);
    // An answer for the dropped task changes nothing.
    assert_eq!(h.core.handle_preconditions(3, x_check, Ok(())), stale);
    assert!(h.core.poll_effect().is_none());
}

#[test]
fn a_task_whose_new_version_waits_for_a_dependency_is_not_released_by_an_old_answer() {
    let mut h = Harness::new(
        vec![guarded("x", &[]), guarded("y", &[])],
        SupervisorConfig::default(),
    );
    // The fallback makes y wait for a new task w.
    h.core
        .set_fallback_plan(spec_of(vec![node("w", &[]), guarded("y", &["w"])]));
    let y_check = h.tickets[1];
    h.core
        .handle_preconditions(
            1,
            h.tickets[0],
            Err(PreconditionFailure::Missing {
                key: "config/x".into(),
            }),
        )
        .expect("x's check is awaited");
    h.drain();
    let refused = h.core.handle_preconditions(2, y_check, Ok(()));
    assert_eq!(
        refused,
        Err(InputRefused::StalePlanVersion {
            asked: 1,
            current: 2
        })
    );
    h.drain();
    assert_eq!(h.state(1), TaskState::Pending, "y waits for w");
    assert_eq!(
        h.checks,
        vec![0, 1],
        "and is asked about again only once w is done"
    );
    h.send(3, h.answer("w", json!("built")));
    assert_eq!(h.checks, vec![0, 1, 1]);
    h.core
        .handle_preconditions(4, h.tickets[2], Ok(()))
        .expect("y's new check is awaited");
    h.drain();
    assert_eq!(h.state(1), TaskState::Running);
}

#[test]
fn an_answer_for_a_task_that_ended_meanwhile_changes_nothing() {
    let mut h = Harness::new(
        vec![guarded("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    h.core.set_fallback_plan(spec_of(vec![node("b", &[])]));
    h.core.handle_cancel(1).expect("a and b are live");
    h.drain();
    assert_eq!(h.state(0), TaskState::Cancelled);
    let events = h.events.len();
    let refused = h.core.handle_preconditions(
        2,
        h.tickets[0],
        Err(PreconditionFailure::Missing {
            key: "config/a".into(),
        }),
    );
    assert_eq!(
        refused,
        Err(InputRefused::AfterTerminal {
            node: 0,
            state: TaskState::Cancelled
        })
    );
    h.drain();
    assert_eq!(
        h.events.len(),
        events,
        "no precondition-failed event, no replan"
    );
    assert_eq!(h.core.snapshot().plan_version, 1);
}

#[test]
fn a_task_dropped_by_a_replan_still_acknowledges_its_cancel() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    assert_eq!(
        (h.state(0), h.state(1)),
        (TaskState::Running, TaskState::Running)
    );
    h.core
        .handle_replan(1, spec_of(vec![node("a", &[])]))
        .expect("a narrower plan");
    h.drain();
    assert!(
        h.controls
            .iter()
            .any(|(_, c)| matches!(c.payload, Control::Cancel)),
        "b, running, is told to stop"
    );
    // b's worker acknowledges (with what the attempt did), then a completes.
    let mut ack = h.reply("b", ResultKind::Suggestion, Outcome::Cancelled);
    ack.payload.actions = ActionCounts {
        executed: 1,
        ..ActionCounts::default()
    };
    h.send(2, ack);
    h.send(3, h.answer("a", json!("done")));
    // Nothing is awaited any more: the run stops at the next tick, not after the attempt
    // timeout, and b's action is counted.
    h.tick(3);
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let report = h.core.snapshot();
    assert_eq!(report.actions.executed, 1);
    assert_eq!(
        (report.messages.acknowledged, report.messages.rejected_late),
        (1, 0),
        "an acknowledgement, not a rejected reply"
    );
}

/// a and b run; a replan drops b (cancelling it, charged its whole slice). Returns the
/// narrower plan (what a resume needs to replay the switch) and b's acknowledgement of the
/// cancel, reporting one step spent (not yet sent).
fn b_dropped() -> (Harness, PlanSpec, Envelope<Report>) {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let narrower = spec_of(vec![node("a", &[])]);
    h.core
        .handle_replan(1, narrower.clone())
        .expect("a narrower plan");
    h.drain();
    let ack = h.cancel_ack("b", Budget::steps(1));
    (h, narrower, ack)
}

#[test]
fn a_dropped_task_is_charged_what_its_worker_acknowledges_live_and_after_resume() {
    let slice = Budget::new(10, 2, 100, 10);
    let (mut h, narrower, ack) = b_dropped();
    // b, dropped while running without a report, is charged its whole slice at the close.
    assert_eq!(h.core.snapshot().budget.spent, slice);
    assert_eq!(
        h.logged("control-sent"),
        vec![(
            Some("b".into()),
            EventKind::ControlSent {
                control: StopControl::Cancel
            }
        )]
    );
    // Its worker acknowledges the cancel having spent one step: that is b's charge now.
    h.send(2, ack);
    assert_eq!(h.core.snapshot().budget.spent, Budget::steps(1));
    let named_b = Some("b".to_string());
    assert_eq!(
        h.logged("control-acknowledged"),
        vec![(
            named_b.clone(),
            EventKind::ControlAcknowledged {
                spent: Budget::steps(1)
            }
        )],
        "named: b is not in the plan"
    );
    assert_eq!(
        h.logged("task-settled"),
        vec![(
            named_b,
            EventKind::TaskSettled {
                spent: Budget::steps(1)
            }
        )]
    );
    // The log replays to the same budget (the fallback is how a resume learns the new plan),
    // also when it was cut before the `task-settled`.
    let rebuilt = h.rebuilt(Some(narrower.clone())).expect("replays");
    assert_eq!(rebuilt.snapshot().budget, h.core.snapshot().budget);
    let settled = h.log.iter().position(|e| e.kind.name() == "task-settled");
    let cut = &h.log[..settled.expect("logged")];
    let rebuilt = h
        .rebuilt_from(cut, Some(narrower.clone()))
        .expect("replays");
    assert_eq!(rebuilt.snapshot().budget, h.core.snapshot().budget);
    // a completes; its spending adds to b's settled charge.
    h.send(3, h.answer("a", json!("done")));
    h.tick(3);
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.core.snapshot().budget.spent, Budget::steps(2));

    // A crash after the acknowledgement: the resumed run awaits nothing and stops as soon as
    // a (in flight at the crash, sent again) completes.
    let (mut h, narrower, ack) = b_dropped();
    h.send(2, ack);
    h.crash_and_resume(Some(narrower), 3);
    h.send(4, h.answer("a", json!("done")));
    h.tick(4);
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.core.snapshot().budget.spent, Budget::steps(2));

    // A crash between the replan and the acknowledgement: the rebuilt supervisor still awaits
    // it (the log says a cancel went out), stops only once it came, and settles b's charge.
    let (mut h, narrower, ack) = b_dropped();
    h.crash_and_resume(Some(narrower), 2);
    assert_eq!(h.core.snapshot().budget.spent, slice);
    h.send(3, h.answer("a", json!("done")));
    h.tick(3);
    assert!(h.stops.is_empty(), "b's worker has not answered yet");
    h.send(4, ack);
    h.tick(4);
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.core.snapshot().budget.spent, Budget::steps(2));
}

#[test]
fn a_cancel_logged_just_before_a_crash_is_not_awaited_once_its_task_is_sent_again() {
    // The log ends right after the replan's `control-sent` for b: neither b's end nor the
    // switch was logged, so the resumed run still has b, in flight, and sends it again.
    let (mut cut, narrower, _) = b_dropped();
    let sent = cut.log.iter().position(|e| e.kind.name() == "control-sent");
    cut.log.truncate(sent.expect("logged") + 1);
    cut.dispatched.clear();
    cut.crash_and_resume(Some(narrower), 2);
    let (_, b) = cut.assignment("b");
    assert_eq!(b.attempt, 2, "b goes out again");
    cut.send(3, cut.answer("a", json!("A")));
    cut.send(3, cut.answer("b", json!("B")));
    cut.tick(3);
    assert_eq!(
        cut.stops,
        vec![StopReason::Completed],
        "the old attempt's acknowledgement is not waited for"
    );
}

#[test]
fn a_late_reply_of_a_dropped_task_never_reaches_the_new_task_in_its_place() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let b_answer = h.answer("b", json!("old"));
    // b is dropped; the new node c takes index 1.
    h.core
        .handle_replan(1, spec_of(vec![node("a", &[]), node("c", &[])]))
        .expect("same budget, same authority");
    h.drain();
    assert_ne!(h.core.task_id(1), b_answer.task, "c has an id of its own");
    let late_before = h.core.snapshot().messages.rejected_late;
    h.send(2, b_answer);
    assert_eq!(h.state(1), TaskState::Running, "c is untouched");
    assert_eq!(h.core.snapshot().messages.rejected_late, late_before + 1);
    assert!(
        !h.commits.iter().any(|k| k.ends_with("/c")),
        "nothing committed for c"
    );
}
