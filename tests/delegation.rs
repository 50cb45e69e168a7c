//! Sub-task delegation end to end: slices carved from the parent, capabilities narrowed, results
//! coming back up, and a delegation that would exceed its slice refused.

use std::path::Path;

use quorate::coordinator::chaos::ChaosConfig;
use quorate::protocols::TaskState;
use quorate::runner::{run_file, RunArgs};
use serde_json::json;

fn results(run: &quorate::runner::FileRun) -> serde_json::Value {
    run.output.result("research").unwrap_or_default()
}

#[test]
fn two_level_delegation_within_the_slice_completes() {
    for chaos in [None, Some("dup=0.2,reorder=0.2,drop=0.1,delay=5")] {
        let args = RunArgs {
            chaos: chaos.map(|c| c.parse::<ChaosConfig>().unwrap()),
            seed: 2,
            ..RunArgs::default()
        };
        let run = run_file(Path::new("examples/plans/delegation.toml"), &args).unwrap();
        let r = &run.output.report;
        assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:?}");
        assert_eq!(r.tasks[0].state, TaskState::Completed);
        assert_eq!(
            r.actions.executed, 3,
            "web, papers and arxiv each called once"
        );
        assert_eq!(
            results(&run),
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
    let run = run_file(
        Path::new("examples/plans/delegation_exceeds_slice.toml"),
        &RunArgs::default(),
    )
    .unwrap();
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
    let events = run
        .output
        .log
        .read_now(r.run_id, quorate::state::Seq(0), usize::MAX);
    let refused = events
        .iter()
        .map(|(_, e)| serde_json::to_value(e).unwrap())
        .filter(|e| e["kind"] == "call-rejected" && e["tool"] == "delegate")
        .count();
    assert_eq!(refused, 1);
}

#[test]
fn a_refused_delegation_is_refused_under_chaos_too() {
    for seed in 1..=3 {
        let args = RunArgs {
            chaos: Some("dup=0.2,reorder=0.2,drop=0.1,delay=5".parse().unwrap()),
            seed,
            ..RunArgs::default()
        };
        let run = run_file(
            Path::new("examples/plans/delegation_exceeds_slice.toml"),
            &args,
        )
        .unwrap();
        assert_eq!(run.output.report.stop_reason.as_deref(), Some("failed"));
        assert_eq!(run.output.report.actions.executed, 0);
    }
}
