//! The full story of a task through the binary: each tool call's life in the trace (started,
//! outcome unknown, queried, recovered), the plan and the results in the trace, and each task's
//! result in `quorate run --json` and in the table.

mod support;

use std::process::Command;

use serde_json::Value;

/// Runs `quorate run PLAN --json --trace FILE`; the report and the trace's lines.
fn run_traced(plan: &std::path::Path, tag: &str) -> (Value, Vec<Value>) {
    let trace = support::temp_path(&format!("{tag}.jsonl"));
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run".as_ref(), plan.as_os_str(), "--json".as_ref()])
        .args(["--trace".as_ref(), trace.as_os_str()])
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "completed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    (report, support::trace_lines(&trace))
}

/// The kinds logged for `action`, in trace order.
fn kinds_of(trace: &[Value], action: &Value) -> Vec<String> {
    trace
        .iter()
        .filter(|e| &e["action"] == action)
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The unknown outcome, its query and its recovery are in the trace, in that order, for the
/// save's action; every line after the call's start names the same action; the save's result
/// is in the report and in the trace.
fn assert_recovery_story(report: &Value, trace: &[Value]) {
    let started: Vec<&Value> = trace
        .iter()
        .filter(|e| e["kind"] == "call-started")
        .collect();
    assert_eq!(started.len(), 1, "one call: {started:?}");
    assert_eq!(started[0]["task"], "save");
    assert_eq!(started[0]["tool"], "db.save");
    assert_eq!(started[0]["reserved"]["tool_calls"], 1);
    let action = &started[0]["action"];
    assert_eq!(
        kinds_of(trace, action),
        ["call-started", "outcome-unknown", "queried", "recovered"]
    );
    let queried = trace.iter().find(|e| e["kind"] == "queried").unwrap();
    assert_eq!(queried["found"], true);
    // The call's events come before the reply that carried them is accepted.
    let position = |kind: &str| trace.iter().position(|e| e["kind"] == kind).unwrap();
    assert!(position("recovered") < position("reply-accepted"));
    assert!(position("reply-accepted") < position("result-committed"));

    let save = &report["tasks"][0];
    assert_eq!(save["id"], "save");
    assert_eq!(save["state"], "completed");
    assert_eq!(
        save["result"], "saved",
        "the recovered output is the result"
    );
    let committed = &trace[position("result-committed")];
    assert_eq!(committed["task"], "save");
    assert_eq!(committed["result"], "saved");
    let started = &trace[position("run-started")];
    assert_eq!(
        started["nodes"],
        serde_json::json!([{ "id": "save", "deps": [] }]),
        "a traced run names its plan's nodes"
    );
}

#[test]
fn timeout_after_commit_shows_unknown_then_query_then_recovery() {
    let (report, trace) = run_traced(&support::plan("timeout_after_commit.toml"), "tac_star");
    assert_recovery_story(&report, &trace);
}

#[test]
fn peers_log_the_same_call_story() {
    let plan = support::peer_variant("timeout_after_commit.toml");
    let (report, trace) = run_traced(&plan, "tac_peer");
    assert_recovery_story(&report, &trace);
}

#[test]
fn a_retried_call_is_logged_with_its_query_and_second_start() {
    // The save times out before committing: the query finds nothing and the idempotent save
    // runs again under the same action id.
    let plan = support::variant(
        "timeout_after_commit.toml",
        "before",
        &[("timeout-after-commit", "timeout-before-commit")],
    );
    let (report, trace) = run_traced(&plan, "tbc_star");
    let action = &trace
        .iter()
        .find(|e| e["kind"] == "call-started")
        .expect("a call")["action"];
    assert_eq!(
        kinds_of(&trace, action),
        [
            "call-started",
            "outcome-unknown",
            "queried",
            "retried",
            "call-started",
            "call-answered"
        ]
    );
    let answered = trace.iter().find(|e| e["kind"] == "call-answered").unwrap();
    assert_eq!(answered["changed"], true);
    assert_eq!(answered["cost"]["tool_calls"], 1);
    assert_eq!(report["tasks"][0]["result"], "saved");
}

#[test]
fn the_table_shows_each_tasks_result_truncated() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run".as_ref(), support::plan("all_inputs.toml").as_os_str()])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().nth(1).expect("a header line");
    assert!(header.ends_with("result"), "{header}");
    let analyse = text
        .lines()
        .find(|l| l.starts_with("analyse "))
        .expect("a row for analyse");
    assert!(analyse.contains("{\"agree\":true"), "{analyse}");
    for line in text.lines().filter(|l| l.contains("completed")) {
        assert!(line.chars().count() <= 120, "a row stays short: {line}");
    }
}

#[test]
fn a_sub_tasks_calls_before_its_approval_request_reach_the_trace() {
    // `purge` (delegated by `cleanup`) reads first, then parks its drop for approval: the read's
    // steps travel up with the request, the drop's with the final reply.
    let plan = support::variant(
        "delegated_approval.toml",
        "read_first",
        &[
            (
                "capabilities = [\"db.drop\"]",
                "capabilities = [\"db.drop\", \"db.read\"]",
            ),
            (
                "{ steps = 4, tool_calls = 1 }",
                "{ steps = 4, tool_calls = 2 }",
            ),
            (
                "script = [{ do = \"call\", tool = \"db.drop\"",
                "script = [{ do = \"call\", tool = \"db.read\", params = { key = \"tmp\" }, \
                 side-effect = \"read-only\", output = 1 }, { do = \"call\", tool = \"db.drop\"",
            ),
        ],
    );
    let trace = support::temp_path("read_first.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run".as_ref(), plan.as_os_str(), "--approve".as_ref()])
        .args(["all".as_ref(), "--trace".as_ref(), trace.as_os_str()])
        .output()
        .expect("the binary runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = support::trace_lines(&trace);
    let kinds: Vec<(&str, &str)> = trace
        .iter()
        .filter(|e| {
            let k = e["kind"].as_str().unwrap_or_default();
            k.starts_with("call-") || k.starts_with("approval-")
        })
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or_default(),
                e["tool"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("call-started", "db.read"),
            ("call-answered", ""),
            ("approval-requested", ""),
            ("approval-decided", ""),
            ("call-started", "db.drop"),
            ("call-answered", ""),
        ]
    );
    assert!(
        trace
            .iter()
            .filter(|e| e["kind"] == "call-started")
            .all(|e| e["task"] == "cleanup"),
        "a sub-task's calls are logged under the task the supervisor knows"
    );
}
