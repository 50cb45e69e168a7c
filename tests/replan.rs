//! Precondition failure -> replan, end to end through `quorate run`'s runner.

mod support;

use quorate::coordinator::chaos::ChaosConfig;
use quorate::protocols::TaskState;
use quorate::runner::RunArgs;
use support::{event_json, events, run_with, CHAOS};

fn check(args: &RunArgs) {
    check_run(&run_with("precondition_replan.toml", args));
}

/// The same run in peer mode: the peers agree on the plan version by CAS, with the same
/// outcome as the supervisor's.
fn check_peer(args: &RunArgs) {
    let path = support::peer_variant("precondition_replan.toml");
    let run = quorate::runner::run_file(&path, args).expect("runs in peer mode");
    check_run(&run);
    // Every peer switched once; one wrote the plan version.
    let replans: Vec<serde_json::Value> = events(&run)
        .iter()
        .map(event_json)
        .filter(|e| e["kind"] == "replanned")
        .collect();
    assert_eq!(
        replans.len(),
        2,
        "each of the two peers switched once: {replans:?}"
    );
    assert!(replans.iter().all(|e| e["plan_version"] == 2));
}

#[track_caller]
fn check_run(run: &quorate::runner::FileRun) {
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:?}");
    assert_eq!(r.plan_version, 2);
    let states: Vec<(&str, TaskState)> = r.tasks.iter().map(|t| (t.id.as_str(), t.state)).collect();
    assert_eq!(
        states,
        vec![
            ("load", TaskState::Completed),
            ("draft", TaskState::Completed)
        ]
    );
    assert_eq!(r.tasks[0].attempts, 1, "load is carried over, not re-run");
    assert_eq!(run.world.effects_of("mail.send"), 0, "publish never ran");
    assert_eq!(run.world.effects_of("docs.write"), 1);
    let kinds: Vec<String> = events(run)
        .iter()
        .map(|e| event_json(e)["kind"].as_str().unwrap().to_string())
        .collect();
    let failed = kinds
        .iter()
        .position(|k| k == "precondition-failed")
        .expect("precondition-failed event");
    let replanned = kinds
        .iter()
        .position(|k| k == "replanned")
        .expect("replanned event");
    assert!(failed < replanned);
}

#[test]
fn precondition_failure_replans_and_keeps_completed_work() {
    check(&RunArgs::default());
}

#[test]
fn precondition_failure_replans_in_peer_mode_with_and_without_chaos() {
    for args in support::with_and_without_chaos() {
        check_peer(&args);
    }
}

#[test]
fn precondition_failure_replans_under_chaos() {
    for seed in 1..=3 {
        let chaos: ChaosConfig = CHAOS.parse().unwrap();
        check(&RunArgs {
            seed,
            chaos: Some(chaos),
            ..RunArgs::default()
        });
    }
}

/// A replan that lists the same nodes in another order renumbers them: the run log must still
/// name every event's task as the trace does (the log packs a task by its node index).
#[test]
fn the_run_log_names_tasks_like_the_trace_across_a_reordering_replan() {
    let plan = support::variant(
        "precondition_replan.toml",
        "reordered",
        &[(
            "  { id = \"load\", capabilities = [\"db.read\"], budget = { steps = 6, tool_calls = 2 } },\n  { id = \"draft\",",
            "  { id = \"draft\",",
        ), (
            "script = [{ do = \"call\", tool = \"docs.write\", params = { doc = \"orders-summary\" }, output = \"drafted\" }] },\n]",
            "script = [{ do = \"call\", tool = \"docs.write\", params = { doc = \"orders-summary\" }, output = \"drafted\" }] },\n  { id = \"load\", capabilities = [\"db.read\"], budget = { steps = 6, tool_calls = 2 } },\n]",
        )],
    );
    let trace = support::temp_path("reordered_replan_trace.jsonl");
    let run = quorate::runner::run_file(
        &plan,
        &RunArgs {
            trace: Some(trace.clone()),
            ..RunArgs::default()
        },
    )
    .expect("the plan runs");
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:?}");
    assert_eq!(r.plan_version, 2);
    let ids: Vec<&str> = r.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["draft", "load"], "the fallback lists draft first");
    let traced = support::trace_lines(&trace);
    let logged: Vec<serde_json::Value> = events(&run).iter().map(event_json).collect();
    assert_eq!(logged.len(), traced.len());
    for (log, line) in logged.iter().zip(&traced) {
        assert_eq!(
            (&log["seq"], &log["task"], &log["kind"]),
            (&line["seq"], &line["task"], &line["kind"])
        );
    }
}
