//! Runs the logic of the Rust examples (`examples/supervisor_pipeline.rs`,
//! `examples/react_loop.rs`, `examples/peer_pipeline.rs`, `examples/voi_reservation.rs`) and
//! checks that they end as their docs say (the unit tests inside an example run here too).
//!
//! The example files are compiled into this test with `#[path]`, so the test runs exactly the
//! code a user copies; each example's `main` calls the same `run`.
//! The modules are `pub` so that the examples' public items stay reachable (the workspace
//! warns on unreachable `pub`), and `dead_code` is allowed for each example's `main`.

#[allow(dead_code)]
#[path = "../examples/supervisor_pipeline.rs"]
pub mod supervisor_pipeline;

#[allow(dead_code)]
#[path = "../examples/react_loop.rs"]
pub mod react_loop;

#[allow(dead_code)]
#[path = "../examples/peer_pipeline.rs"]
pub mod peer_pipeline;

#[allow(dead_code)]
#[path = "../examples/voi_reservation.rs"]
pub mod voi_reservation;

use quorate::coordinator::ApprovalPolicy;
use quorate::protocols::{Budget, TaskState};

#[test]
fn supervisor_pipeline_completes_and_publishes_once() {
    let outcome = supervisor_pipeline::run().expect("the pipeline runs");
    let report = &outcome.report;
    assert_eq!(report.stop_reason.as_deref(), Some("completed"));
    assert_eq!(report.stop_exit_code(), 0);
    let ids: Vec<&str> = report.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["gather-a", "gather-b", "analyse", "merge", "review"]);
    for task in &report.tasks {
        assert_eq!(task.state, TaskState::Completed, "task {}", task.id);
        assert_eq!(task.attempts, 1, "task {}", task.id);
        assert!(task.spent.steps >= 1 && task.spent.steps <= task.granted.steps);
    }
    assert_eq!(outcome.publish_effects, 1);
    // Two reads and one publish went through the gate; nothing was refused or doubled.
    assert_eq!(report.actions.executed, 3);
    assert_eq!(report.actions.rejected, 0);
    assert_eq!(report.actions.duplicate_effects, 0);
    let body = outcome.published.expect("the report was published");
    assert!(
        body.starts_with("# Notes on actix\n"),
        "titled after the merge node's goal: {body}"
    );
    assert!(body.contains("Supervisors restart failed actors. [source-a, source-b]"));
    assert!(body.contains("Mailboxes are bounded. [source-a]"));
}

#[test]
fn supervisor_pipeline_without_approval_cancels_and_publishes_nothing() {
    let outcome = supervisor_pipeline::run_with(ApprovalPolicy::None).expect("the pipeline runs");
    let report = &outcome.report;
    assert_eq!(report.stop_reason.as_deref(), Some("cancelled"));
    let states: Vec<TaskState> = report.tasks.iter().map(|t| t.state).collect();
    use TaskState::{Cancelled, Completed};
    assert_eq!(
        states,
        [Completed, Completed, Completed, Completed, Cancelled]
    );
    assert_eq!(outcome.publish_effects, 0);
    assert!(outcome.published.is_none());
}

#[test]
fn react_loop_answers_the_short_chain_and_stops_at_the_step_limit_on_the_long_one() {
    let (short, long) = react_loop::run().expect("both runs run");

    assert_eq!(short.stop_reason.as_deref(), Some("completed"));
    let task = &short.tasks[0];
    assert_eq!(task.state, TaskState::Completed);
    // Three searches and the finishing step.
    assert_eq!(task.spent, Budget::new(4, 3, 0, 0));

    assert_eq!(long.stop_reason.as_deref(), Some("stopped-limit"));
    assert_eq!(long.stop_detail.as_deref(), Some("stopped-limit (steps)"));
    assert_eq!(long.stop_exit_code(), 3);
    let task = &long.tasks[0];
    assert_eq!(task.state, TaskState::StoppedLimit);
    assert_eq!(task.attempts, 1, "a limit is not retried");
    // Every step of the slice was used, one search per step; the 6th iteration was refused.
    assert_eq!(
        task.spent,
        Budget::new(react_loop::STEPS, react_loop::STEPS, 0, 0)
    );
}

#[test]
fn peer_pipeline_sums_and_sends_n_minus_one_messages_per_result() {
    for peers in [2usize, 3, 4] {
        let out = peer_pipeline::run(peers).expect("the peer pipeline runs");
        let r = &out.report;
        assert_eq!(r.stop_reason.as_deref(), Some("completed"));
        assert_eq!(
            out.result("total").as_deref(),
            Some(&serde_json::json!((0..30).sum::<i64>()))
        );
        assert_eq!(
            r.messages.sent,
            ((peers - 1) * 4) as u64,
            "every result goes to the n-1 others"
        );
        assert_eq!(r.actions.executed, 3, "each shard ran once, on one peer");
        assert!(r
            .tasks
            .iter()
            .all(|t| t.state == TaskState::Completed && t.attempts == 1));
    }
}

#[test]
fn voi_reservation_queries_then_reserves_and_a_moved_record_is_refused_at_the_gate() {
    use voi_reservation::{run, STOCK_VERSION};
    let quiet = run(false).expect("the run without another writer");
    assert_eq!(quiet.report.stop_reason.as_deref(), Some("completed"));
    assert_eq!(quiet.report.tasks[0].state, TaskState::Completed);
    let result = quiet.result.expect("a result");
    assert_eq!(result["reserved"], true, "{result}");
    // The query and the reservation ran; the reservation took 10 units by CAS.
    assert_eq!(quiet.report.actions.executed, 2);
    assert_eq!(quiet.report.actions.rejected, 0);
    assert_eq!(quiet.stock, (STOCK_VERSION + 1, serde_json::json!(2)));

    let raced = run(true).expect("the run with another writer");
    assert_eq!(raced.report.stop_reason.as_deref(), Some("completed"));
    let result = raced.result.expect("a result");
    assert_eq!(result["reserved"], false, "{result}");
    assert_eq!(result["stock_version"], STOCK_VERSION + 1, "{result}");
    // Query, refused reservation, re-read: the gate refused the write, nothing was reserved.
    assert_eq!(raced.report.actions.executed, 2);
    assert_eq!(raced.report.actions.rejected, 1);
    assert_eq!(raced.stock, (STOCK_VERSION + 1, serde_json::json!(3)));
    assert!(
        raced
            .log
            .iter()
            .any(|l| l.contains("gate refused the reservation")),
        "{:?}",
        raced.log
    );
}
