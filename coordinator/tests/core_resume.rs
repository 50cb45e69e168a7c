//! Resuming a crashed supervisor from its run log and the result store: completed work is not
//! run again, a crash at any point ends like the uncrashed run, and a replanned run resumes
//! with its fallback plan.

mod support;

use quorate_coordinator::{EventKind, ResumeError, StopReason, SupervisorConfig};
use quorate_protocols::wire::{ActionCounts, Assignment, Outcome, Report};
use quorate_protocols::{Budget, Envelope, NodeSpec, ResultKind, TaskState};
use quorate_state::PreconditionFailure;
use serde_json::json;

use support::{fail_publish, node, replanning_nodes, replanning_run, spec_of, Harness};

#[test]
fn a_crashed_supervisor_resumes_from_its_log_without_rerunning_completed_work() {
    let nodes = || vec![node("a", &[]), node("b", &[]), node("c", &["a", "b"])];
    let mut h = Harness::new(nodes(), SupervisorConfig::default());
    h.send(1, h.answer("a", json!("A")));
    let b_old = h.answer("b", json!("B-late"));
    let b_task = h.core.task_id(1);
    // Crash: only the log, the result store and the workers survive.
    let last_before = h.log.last().unwrap().seq;
    h.dispatched.clear();
    h.crash_and_resume(None, 10);
    // b was in flight: dispatched again, same task id, same worker, new attempt. a is not re-run.
    assert_eq!(h.dispatched.len(), 1);
    let (w, again) = h.dispatched[0].clone();
    assert_eq!(
        (again.payload.node.as_str(), again.task, again.attempt),
        ("b", b_task, 2)
    );
    assert_eq!(w, 1);
    assert!(
        h.log.last().is_some_and(|e| e.seq > last_before),
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
            h.tick(now);
            queue.extend(h.dispatched.drain(..));
            if queue.is_empty() && h.stops.is_empty() {
                panic!("stuck");
            }
            continue;
        };
        // One entry per task id; a re-dispatched attempt of the same task adds nothing.
        executions.insert(a.task);
        let value = json!(a.payload.node.as_str());
        let mut reply = a.reply(
            h.workers[w],
            ResultKind::VerifiedConclusion,
            Report {
                outcome: Outcome::Answer {
                    value: value.into(),
                    receipts: vec![],
                },
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                calls: vec![],
            },
            &mut support::ids(),
        );
        support::rests_on_a_call(&mut reply);
        now += 1;
        h.core
            .handle_report(now, reply)
            .expect("an answer of the live attempt");
        h.drain();
        queue.extend(h.dispatched.drain(..));
        inputs += 1;
        if !crashed && crash_after == Some(inputs) && h.stops.is_empty() {
            crashed = true;
            h.core = h.rebuilt(None).unwrap();
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
fn a_replanned_run_resumes_with_its_fallback_plan() {
    let (mut h, fallback) = replanning_run();
    fail_publish(&mut h);
    let draft = h.assignment("draft").1.task;
    assert_eq!(h.core.snapshot().plan_version, 2);
    // The supervisor crashes with draft running. Without the fallback the log cannot be
    // replayed; with it, the resumed core is on version 2 and sends draft again, same id.
    assert!(matches!(
        h.rebuilt(None),
        Err(ResumeError::Replanned { .. })
    ));
    let loads = h.dispatched.len();
    h.crash_and_resume(Some(fallback), 3);
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
    h.crash_and_resume(Some(fallback), 2);
    assert_eq!(h.checks, vec![1, 1], "publish is checked again");
    let ticket = *h.tickets.last().unwrap();
    let failed = h.core.handle_preconditions(
        3,
        ticket,
        Err(PreconditionFailure::Missing {
            key: "config/channel".into(),
        }),
    );
    assert_eq!(failed, Ok(()), "publish's check is awaited again");
    h.drain();
    assert_eq!(
        h.core.snapshot().plan_version,
        2,
        "the fallback was still there"
    );
    h.send(4, h.answer("draft", json!("text")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn a_crash_in_the_middle_of_a_replan_finishes_it_on_resume() {
    use quorate_coordinator::EventKind;
    let (mut h, fallback) = replanning_run();
    fail_publish(&mut h);
    let failed_at = h
        .log
        .iter()
        .position(|e| matches!(e.kind, EventKind::PreconditionFailed { .. }))
        .expect("the precondition failed");
    let replanned_at = h
        .log
        .iter()
        .position(|e| matches!(e.kind, EventKind::Replanned { .. }))
        .expect("the run replanned");
    // Crash after the failure was logged, and after each event of the replan before the
    // `replanned` one (publish's cancellation, its closed account): the resumed run switches
    // to the fallback all the same and ends like the uncrashed one.
    assert!(
        replanned_at > failed_at + 1,
        "the replan logs something before `replanned`"
    );
    for cut in failed_at + 1..replanned_at {
        let mut crashed = Harness::new(replanning_nodes(), SupervisorConfig::default());
        crashed.log = h.log[..cut].to_vec();
        crashed.results = h.results.clone();
        crashed.dispatched.clear();
        crashed.crash_and_resume(Some(fallback.clone()), 3);
        assert_eq!(crashed.core.snapshot().plan_version, 2, "cut at {cut}");
        let sent: Vec<String> = crashed
            .dispatched
            .iter()
            .map(|(_, e)| e.payload.node.to_string())
            .collect();
        assert_eq!(sent, ["draft"], "only draft runs (cut at {cut})");
        crashed.send(4, crashed.answer("draft", json!("text")));
        assert_eq!(crashed.stops, vec![StopReason::Completed], "cut at {cut}");
    }
}

#[test]
fn a_replanned_log_is_not_replayed_with_another_plan() {
    let (mut h, _) = replanning_run();
    fail_publish(&mut h);
    // Another shape than the plan the log switched to.
    let other = spec_of(vec![
        node("load", &[]),
        node("draft", &["load"]),
        node("extra", &[]),
    ]);
    assert!(matches!(
        h.rebuilt(Some(other)),
        Err(ResumeError::FallbackMismatch {
            logged: 2,
            given: 3,
            ..
        })
    ));
    // One the run could never have switched to: a bigger budget.
    let mut wider = spec_of(vec![node("load", &[]), node("draft", &["load"])]);
    wider.budget.steps += 1;
    assert!(matches!(
        h.rebuilt(Some(wider)),
        Err(ResumeError::BadFallback { .. })
    ));
}

#[test]
fn a_log_naming_a_worker_the_rebuilt_supervisor_lacks_is_refused() {
    let nodes = vec![node("a", &[]), node("b", &[])];
    let h = Harness::new(nodes.clone(), SupervisorConfig::default());
    assert_eq!(h.assignment("b").0, 1, "b went to the second worker");
    let plan = spec_of(nodes).validate().expect("valid plan");
    let mut core = support::core_for(plan, &h.config, h.workers[..1].to_vec());
    let err = core
        .replay(&h.log, |k| h.results.get(k).cloned().map(Into::into))
        .expect_err("one worker short");
    assert!(
        matches!(
            err,
            ResumeError::UnknownWorker {
                worker: 1,
                workers: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

/// A crash between a result's commit and its log entry: the resumed supervisor runs the task
/// again, and its new answer finds the key taken. The stored result is kept (never
/// overwritten), logged as `result-kept` in place of `result-committed`, and is what the
/// dependents get, whether or not the new answer differs.
#[test]
fn a_result_committed_before_a_crash_is_kept_and_passed_on_after_resume() {
    for (first, again) in [(json!("A1"), json!("A2")), (json!("A"), json!("A"))] {
        let mut h = Harness::new(
            vec![node("a", &[]), node("b", &["a"])],
            SupervisorConfig::default(),
        );
        let key = h.core.result_key(0);
        h.send(1, h.answer("a", first.clone()));
        let version = h.versions[&key];
        // The log loses everything from a's `result-committed` on; the store keeps the commit.
        let cut = h
            .log
            .iter()
            .position(|e| matches!(e.kind, EventKind::ResultCommitted { .. }))
            .expect("a's commit was logged");
        h.log.truncate(cut);
        h.crash_and_resume(None, 2);
        assert_eq!(h.state(0), TaskState::Running, "a runs again");
        h.send(3, h.answer("a", again.clone()));
        let same = first == again;
        assert_eq!(
            h.logged("result-kept"),
            vec![(
                Some("a".to_string()),
                EventKind::ResultKept {
                    version,
                    same,
                    result: first.clone().into()
                }
            )]
        );
        assert!(
            h.logged("result-committed").is_empty(),
            "the resumed run did not commit a's result"
        );
        assert_eq!(h.core.task_result(0), Some(&first));
        let (_, b) = h.assignment("b");
        assert_eq!(b.payload.inputs.len(), 1);
        assert_eq!(
            b.payload.inputs[0].value, first,
            "b gets what the store holds"
        );
        assert_eq!(h.state(0), TaskState::Completed);
    }
}

/// The last task's kept result is logged before the run stops (the actor stops carrying out
/// effects at `Stop`, so a record queued behind it would be lost).
#[test]
fn the_last_tasks_kept_result_is_logged_before_the_run_stops() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let key = h.core.result_key(0);
    h.store_result(&key, json!("before"));
    h.send(1, h.answer("a", json!("after")));
    let kinds: Vec<&str> = h.log.iter().map(|e| e.kind.name()).collect();
    let kept = kinds.iter().position(|&k| k == "result-kept");
    let stopped = kinds.iter().position(|&k| k == "run-stopped");
    assert!(
        kept.is_some() && kept < stopped,
        "result-kept before run-stopped: {kinds:?}"
    );
}

/// A replan between a commit and its answer names the waiting records; the kept result is
/// still logged in place of that task's `result-committed`, once.
#[test]
fn a_kept_result_replaces_its_record_even_after_a_replan_named_it() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let key = h.core.result_key(0);
    h.store_result(&key, json!("before"));
    // a answers; before the shell carries out the commit, a replan drops b.
    let answer = h.answer("a", json!("after"));
    h.core.handle_report(1, answer).expect("a's answer");
    h.core
        .handle_replan(1, spec_of(vec![node("a", &[]), node("c", &[])]))
        .expect("same budget, same authority");
    h.drain();
    assert_eq!(
        h.logged("result-kept"),
        vec![(
            Some("a".to_string()),
            EventKind::ResultKept {
                version: h.versions[&key],
                same: false,
                result: json!("before").into()
            }
        )]
    );
    assert!(h.logged("result-committed").is_empty());
    assert_eq!(h.core.task_result(0), Some(&json!("before")));
}

/// A log whose numbers do not fit the plan's budget (a task closed at more than its slice, a
/// slice larger than the budget) is refused with the event and the ledger's word, instead of
/// resuming with books that do not add up.
#[test]
fn a_log_the_budget_ledger_refuses_does_not_replay() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    h.send(1, h.answer("a", json!(1)));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let mut log = h.log.clone();
    log.retain(|e| !matches!(e.kind, EventKind::RunStopped { .. }));
    let closed = log
        .iter_mut()
        .find(|e| matches!(e.kind, EventKind::TaskClosed { .. }))
        .expect("a's slice was closed");
    let seq = closed.seq;
    closed.kind = EventKind::TaskClosed {
        spent: Budget::steps(u64::MAX),
    };
    assert!(
        matches!(h.rebuilt_from(&log, None), Err(ResumeError::Ledger { seq: s, .. }) if s == seq),
        "a close at more than the slice"
    );
    let mut log = h.log.clone();
    log.retain(|e| !matches!(e.kind, EventKind::RunStopped { .. }));
    let dispatched = log
        .iter_mut()
        .find(|e| matches!(e.kind, EventKind::Dispatched { .. }))
        .expect("a was dispatched");
    let seq = dispatched.seq;
    if let EventKind::Dispatched { granted, .. } = &mut dispatched.kind {
        *granted = Budget::steps(u64::MAX);
    }
    assert!(
        matches!(h.rebuilt_from(&log, None), Err(ResumeError::Ledger { seq: s, .. }) if s == seq),
        "a slice larger than the run's budget"
    );
    // The log as written replays.
    log = h.log.clone();
    log.retain(|e| !matches!(e.kind, EventKind::RunStopped { .. }));
    assert!(h.rebuilt_from(&log, None).is_ok());
}
