//! A verified conclusion completes a task only when it cites what the runtime recorded for the
//! attempt (docs/reliability.md, "A verified conclusion cites the record").
//!
//! The run that showed the gap: a task's second attempt found its only call still in flight
//! (the first attempt's, same `ActionId`), the gate refused it, and the scripted agent went on
//! to its `answer` step: "done", as a verified conclusion, with 0 calls executed. It completed.

use std::sync::Arc;
use std::time::Duration;

use quorate::coordinator::{run_star, RunOptions, SupervisorConfig};
use quorate::protocols::{Budget, Capabilities, NodeId, NodeSpec, PlanSpec, TaskState};
use quorate::workers::{AgentRegistry, Script, ScriptBook, WorkerConfig, World};
use serde_json::json;

/// One task whose only call answers after `latency_ms`; the attempt times out after 100 ms
/// and the call only after 5 s, so a second attempt starts while the first one's call is out.
fn run_slow_call(latency_ms: u64) -> quorate::coordinator::RunOutput {
    let script: Script = serde_json::from_value(json!([
        { "do": "call", "tool": "db.save", "params": { "key": "orders/7" }, "latency-ms": latency_ms },
        { "do": "answer", "value": "done" },
    ]))
    .expect("a valid script");
    let mut book = ScriptBook::new(World::new());
    book.insert(NodeId::new("save").expect("valid id"), script)
        .expect("a valid script");
    let caps = Capabilities::parse(["db.save"]).expect("valid capabilities");
    let node = NodeSpec::named("save")
        .with_budget(Budget::new(10, 3, 0, 0))
        .with_capabilities(caps.clone());
    let plan = PlanSpec {
        budget: Budget::new(40, 6, 0, 0),
        reserve: Budget::steps(1),
        capabilities: caps,
        nodes: vec![node],
    }
    .validate()
    .expect("a valid plan");
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers: 1,
            attempt_timeout_ms: 100,
            max_attempts: 2,
            ..SupervisorConfig::default()
        },
        worker: WorkerConfig {
            call_timeout: Duration::from_secs(5),
            ..WorkerConfig::default()
        },
        ..RunOptions::default()
    };
    let tools = Arc::new(book.tools().expect("scripted tools"));
    let factory = Arc::new(book);
    run_star(plan, options, move || {
        (
            AgentRegistry::new().with_fallback(factory.factory()),
            (*tools).clone(),
        )
    })
    .expect("the run runs")
}

#[test]
fn an_answer_resting_on_a_refused_call_does_not_complete_its_task() {
    let out = run_slow_call(400);
    let report = &out.report;
    let task = &report.tasks[0];
    // Attempt 2 proposed the same call, which was still in flight: refused, nothing ran.
    assert_eq!(task.attempts, 2, "{report:?}");
    assert_eq!(report.actions.rejected, 1, "{report:?}");
    // Its "done" cites nothing the runtime recorded: a suggestion, which the task's default
    // acceptance refuses. Before, the task completed with 0 calls executed by that attempt.
    assert_eq!(task.state, TaskState::Failed, "{report:?}");
    assert_eq!(report.stop_reason.as_deref(), Some("failed"));
    let detail = report.stop_detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("verified-conclusion taken as a suggestion")
            && detail.contains("it cites nothing the runtime recorded"),
        "{detail}"
    );
    assert_eq!(out.result("save"), None, "no result is committed");
}

#[test]
fn the_same_task_completes_when_its_call_answers_in_time() {
    // The control: the call answers within the first attempt, the answer cites it.
    let out = run_slow_call(0);
    let report = &out.report;
    assert_eq!(report.tasks[0].state, TaskState::Completed, "{report:?}");
    assert_eq!(report.tasks[0].attempts, 1);
    assert_eq!(out.result("save").as_deref(), Some(&json!("done")));
}
