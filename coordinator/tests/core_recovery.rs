//! Recovery of the supervisor core: replanning after a failed precondition, refused replans,
//! and resuming a crashed supervisor from its run log.

mod support;

use quorate_coordinator::{EventKind, ResumeError, StopReason, SupervisorConfig, SupervisorCore};
use quorate_protocols::{
    AgentId, Budget, Envelope, NodeSpec, PlanSpec, ResultKind, Role, RunId, Sender, TaskState,
};
use quorate_workers::messages::{ActionCounts, Assignment, Control, Outcome, Report};
use serde_json::json;

use support::{node, spec_of, Harness};

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
    h.core
        .handle_preconditions(2, h.tickets[0], Err("config/channel does not exist".into()));
    h.drain();
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
    h.core.handle_tick(10_000);
    h.drain();
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn a_crashed_supervisor_resumes_from_its_log_without_rerunning_completed_work() {
    let nodes = || vec![node("a", &[]), node("b", &[]), node("c", &["a", "b"])];
    let mut h = Harness::new(nodes(), SupervisorConfig::default());
    h.send(1, h.answer("a", json!("A")));
    let b_old = h.answer("b", json!("B-late"));
    let b_task = h.core.task_id(1);
    // Crash: only the log, the result store and the workers survive.
    let log = h.log.clone();
    let results = h.results.clone();
    let plan = PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        nodes: nodes(),
        ..PlanSpec::default()
    }
    .validate()
    .unwrap();
    let me = Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    };
    let core = SupervisorCore::resume(
        RunId::from_u128(7),
        plan,
        SupervisorConfig::default(),
        me,
        h.workers.clone(),
        &log,
        |k| results.get(k).cloned(),
    )
    .unwrap();
    h.core = core;
    h.dispatched.clear();
    h.core.start_resumed(10);
    h.drain();
    // b was in flight: dispatched again, same task id, same worker, new attempt. a is not re-run.
    assert_eq!(h.dispatched.len(), 1);
    let (w, again) = h.dispatched[0].clone();
    assert_eq!(
        (again.payload.node.as_str(), again.task, again.attempt),
        ("b", b_task, 2)
    );
    assert_eq!(w, 1);
    assert!(
        h.log
            .last()
            .is_some_and(|e| e.seq > log.last().unwrap().seq),
        "seq keeps increasing"
    );
    // The reply of the attempt from before the crash is late now.
    h.send(11, b_old);
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
    h.send(12, h.answer("b", json!("B")));
    let (_, c) = h.assignment("c");
    assert_eq!(
        c.payload.inputs[0].value,
        json!("A"),
        "a's result is read back from the store"
    );
    h.send(13, h.answer("c", json!("C")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let r = h.core.snapshot();
    assert!(r.tasks.iter().all(|t| t.state == TaskState::Completed));
    assert_eq!(r.tasks[0].attempts, 1);
    assert_eq!(
        r.budget.granted,
        Budget::new(30, 6, 300, 30),
        "slices are not granted twice"
    );
}

/// How a driven run ended: final task states, results by node, the number of distinct task ids
/// the workers saw, the stop reason, and whether the supervisor crashed on the way.
type Ending = (
    Vec<TaskState>,
    Vec<(String, serde_json::Value)>,
    usize,
    Option<StopReason>,
    bool,
);

/// Drives a core to its stop with workers that answer every assignment with the node's name.
/// With `crash_after = Some(k)`, the supervisor crashes after the k-th reply it handled (if the
/// run has not stopped by then) and is rebuilt from its log and the result store.
fn drive_with_crash(nodes: fn() -> Vec<NodeSpec>, crash_after: Option<usize>) -> Ending {
    let mut h = Harness::new(nodes(), SupervisorConfig::default());
    let mut executions: std::collections::HashSet<quorate_protocols::TaskId> = Default::default();
    let mut inputs = 0usize;
    let mut queue: std::collections::VecDeque<(usize, Envelope<Assignment>)> =
        h.dispatched.drain(..).collect();
    let mut crashed = false;
    let mut now = 1;
    while h.stops.is_empty() {
        let Some((w, a)) = queue.pop_front() else {
            // Nothing in flight: let time pass (re-dispatch or stop).
            now += 10_000;
            h.core.handle_tick(now);
            h.drain();
            queue.extend(h.dispatched.drain(..));
            if queue.is_empty() && h.stops.is_empty() {
                panic!("stuck");
            }
            continue;
        };
        // One entry per task id; a re-dispatched attempt of the same task adds nothing.
        executions.insert(a.task);
        let value = json!(a.payload.node.as_str());
        let reply = a.reply(
            h.workers[w],
            ResultKind::VerifiedConclusion,
            Report {
                outcome: Outcome::Answer {
                    value,
                    receipts: vec![],
                },
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                rejected_calls: vec![],
            },
        );
        now += 1;
        h.core.handle_report(now, reply);
        h.drain();
        queue.extend(h.dispatched.drain(..));
        inputs += 1;
        if !crashed && crash_after == Some(inputs) && h.stops.is_empty() {
            crashed = true;
            let plan = spec_of(nodes()).validate().unwrap();
            let me = Sender {
                agent: AgentId::from_u128(1),
                role: Role::Supervisor,
            };
            let results = h.results.clone();
            h.core = SupervisorCore::resume(
                RunId::from_u128(7),
                plan,
                SupervisorConfig::default(),
                me,
                h.workers.clone(),
                &h.log,
                |k| results.get(k).cloned(),
            )
            .unwrap();
            // Envelopes in flight to the old supervisor are lost with it.
            queue.clear();
            h.core.start_resumed(now);
            h.drain();
            queue.extend(h.dispatched.drain(..));
        }
    }
    let r = h.core.snapshot();
    let states = r.tasks.iter().map(|t| t.state).collect();
    let mut results: Vec<(String, serde_json::Value)> = h
        .results
        .iter()
        .map(|(k, v)| (k.rsplit('/').next().unwrap().to_string(), v.clone()))
        .collect();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    (
        states,
        results,
        executions.len(),
        h.stops.first().cloned(),
        crashed,
    )
}

#[test]
fn resuming_at_any_point_ends_like_the_uncrashed_run() {
    fn nodes() -> Vec<NodeSpec> {
        vec![
            node("a", &[]),
            node("b", &[]),
            node("c", &["a", "b"]),
            node("d", &["c"]),
            node("e", &["a"]),
        ]
    }
    let uncrashed = drive_with_crash(nodes, None);
    assert_eq!(uncrashed.3, Some(StopReason::Completed));
    assert_eq!(uncrashed.1.len(), 5);
    assert!(!uncrashed.4);
    // The fifth reply ends the run, so a crash can come after any of the first four.
    for k in 1..=4 {
        let resumed = drive_with_crash(nodes, Some(k));
        assert!(resumed.4, "the supervisor crashed after reply {k}");
        assert_eq!(
            resumed.0, uncrashed.0,
            "task states after a crash at input {k}"
        );
        assert_eq!(resumed.1, uncrashed.1, "results after a crash at input {k}");
        assert_eq!(
            resumed.3, uncrashed.3,
            "stop reason after a crash at input {k}"
        );
        // Five task ids in all: a task re-dispatched after the resume keeps its id, so a worker's
        // action records (keyed by task, step, intent) recognise its actions and repeat none.
        assert_eq!(
            resumed.2, 5,
            "no task id changed across the resume (crash at {k})"
        );
    }
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

#[test]
fn precondition_answers_follow_their_task_across_a_replan_and_stale_ones_are_ignored() {
    use quorate_protocols::Precondition;
    let guarded = |id: &str, deps: &[&str]| {
        let mut n = node(id, deps);
        n.preconditions = vec![Precondition::KeyExists {
            key: format!("config/{id}"),
        }];
        n
    };
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
        .handle_preconditions(1, x_check, Err("no config/x".into()));
    h.drain();
    assert_eq!(h.core.snapshot().plan_version, 2);
    assert_eq!(h.core.task_id(0), y, "y moved to index 0 and kept its id");
    // The new version asks about y again; the answer to the old version's question is ignored.
    assert_eq!(h.checks, vec![0, 1, 0]);
    h.core.handle_preconditions(2, y_check, Ok(()));
    h.drain();
    assert_eq!(
        h.state(0),
        TaskState::Pending,
        "a stale answer moves nothing"
    );
    h.core.handle_preconditions(2, h.tickets[2], Ok(()));
    h.drain();
    assert_eq!(h.state(0), TaskState::Running, "y was dispatched");
    assert_eq!(h.assignment("y").1.task, y);
    // An answer for the dropped task changes nothing.
    h.core.handle_preconditions(3, x_check, Ok(()));
    assert!(h.core.poll_effect().is_none());
}

#[test]
fn a_task_whose_new_version_waits_for_a_dependency_is_not_released_by_an_old_answer() {
    use quorate_protocols::Precondition;
    let guarded = |id: &str, deps: &[&str]| {
        let mut n = node(id, deps);
        n.preconditions = vec![Precondition::KeyExists {
            key: format!("config/{id}"),
        }];
        n
    };
    let mut h = Harness::new(
        vec![guarded("x", &[]), guarded("y", &[])],
        SupervisorConfig::default(),
    );
    // The fallback makes y wait for a new task w.
    h.core
        .set_fallback_plan(spec_of(vec![node("w", &[]), guarded("y", &["w"])]));
    let y_check = h.tickets[1];
    h.core
        .handle_preconditions(1, h.tickets[0], Err("no config/x".into()));
    h.drain();
    h.core.handle_preconditions(2, y_check, Ok(()));
    h.drain();
    assert_eq!(h.state(1), TaskState::Pending, "y waits for w");
    assert_eq!(
        h.checks,
        vec![0, 1],
        "and is asked about again only once w is done"
    );
    h.send(3, h.answer("w", json!("built")));
    assert_eq!(h.checks, vec![0, 1, 1]);
    h.core.handle_preconditions(4, h.tickets[2], Ok(()));
    h.drain();
    assert_eq!(h.state(1), TaskState::Running);
}

#[test]
fn an_answer_for_a_task_that_ended_meanwhile_changes_nothing() {
    use quorate_protocols::Precondition;
    let mut guarded = node("a", &[]);
    guarded.preconditions = vec![Precondition::KeyExists {
        key: "config/a".into(),
    }];
    let mut h = Harness::new(vec![guarded, node("b", &[])], SupervisorConfig::default());
    h.core.set_fallback_plan(spec_of(vec![node("b", &[])]));
    h.core.handle_cancel(1);
    h.drain();
    assert_eq!(h.state(0), TaskState::Cancelled);
    let events = h.events.len();
    h.core
        .handle_preconditions(2, h.tickets[0], Err("no config/a".into()));
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
    h.core.handle_tick(3);
    h.drain();
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let report = h.core.snapshot();
    assert_eq!(report.actions.executed, 1);
    assert_eq!(
        report.messages.rejected_late, 1,
        "the acknowledgement itself is late"
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

/// The precondition-replan run: `publish` needs a key that is not there, so the run switches
/// to the fallback, where `draft` replaces it.
fn replanning_run() -> (Harness, PlanSpec) {
    use quorate_protocols::Precondition;
    let mut publish = node("publish", &["load"]);
    publish.preconditions = vec![Precondition::KeyExists {
        key: "config/channel".into(),
    }];
    let mut h = Harness::new(
        vec![node("load", &[]), publish],
        SupervisorConfig::default(),
    );
    let fallback = spec_of(vec![node("load", &[]), node("draft", &["load"])]);
    h.core.set_fallback_plan(fallback.clone());
    h.send(1, h.answer("load", json!("rows")));
    (h, fallback)
}

/// A supervisor rebuilt from `h`'s log and results, with `fallback` if given.
fn rebuilt(h: &Harness, fallback: Option<PlanSpec>) -> Result<SupervisorCore, ResumeError> {
    let plan = {
        use quorate_protocols::Precondition;
        let mut publish = node("publish", &["load"]);
        publish.preconditions = vec![Precondition::KeyExists {
            key: "config/channel".into(),
        }];
        spec_of(vec![node("load", &[]), publish])
            .validate()
            .unwrap()
    };
    let me = Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    };
    let mut core = SupervisorCore::new(
        RunId::from_u128(7),
        plan,
        SupervisorConfig::default(),
        me,
        h.workers.clone(),
    );
    if let Some(f) = fallback {
        core.set_fallback_plan(f);
    }
    let results = h.results.clone();
    core.replay(&h.log, |k| results.get(k).cloned())?;
    Ok(core)
}

#[test]
fn a_replanned_run_resumes_with_its_fallback_plan() {
    let (mut h, fallback) = replanning_run();
    h.core
        .handle_preconditions(2, h.tickets[0], Err("no config/channel".into()));
    h.drain();
    let draft = h.assignment("draft").1.task;
    assert_eq!(h.core.snapshot().plan_version, 2);
    // The supervisor crashes with draft running. Without the fallback the log cannot be
    // replayed; with it, the resumed core is on version 2 and sends draft again, same id.
    assert!(matches!(
        rebuilt(&h, None),
        Err(ResumeError::Replanned { .. })
    ));
    let loads = h.dispatched.len();
    h.core = rebuilt(&h, Some(fallback)).expect("replays the replan");
    h.core.start_resumed(3);
    h.drain();
    assert_eq!(h.core.snapshot().plan_version, 2);
    assert_eq!(h.dispatched.len(), loads + 1, "only draft is sent again");
    assert_eq!(h.assignment("draft").1.task, draft, "with its id");
    h.send(4, h.answer("draft", json!("text")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let states: Vec<(String, TaskState)> = h
        .core
        .snapshot()
        .tasks
        .iter()
        .map(|t| (t.id.to_string(), t.state))
        .collect();
    assert_eq!(
        states,
        vec![
            ("load".to_string(), TaskState::Completed),
            ("draft".to_string(), TaskState::Completed)
        ]
    );
}

#[test]
fn a_run_resumed_before_its_replan_keeps_the_fallback_for_later() {
    let (mut h, fallback) = replanning_run();
    // The crash comes while publish's check is out: the log has no replan yet.
    h.core = rebuilt(&h, Some(fallback)).expect("replays");
    h.core.start_resumed(2);
    h.drain();
    assert_eq!(h.checks, vec![1, 1], "publish is checked again");
    let ticket = *h.tickets.last().unwrap();
    h.core
        .handle_preconditions(3, ticket, Err("no config/channel".into()));
    h.drain();
    assert_eq!(
        h.core.snapshot().plan_version,
        2,
        "the fallback was still there"
    );
    h.send(4, h.answer("draft", json!("text")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
}
