//! A scripted call's `latency-ms`: a call slower than `call_timeout_ms` ends outcome-unknown, and
//! the worker's query by `ActionId` recovers it when its effect committed (docs/plan-format.md).

mod support;

use quorate::runner::{run_file, RunArgs};
use support::temp_path;

fn plan(latency_ms: u64) -> std::path::PathBuf {
    let path = temp_path(&format!("latency_{latency_ms}.toml"));
    let text = format!(
        r#"
[run]
workers = 1
budget = {{ steps = 10, tool_calls = 4 }}
capabilities = ["db.save"]
call_timeout_ms = 100
attempt_timeout_ms = 5000
[[tasks]]
id = "save"
capabilities = ["db.save"]
budget = {{ steps = 6, tool_calls = 2 }}
script = [
  {{ do = "call", tool = "db.save", params = {{ id = 7 }}, output = "saved", latency-ms = {latency_ms} }},
  {{ do = "answer", value = "saved" }},
]
"#
    );
    std::fs::write(&path, text).expect("plan written");
    path
}

#[test]
fn a_call_slower_than_its_timeout_is_unknown_then_recovered_by_query() {
    let started = std::time::Instant::now();
    let run = run_file(&plan(400), &RunArgs::default()).expect("runs");
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:#?}");
    assert_eq!(
        r.actions.unknown, 1,
        "the answer came after call_timeout_ms: {r:#?}"
    );
    assert_eq!(r.actions.recovered, 1, "the query found the effect: {r:#?}");
    assert_eq!(
        run.world.effects().len(),
        1,
        "committed once, never retried"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(100),
        "the call timeout passed"
    );
}

#[test]
fn a_call_faster_than_its_timeout_is_answered() {
    let run = run_file(&plan(20), &RunArgs::default()).expect("runs");
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:#?}");
    assert_eq!((r.actions.executed, r.actions.unknown), (1, 0), "{r:#?}");
    assert_eq!(run.world.effects().len(), 1);
}
