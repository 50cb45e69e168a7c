//! Crash tests of durable runs with real processes: `quorate run --store F --trace T` is ended at
//! many points (the test-only `QUORATE_CRASH_AFTER_WRITES=N` aborts the process right after its
//! N-th durable journal write), `quorate resume` continues it, and every point must end as the
//! uncrashed run did, with at most one effect per action, no more granted than the limit, and no
//! task that completed before the crash run again.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Output;

use quorate::durable::{RunStore, CRASH_AFTER_WRITES};
use support::{arg, temp_path};

/// Writes, a timeout after commit and an approval, on two workers, with short timeouts.
const PLAN: &str = r#"
[run]
workers = 2
budget = { steps = 40, tool_calls = 10, tokens = 800, cost = 60 }
reserve = { steps = 2 }
capabilities = ["db.read", "db.save", "payments.refund"]
deadline_ms = 20000
call_timeout_ms = 60
attempt_timeout_ms = 1500

[[tasks]]
id = "load"
capabilities = ["db.read"]
budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 10 }
script = [
  { do = "call", tool = "db.read", params = { key = "orders/7" }, side-effect = "read-only", output = { amount = 30 } },
]

[[tasks]]
id = "save"
deps = ["load"]
capabilities = ["db.save"]
budget = { steps = 6, tool_calls = 3, tokens = 200, cost = 10 }
script = [
  { do = "call", tool = "db.save", params = { key = "orders/7", status = "shipped" }, side-effect = "idempotent-write", outcome = "timeout-after-commit", output = "saved" },
]

[[tasks]]
id = "note"
deps = ["load"]
capabilities = ["db.save"]
budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 10 }
script = [
  { do = "call", tool = "db.save", params = { key = "notes/7", text = "shipped" }, side-effect = "idempotent-write", output = "noted" },
]

[[tasks]]
id = "refund"
deps = ["save"]
capabilities = ["payments.refund"]
budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 20 }
script = [
  { do = "call", tool = "payments.refund", params = { key = "refunds/7", amount = 30 }, needs-approval = true, side-effect = "non-idempotent-write", output = "refunded" },
]
"#;

fn quorate(args: &[&str], crash_after: Option<u64>) -> Output {
    let mut cmd = support::quorate_command();
    cmd.args(args);
    if let Some(n) = crash_after {
        cmd.env(CRASH_AFTER_WRITES, n.to_string());
    }
    cmd.output().expect("the binary runs")
}

/// Removes the fresh directories `temp_path` made for `paths` (a point leaves megabytes).
fn clean(paths: &[&Path]) {
    for p in paths {
        if let Some(dir) = p.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What a finished run left in its store.
struct Kept {
    reason: String,
    states: BTreeMap<String, String>,
    /// Effects per action id.
    effects: HashMap<String, usize>,
    writes: u64,
    /// The refund was sent to its tool (its intent is kept) but did not commit.
    refund_unknown: bool,
}

fn kept(store: &Path) -> (RunStore, quorate::protocols::RunId) {
    let kept = RunStore::open(store).expect("the store opens");
    let run = kept.runs().expect("runs read")[0].run_id;
    (kept, run)
}

fn read(store: &Path) -> Kept {
    let (k, run) = kept(store);
    let record = k.run(&run.to_string()).expect("the run");
    let mut effects = HashMap::new();
    for e in k.effects(run).expect("effects") {
        *effects.entry(format!("{:?}", e.action)).or_insert(0) += 1;
    }
    let writes = k.events(run).expect("events").len()
        + k.results(run).expect("results").len()
        + k.intents(run).expect("intents").len()
        + effects.values().sum::<usize>();
    let refund_sent = k
        .intents(run)
        .expect("intents")
        .iter()
        .any(|i| i.tool == "payments.refund");
    let refund_done = k
        .effects(run)
        .expect("effects")
        .iter()
        .any(|e| e.tool == "payments.refund");
    Kept {
        refund_unknown: refund_sent && !refund_done,
        reason: record.stop_reason().unwrap_or("interrupted").to_string(),
        states: k.task_states(run).expect("states"),
        effects,
        writes: writes as u64,
    }
}

/// Tasks the trace at `path` dispatched.
fn dispatched(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "dispatched")
        .filter_map(|e| e["task"].as_str().map(str::to_string))
        .collect()
}

fn check_budget(report: &serde_json::Value, point: u64) {
    let b = &report["budget"];
    for c in ["steps", "tool_calls", "tokens", "cost"] {
        let (granted, limit) = (b["granted"][c].as_u64(), b["limit"][c].as_u64());
        assert!(
            granted <= limit,
            "point {point}: {c} granted {granted:?} > limit {limit:?}"
        );
    }
}

#[test]
fn a_run_killed_at_any_point_resumes_to_the_uncrashed_outcome() {
    let plan = temp_path("crash.toml");
    std::fs::write(&plan, PLAN).expect("plan written");

    // The uncrashed run.
    let store = temp_path("whole.redb");
    let whole_store = store.clone();
    let out = quorate(
        &[
            "run",
            arg(&plan),
            "--store",
            arg(&store),
            "--approve",
            "refund",
            "--json",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole = read(&store);
    assert_eq!(whole.reason, "completed");
    assert!(
        whole.states.values().all(|s| s == "completed"),
        "{:?}",
        whole.states
    );
    assert_eq!(
        whole.effects.len(),
        3,
        "save, note, refund: {:?}",
        whole.effects
    );
    assert!(whole.writes > 20, "{} journal writes", whole.writes);

    let mut points = 0;
    let mut crashed = 0;
    let mut unknown = 0;
    for n in 1..=whole.writes {
        points += 1;
        let store = temp_path("kill.redb");
        let trace = temp_path("kill.jsonl");
        let out = quorate(
            &[
                "run",
                arg(&plan),
                "--store",
                arg(&store),
                "--trace",
                arg(&trace),
                "--approve",
                "refund",
            ],
            Some(n),
        );
        let before = read(&store);
        if out.status.code() == Some(0) {
            // Fewer writes this time than N: nothing to resume.
            assert_eq!(before.states, whole.states, "point {n}");
            clean(&[&store, &trace]);
            continue;
        }
        assert!(
            out.status.code().is_none(),
            "point {n}: the crash ends it by a signal"
        );
        crashed += 1;
        assert_eq!(before.reason, "interrupted", "point {n}");
        let done_before: Vec<String> = before
            .states
            .iter()
            .filter(|(_, s)| *s == "completed")
            .map(|(t, _)| t.clone())
            .collect();

        let (_, run) = kept(&store);
        if before.refund_unknown {
            // Killed after the refund was sent and before its effect: a non-idempotent action
            // of unknown outcome that the tool does not know either is never sent again; the
            // refund fails and nothing is paid.
            let out = quorate(
                &[
                    "resume",
                    &run.to_string(),
                    "--store",
                    arg(&store),
                    "--approve",
                    "refund",
                ],
                None,
            );
            assert_eq!(out.status.code(), Some(1), "point {n}");
            let after = read(&store);
            assert_eq!(
                after.states.get("refund").map(String::as_str),
                Some("failed"),
                "point {n}"
            );
            assert!(
                after.effects.values().all(|&c| c == 1),
                "point {n}: {:?}",
                after.effects
            );
            unknown += 1;
            clean(&[&store, &trace]);
            continue;
        }
        let trace2 = temp_path("resume.jsonl");
        let out = quorate(
            &[
                "resume",
                &run.to_string(),
                "--store",
                arg(&store),
                "--trace",
                arg(&trace2),
                "--approve",
                "refund",
                "--json",
            ],
            None,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "point {n}: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("point {n}: {e} {stderr}"));
        check_budget(&report, n);
        let after = read(&store);
        assert_eq!(after.reason, whole.reason, "point {n}");
        assert_eq!(after.states, whole.states, "point {n}");
        for (action, count) in &after.effects {
            assert_eq!(*count, 1, "point {n}: action {action} has {count} effects");
        }
        assert_eq!(
            after.effects.len(),
            whole.effects.len(),
            "point {n}: {:?}",
            after.effects
        );
        let again = dispatched(&trace2);
        for task in &done_before {
            assert!(
                !again.contains(task),
                "point {n}: {task} completed before the crash and ran again"
            );
        }
        clean(&[&store, &trace, &trace2]);
    }
    clean(&[&plan, &whole_store]);
    eprintln!("{points} kill points, {crashed} crashed and resumed, {unknown} with the refund's outcome unknown");
    assert!(
        unknown <= 1,
        "only the point between the refund's intent and its effect"
    );
    assert!(
        crashed as u64 * 2 > whole.writes,
        "most points crash: {crashed} of {}",
        whole.writes
    );
}
