//! Crash tests of durable peer-mode runs with real processes: `quorate run --store F` of a peer
//! plan is aborted right after its N-th durable journal write (the test-only
//! `QUORATE_CRASH_AFTER_WRITES=N`), at points spread over the whole run, and `quorate resume`
//! continues it: every point ends as the uncrashed run did (completed on the fallback plan the
//! peers switched to), with every effect once, no more granted than the limit, and no task that
//! completed before the crash run again. A peer run parked for an approval is not resumed.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use quorate::durable::RunStore;
use support::{arg, clean_temp, dispatched_tasks, quorate_crashing, temp_path};

/// Two peers: a read, a write whose answer is lost after it committed, then a task whose store
/// precondition fails, so the peers switch to the fallback, whose `draft` writes once more.
const PLAN: &str = r#"
[run]
topology = "peer"
workers = 2
budget = { steps = 40, tool_calls = 10, tokens = 800, cost = 60 }
reserve = { steps = 2 }
capabilities = ["db.read", "db.save", "mail.send", "docs.write"]
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
id = "publish"
deps = ["save"]
capabilities = ["mail.send"]
budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 10 }
preconditions = [{ kind = "key-exists", key = "config/channel" }]
script = [
  { do = "call", tool = "mail.send", params = { to = "customers" }, side-effect = "non-idempotent-write", output = "sent" },
]

[fallback]
tasks = [
  { id = "load", capabilities = ["db.read"], budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 10 } },
  { id = "save", deps = ["load"], capabilities = ["db.save"], budget = { steps = 6, tool_calls = 3, tokens = 200, cost = 10 } },
  { id = "draft", deps = ["save"], capabilities = ["docs.write"], budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 10 }, script = [{ do = "call", tool = "docs.write", params = { doc = "orders-7" }, side-effect = "idempotent-write", output = "drafted" }] },
]
"#;

/// What a run left in its store.
#[derive(Debug)]
struct Kept {
    reason: String,
    states: BTreeMap<String, String>,
    /// Effects per action id, and per tool.
    effects: HashMap<String, usize>,
    tools: BTreeMap<String, usize>,
    writes: u64,
    run: quorate::protocols::RunId,
}

fn read(store: &Path) -> Kept {
    let k = RunStore::open(store).expect("the store opens");
    let run = k.runs().expect("runs read")[0].run_id;
    let record = k.run(&run.to_string()).expect("the run");
    let mut effects = HashMap::new();
    let mut tools = BTreeMap::new();
    for e in k.effects(run).expect("effects") {
        *effects.entry(format!("{:?}", e.action)).or_insert(0) += 1;
        *tools.entry(e.tool.clone()).or_insert(0) += 1;
    }
    let writes = k.events(run).expect("events").len()
        + k.results(run).expect("results").len()
        + k.intents(run).expect("intents").len()
        + effects.values().sum::<usize>();
    Kept {
        reason: record.stop_reason().unwrap_or("interrupted").to_string(),
        states: k.task_states(run).expect("states"),
        effects,
        tools,
        writes: writes as u64,
        run,
    }
}

/// The outcome every point must reach: completed on plan version 2, the save and the draft
/// written once, nothing mailed.
#[track_caller]
fn assert_whole(k: &Kept, what: &str) {
    assert_eq!(k.reason, "completed", "{what}: {k:?}");
    let want: BTreeMap<String, String> = [
        ("load", "completed"),
        ("save", "completed"),
        ("publish", "cancelled"),
        ("draft", "completed"),
    ]
    .into_iter()
    .map(|(t, s)| (t.to_string(), s.to_string()))
    .collect();
    assert_eq!(k.states, want, "{what}");
    for (action, count) in &k.effects {
        assert_eq!(*count, 1, "{what}: action {action} has {count} effects");
    }
    let tools: Vec<(&str, usize)> = k.tools.iter().map(|(t, n)| (t.as_str(), *n)).collect();
    assert_eq!(tools, [("db.save", 1), ("docs.write", 1)], "{what}");
}

#[test]
fn a_peer_run_aborted_at_any_point_resumes_to_the_uncrashed_outcome() {
    let plan = temp_path("peer_crash.toml");
    std::fs::write(&plan, PLAN).expect("plan written");
    let (store, trace) = (temp_path("whole.redb"), temp_path("whole.jsonl"));
    let out = quorate_crashing(
        &[
            "run",
            arg(&plan),
            "--store",
            arg(&store),
            "--trace",
            arg(&trace),
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let whole = read(&store);
    assert_whole(&whole, "uncrashed");
    assert!(whole.writes > 20, "{} journal writes", whole.writes);
    clean_temp(&[&store, &trace]);

    // Points spread over the whole run (every journal write would take minutes).
    let stride = (whole.writes / 24).max(1);
    let (mut resumed, mut finished) = (0, 0);
    let mut stages = std::collections::BTreeSet::new();
    for n in (1..=whole.writes).step_by(stride as usize) {
        let (store, trace) = (temp_path("kill.redb"), temp_path("kill.jsonl"));
        let out = quorate_crashing(
            &[
                "run",
                arg(&plan),
                "--store",
                arg(&store),
                "--trace",
                arg(&trace),
            ],
            Some(n),
        );
        let before = read(&store);
        if out.status.code() == Some(0) {
            assert_whole(&before, &format!("point {n} (finished)"));
            finished += 1;
            clean_temp(&[&store, &trace]);
            continue;
        }
        assert!(out.status.code().is_none(), "point {n}: aborted");
        assert_eq!(before.reason, "interrupted", "point {n}");
        let done_before: Vec<String> = before
            .states
            .iter()
            .filter(|(_, s)| *s == "completed")
            .map(|(t, _)| t.clone())
            .collect();
        stages.insert(done_before.len());
        let trace2 = temp_path("resume.jsonl");
        let out = quorate_crashing(
            &[
                "resume",
                &before.run.to_string(),
                "--store",
                arg(&store),
                "--trace",
                arg(&trace2),
                "--json",
            ],
            None,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "point {n}: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("point {n}: {e} {stderr}"));
        assert_eq!(report["plan_version"], 2, "point {n}");
        let b = &report["budget"];
        for c in ["steps", "tool_calls", "tokens", "cost"] {
            let (granted, limit) = (b["granted"][c].as_u64(), b["limit"][c].as_u64());
            assert!(
                granted <= limit,
                "point {n}: {c} granted {granted:?} > {limit:?}"
            );
        }
        assert_whole(&read(&store), &format!("point {n}"));
        let again = dispatched_tasks(&trace2);
        for task in &done_before {
            assert!(
                !again.contains(task),
                "point {n}: {task} completed before the crash and ran again"
            );
        }
        resumed += 1;
        clean_temp(&[&store, &trace, &trace2]);
    }
    clean_temp(&[&plan]);
    eprintln!(
        "{} journal writes; {resumed} points aborted and resumed, {finished} finished first, \
         with {stages:?} tasks completed at the abort",
        whole.writes
    );
    assert!(resumed > finished, "most points abort the run");
    assert!(stages.len() >= 3, "aborts at different stages: {stages:?}");
}

/// A kept peer run that stopped waiting for an approval says it cannot take one, and `resume`
/// refuses it with the run's exit code (7), changing nothing: the parked task's terminal record
/// is final in peer mode.
#[test]
fn a_peer_run_parked_for_an_approval_is_not_resumed() {
    let text = std::fs::read_to_string(support::plan("approval_required.toml"))
        .expect("plan")
        .replace("[run]\n", "[run]\ntopology = \"peer\"\n");
    let plan = temp_path("peer_approval.toml");
    std::fs::write(&plan, text).expect("written");
    let store = temp_path("peer_approval.redb");
    let out = quorate_crashing(&["run", arg(&plan), "--store", arg(&store)], None);
    assert_eq!(out.status.code(), Some(7));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("peer run cannot take an approval"),
        "{stderr}"
    );
    let before = read(&store);
    assert_eq!(before.reason, "waiting-approval");
    let run = before.run.to_string();
    let out = quorate_crashing(
        &["resume", &run, "--store", arg(&store), "--approve", "all"],
        None,
    );
    assert_eq!(out.status.code(), Some(7));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stopped waiting-approval"), "{stderr}");
    let after = read(&store);
    assert_eq!(after.writes, before.writes, "nothing written");
    assert!(after.effects.is_empty(), "nothing refunded");
    clean_temp(&[&plan, &store]);
}
