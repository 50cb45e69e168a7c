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

/// The chaos settings of a run: none, then the shared chaos under seeds 1-3.
fn with_and_without_chaos() -> Vec<RunArgs> {
    let mut all = vec![RunArgs::default()];
    all.extend((1..=3).map(|seed| RunArgs {
        chaos: Some(CHAOS.parse::<ChaosConfig>().unwrap()),
        seed,
        ..RunArgs::default()
    }));
    all
}

#[test]
fn two_level_delegation_within_the_slice_completes() {
    for args in with_and_without_chaos() {
        let run = run_with("delegation.toml", &args);
        let r = &run.output.report;
        let seed = (args.chaos.is_some(), args.seed);
        assert_eq!(
            r.stop_reason.as_deref(),
            Some("completed"),
            "{seed:?}: {r:?}"
        );
        assert_eq!(r.tasks[0].state, TaskState::Completed);
        assert_eq!(
            r.actions.executed, 3,
            "{seed:?}: web, papers and arxiv each called once"
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
            "{seed:?}: sub-task spending is charged to research"
        );
        assert!(spent.fits_within(&r.tasks[0].granted));
    }
}

#[test]
fn a_delegation_exceeding_the_parent_slice_is_refused_with_and_without_chaos() {
    for args in with_and_without_chaos() {
        let seed = (args.chaos.is_some(), args.seed);
        let run = run_with("delegation_exceeds_slice.toml", &args);
        let r = &run.output.report;
        assert_eq!(r.stop_reason.as_deref(), Some("failed"), "{seed:?}");
        let detail = r.stop_detail.clone().unwrap_or_default();
        assert!(
            detail.contains("sub-task a: failed: delegation refused: sub-task a2 needs"),
            "{seed:?}: names the sub-task that did not fit, in words: {detail}"
        );
        assert_eq!(r.actions.executed, 0, "{seed:?}: no grandchild started");
        assert!(run.world.effects().is_empty());
        let refused = events(&run)
            .iter()
            .map(event_json)
            .filter(|e| e["kind"] == "call-rejected" && e["tool"] == "delegate")
            .count();
        assert_eq!(refused, 1, "{seed:?}: the refusal is logged once");
    }
}
