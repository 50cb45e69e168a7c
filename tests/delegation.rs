//! Sub-task delegation end to end: slices carved from the parent, capabilities narrowed, results
//! coming back up, and a delegation that would exceed its slice refused; by a supervisor and by
//! peers, without chaos and under chaos.

mod support;

use quorate::protocols::TaskState;
use quorate::runner::{run_file, FileRun};
use serde_json::json;
use support::{event_json, events, peer_variant, plan, with_and_without_chaos};

fn research(run: &FileRun) -> serde_json::Value {
    run.output
        .result("research")
        .unwrap_or_default()
        .into_value()
}

/// Example plan `name` run by a supervisor and by peers, each without chaos and under chaos
/// with seeds 1-3; every run with a label saying which.
fn runs(name: &str) -> Vec<(String, FileRun)> {
    let mut out = Vec::new();
    for (topology, path) in [("star", plan(name)), ("peer", peer_variant(name))] {
        for args in with_and_without_chaos() {
            let label = format!(
                "{topology}, chaos {}, seed {}",
                args.chaos.is_some(),
                args.seed
            );
            let run = run_file(&path, &args).unwrap_or_else(|e| panic!("{label}: {e}"));
            out.push((label, run));
        }
    }
    out
}

#[test]
fn two_level_delegation_within_the_slice_completes() {
    for (seed, run) in runs("delegation.toml") {
        let r = &run.output.report;
        assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{seed}: {r:?}");
        assert_eq!(r.tasks[0].state, TaskState::Completed);
        assert_eq!(
            r.actions.executed, 3,
            "{seed}: web, papers and arxiv each called once"
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
            "{seed}: sub-task spending is charged to research"
        );
        assert!(spent.fits_within(&r.tasks[0].granted));
    }
}

#[test]
fn a_delegation_exceeding_the_parent_slice_is_refused() {
    for (seed, run) in runs("delegation_exceeds_slice.toml") {
        let r = &run.output.report;
        assert_eq!(r.stop_reason.as_deref(), Some("failed"), "{seed}");
        let detail = r.stop_detail.clone().unwrap_or_default();
        assert!(
            detail.contains("sub-task a: failed: delegation refused: sub-task a2 needs"),
            "{seed}: names the sub-task that did not fit, in words: {detail}"
        );
        assert_eq!(r.actions.executed, 0, "{seed}: no grandchild started");
        assert!(run.world.effects().is_empty());
        let refused = events(&run)
            .iter()
            .map(event_json)
            .filter(|e| e["kind"] == "call-rejected" && e["tool"] == "delegate")
            .count();
        assert_eq!(refused, 1, "{seed}: the refusal is logged once");
    }
}
