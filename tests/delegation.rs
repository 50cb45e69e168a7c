//! Sub-task delegation end to end: slices carved from the parent, capabilities narrowed, results
//! coming back up, and a delegation that would exceed its slice refused.

mod support;

use quorate::coordinator::chaos::ChaosConfig;
use quorate::protocols::TaskState;
use quorate::runner::RunArgs;
use serde_json::json;
use support::{event_json, events, run_with, CHAOS};

fn research(run: &quorate::runner::FileRun) -> serde_json::Value {
    run.output.result("research").unwrap_or_default()
}

#[test]
fn two_level_delegation_within_the_slice_completes() {
    for chaos in [None, Some(CHAOS)] {
        let args = RunArgs {
            chaos: chaos.map(|c| c.parse::<ChaosConfig>().unwrap()),
            seed: 2,
            ..RunArgs::default()
        };
        let run = run_with("delegation.toml", &args);
        let r = &run.output.report;
        assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:?}");
        assert_eq!(r.tasks[0].state, TaskState::Completed);
        assert_eq!(
            r.actions.executed, 3,
            "web, papers and arxiv each called once"
        );
        assert_eq!(
            research(&run),
            json!({"web": "web says 0.13", "papers": {"arxiv": "2 preprints"}})
        );
        // research: 2 own steps; web: 2; papers: 3 (call, delegate, answer) + arxiv 2.
        let spent = r.tasks[0].spent;
        assert_eq!(
            (spent.steps, spent.tool_calls),
            (9, 3),
            "sub-task spending is charged to research"
        );
        assert!(spent.fits_within(&r.tasks[0].granted));
    }
}

#[test]
fn a_delegation_exceeding_the_parent_slice_is_refused() {
    let run = run_with("delegation_exceeds_slice.toml", &RunArgs::default());
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("failed"));
    let detail = r.stop_detail.clone().unwrap_or_default();
    assert!(
        detail.contains("sub-task a") && detail.contains("delegation refused"),
        "{detail}"
    );
    assert!(
        detail.contains("a2") || detail.contains("a1"),
        "names the sub-task that did not fit: {detail}"
    );
    assert_eq!(r.actions.executed, 0, "no grandchild started");
    assert!(run.world.effects().is_empty());
    let refused = events(&run)
        .iter()
        .map(event_json)
        .filter(|e| e["kind"] == "call-rejected" && e["tool"] == "delegate")
        .count();
    assert_eq!(refused, 1);
}

#[test]
fn a_refused_delegation_is_refused_under_chaos_too() {
    for seed in 1..=3 {
        let args = RunArgs {
            chaos: Some(CHAOS.parse().unwrap()),
            seed,
            ..RunArgs::default()
        };
        let run = run_with("delegation_exceeds_slice.toml", &args);
        assert_eq!(run.output.report.stop_reason.as_deref(), Some("failed"));
        assert_eq!(run.output.report.actions.executed, 0);
    }
}
