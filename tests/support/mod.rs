//! Helpers shared by the end-to-end scenario tests: run a plan of `examples/plans/`, read its
//! states, events and results, and assert its outcome.
#![allow(dead_code, unused_imports)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};

use quorate::coordinator::chaos::ChaosConfig;
use quorate::coordinator::Event;
use quorate::plan_file::{PlanFile, PlanFileError};
use quorate::protocols::{Budget, PlanError, RunId, TaskId, TaskState};
use quorate::runner::{run_file, Approve, FileRun, RunArgs};
use quorate::state::{AccountId, BudgetLedger, BudgetLedgerError, LedgerError, MemoryStore, Seq};

use TaskState::{Cancelled, Completed, Failed, StoppedLimit, WaitingApproval};

mod process;
pub(crate) use process::{sum_of, Running};

/// `nodes` as a valid plan in which each node has a slice of 2 steps, the plan 10 steps per node
/// and no reserve.
pub(crate) fn two_step_plan(nodes: Vec<quorate::protocols::NodeSpec>) -> quorate::protocols::Plan {
    let nodes: Vec<_> = nodes
        .into_iter()
        .map(|n| n.with_budget(Budget::steps(2)))
        .collect();
    quorate::protocols::PlanSpec {
        budget: Budget::steps(10 * nodes.len() as u64),
        reserve: Budget::ZERO,
        nodes,
        ..quorate::protocols::PlanSpec::default()
    }
    .validate()
    .expect("a valid plan")
}

/// Options of a run on two workers, with `store` as its store if any.
pub(crate) fn two_workers(
    store: Option<std::sync::Arc<MemoryStore<quorate::protocols::Payload>>>,
) -> quorate::coordinator::RunOptions {
    quorate::coordinator::RunOptions {
        supervisor: quorate::coordinator::SupervisorConfig {
            workers: 2,
            ..quorate::coordinator::SupervisorConfig::default()
        },
        store,
        ..quorate::coordinator::RunOptions::default()
    }
}

pub(crate) const CHAOS: &str = "dup=0.2,reorder=0.2,drop=0.1,delay=5";

pub(crate) fn plan(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/plans")
        .join(name)
}

pub(crate) fn run_with(name: &str, args: &RunArgs) -> FileRun {
    run_file(&plan(name), args).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub(crate) fn run(name: &str) -> FileRun {
    run_with(name, &RunArgs::default())
}

pub(crate) fn cancel_after(steps: u64) -> RunArgs {
    RunArgs {
        cancel_after_steps: Some(steps),
        ..RunArgs::default()
    }
}

pub(crate) fn approve(a: Approve) -> RunArgs {
    RunArgs {
        approve: a,
        ..RunArgs::default()
    }
}

/// The lines of the JSONL trace at `path`, each parsed.
pub(crate) fn trace_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("trace written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// A copy of example plan `name` with each `(from, to)` text replaced, written under `tag`.
pub(crate) fn variant(name: &str, tag: &str, edits: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(plan(name)).expect("example plan");
    for (from, to) in edits {
        assert!(text.contains(from), "{name} has {from:?}");
        text = text.replace(from, to);
    }
    let path = temp_path(&format!("{tag}_{name}"));
    std::fs::write(&path, text).expect("write plan");
    path
}

/// Example plan `name` switched to peer mode (the same tasks, run by peers claiming them by
/// CAS).
pub(crate) fn peer_variant(name: &str) -> PathBuf {
    let text = std::fs::read_to_string(plan(name)).expect("example plan");
    let edit = if text.contains("topology = \"star\"") {
        ("topology = \"star\"", "topology = \"peer\"")
    } else {
        ("[run]\n", "[run]\ntopology = \"peer\"\n")
    };
    variant(name, "peer", &[edit])
}

/// The chaos settings a scenario runs under: none, then [`CHAOS`] with seeds 1-3.
pub(crate) fn with_and_without_chaos() -> Vec<RunArgs> {
    let chaos: ChaosConfig = CHAOS.parse().expect("valid chaos");
    let mut all = vec![RunArgs::default()];
    all.extend((1..=3).map(|seed| RunArgs {
        chaos: Some(chaos),
        seed,
        ..RunArgs::default()
    }));
    all
}

/// The `quorate` binary built for these tests, with neither the test-only crash switch
/// ([`quorate::durable::CRASH_AFTER_WRITES`]) nor a `RUST_LOG` taken from the environment.
pub(crate) fn quorate_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quorate"));
    cmd.env_remove(quorate::durable::CRASH_AFTER_WRITES)
        .env_remove("RUST_LOG");
    cmd
}

/// Runs the `quorate` binary with `args` ([`quorate_command`]).
pub(crate) fn quorate(args: &[&str]) -> Output {
    quorate_command()
        .args(args)
        .output()
        .expect("the binary runs")
}

/// What `out` printed on stdout, as one JSON value; panics with its stdout and stderr if it
/// is not one.
#[track_caller]
pub(crate) fn stdout_json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON on stdout ({e}): {} / stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `path` as a command-line argument.
pub(crate) fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A fresh path under the temp dir (unique per process and call).
pub(crate) fn temp_path(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "quorate-scenarios-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// Removes the fresh directories [`temp_path`] made for `paths` (a crash point leaves
/// megabytes).
pub(crate) fn clean_temp(paths: &[&Path]) {
    for p in paths {
        if let Some(dir) = p.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Runs the binary with `args` ([`quorate_command`]), aborted right after its `crash_after`-th
/// durable journal write when given ([`quorate::durable::CRASH_AFTER_WRITES`]).
pub(crate) fn quorate_crashing(args: &[&str], crash_after: Option<u64>) -> Output {
    let mut cmd = quorate_command();
    cmd.args(args);
    if let Some(n) = crash_after {
        cmd.env(quorate::durable::CRASH_AFTER_WRITES, n.to_string());
    }
    cmd.output().expect("the binary runs")
}

/// The tasks the trace at `path` dispatched, in order (none if it cannot be read).
pub(crate) fn dispatched_tasks(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "dispatched")
        .filter_map(|e| e["task"].as_str().map(str::to_string))
        .collect()
}

pub(crate) fn states(run: &FileRun) -> Vec<(String, TaskState)> {
    run.output
        .report
        .tasks
        .iter()
        .map(|t| (t.id.to_string(), t.state))
        .collect()
}

pub(crate) fn attempts(run: &FileRun) -> HashMap<String, u32> {
    run.output
        .report
        .tasks
        .iter()
        .map(|t| (t.id.to_string(), t.attempts))
        .collect()
}

#[track_caller]
pub(crate) fn assert_outcome(run: &FileRun, stop: &str, expected: &[(&str, TaskState)]) {
    let r = &run.output.report;
    assert_eq!(
        r.stop_reason.as_deref(),
        Some(stop),
        "stop detail: {:?}; report: {r:#?}",
        r.stop_detail
    );
    let want: Vec<(String, TaskState)> = expected
        .iter()
        .map(|(id, s)| ((*id).to_string(), *s))
        .collect();
    assert_eq!(states(run), want, "report: {r:#?}");
}

/// No action committed more than once, and the runtime saw no duplicate effect.
#[track_caller]
pub(crate) fn assert_no_duplicate_effects(run: &FileRun) {
    assert_eq!(run.output.report.actions.duplicate_effects, 0);
    for e in run.world.effects() {
        assert_eq!(
            run.world.effects_for(&e.action),
            1,
            "action {} of {} committed more than once",
            e.action,
            e.tool
        );
    }
}

pub(crate) fn events(run: &FileRun) -> Vec<Event> {
    run.output
        .log
        .read_now(run.output.report.run_id, Seq(0), usize::MAX)
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

pub(crate) fn event_json(e: &Event) -> serde_json::Value {
    serde_json::to_value(e).expect("events serialize")
}

/// Results committed to the run's result store, by node id.
pub(crate) fn results(run: &FileRun) -> HashMap<String, serde_json::Value> {
    let prefix = quorate::coordinator::result_key(run.output.report.run_id, "");
    run.output
        .results
        .scan_now(&prefix)
        .into_iter()
        .map(|(k, v)| (k[prefix.len()..].to_string(), v.value.into_value()))
        .collect()
}
