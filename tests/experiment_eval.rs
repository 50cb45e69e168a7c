//! `quorate eval`: plans over seeds in both topologies, every run in the denominator.

mod support;

use std::path::PathBuf;

use quorate::experiment::eval::{
    evaluate, percentile, runs_needed, supported_percentile, table, EvalArgs, TopologyChoice,
};
use support::plan;

fn args(plans: &[&str]) -> EvalArgs {
    EvalArgs {
        plans: plans.iter().map(|p| plan(p)).collect(),
        seeds: 2,
        chaos: None,
        topology: TopologyChoice::Both,
        approve: None,
        json: None,
        csv: None,
    }
}

#[test]
fn eval_counts_every_run_and_matches_known_outcomes() {
    let report = evaluate(&args(&[
        "all_inputs.toml",
        "timeout_after_commit.toml",
        "budget_exhausted.toml",
    ]))
    .expect("plans load");
    println!("{}", table(&report));
    assert_eq!(report.runs.len(), 3 * 2 * 2);
    assert_eq!(report.summaries.len(), 2);
    for s in &report.summaries {
        // Limit-hit runs stay in the denominator.
        assert_eq!(s.runs, 3 * 2, "{s:?}");
        assert_eq!(s.stop_reasons.values().sum::<u64>(), s.runs, "{s:?}");
        // 6 runs a topology: a median, but too few runs for p95 (20) or p99 (100).
        assert!(s.latency_p50_ms.unwrap() <= s.latency_max_ms, "{s:?}");
        assert_eq!(s.latency_p95_ms, None, "{s:?}");
        assert_eq!(s.latency_p99_ms, None, "{s:?}");
        assert!(
            s.success_ci.0 <= s.success_rate && s.success_rate <= s.success_ci.1,
            "{s:?}"
        );
        assert!(
            s.success_ci.1 - s.success_ci.0 > 0.2,
            "6 runs: a wide interval {s:?}"
        );
        assert_eq!(s.duplicate_actions, 0, "{s:?}");
        assert_eq!(s.runs_with_wrong_effects, 0, "{s:?}");
    }
    let of = |plan: &str, topology: &str| {
        report
            .runs
            .iter()
            .filter(|r| r.plan.ends_with(plan) && r.topology == topology)
            .collect::<Vec<_>>()
    };
    for topology in ["star", "peer"] {
        for r in of("all_inputs.toml", topology) {
            assert!(r.success, "{r:?}");
            assert!(r.within_budget, "{r:?}");
        }
        for r in of("budget_exhausted.toml", topology) {
            assert!(!r.success, "{r:?}");
            assert_eq!(r.stop_reason, "stopped-limit", "{r:?}");
        }
        for r in of("timeout_after_commit.toml", topology) {
            assert_eq!(r.effects, 1, "{r:?}");
            assert_eq!(r.duplicate_effects_world, 0, "{r:?}");
        }
    }
    let star = &report.summaries[0];
    assert_eq!(star.topology, "star");
    // all_inputs and timeout_after_commit succeed, budget_exhausted does not.
    assert_eq!(star.successes, 2 * 2, "{star:?}");
    assert_eq!(star.stop_reasons.get("stopped-limit"), Some(&2), "{star:?}");
    assert!(star.unknown >= 2, "{star:?}");
    assert!(
        star.unknown_share > 0.0 && star.unknown_share <= 1.0,
        "{star:?}"
    );
}

#[test]
fn bad_input_is_refused() {
    let mut a = args(&["all_inputs.toml"]);
    a.seeds = 0;
    assert!(evaluate(&a).is_err());
    let a = args(&["does_not_exist.toml"]);
    assert!(evaluate(&a).is_err());
}

#[test]
fn percentiles_use_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&v, 50.0), 50.0);
    assert_eq!(percentile(&v, 95.0), 95.0);
    assert_eq!(percentile(&v, 99.0), 99.0);
    assert_eq!(percentile(&[7.0], 99.0), 7.0);
    assert_eq!(percentile(&[], 50.0), 0.0);
}

#[test]
fn percentiles_need_enough_runs() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(supported_percentile(&v, 99.0), Some(99.0));
    assert_eq!(
        supported_percentile(&v[..99], 99.0),
        None,
        "99 runs: p99 would be the max"
    );
    assert_eq!(supported_percentile(&v[..20], 95.0), Some(19.0));
    assert_eq!(supported_percentile(&v[..19], 95.0), None);
    assert_eq!(supported_percentile(&v[..2], 50.0), Some(1.0));
    assert_eq!(supported_percentile(&v[..1], 50.0), None);
    assert_eq!((runs_needed(95.0), runs_needed(99.0)), (20, 100));
    let report = evaluate(&args(&["all_inputs.toml"])).expect("runs");
    let text = table(&report);
    assert!(
        text.contains("n<100") && text.contains("p99 >= 100"),
        "{text}"
    );
}

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    eval: EvalArgs,
}

#[test]
fn flags_parse() {
    use clap::Parser;
    let cli = Cli::try_parse_from([
        "eval",
        "a.toml",
        "b.toml",
        "--seeds",
        "3",
        "--topology",
        "peer",
        "--chaos",
        "dup=0.1",
        "--json",
        "out.json",
        "--csv",
        "out.csv",
    ])
    .expect("parses");
    assert_eq!(cli.eval.plans.len(), 2);
    assert_eq!(cli.eval.seeds, 3);
    assert_eq!(cli.eval.topology, TopologyChoice::Peer);
    assert!(cli.eval.chaos.is_some());
    assert_eq!(cli.eval.json, Some(PathBuf::from("out.json")));
    assert!(Cli::try_parse_from(["eval"]).is_err());
}

#[test]
fn json_and_csv_files_are_written() {
    let dir = std::env::temp_dir().join(format!("quorate-eval-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut a = args(&["all_inputs.toml"]);
    a.seeds = 1;
    a.topology = TopologyChoice::Star;
    a.json = Some(dir.join("eval.json"));
    a.csv = Some(dir.join("eval.csv"));
    assert_eq!(
        quorate::experiment::eval::run(a),
        std::process::ExitCode::SUCCESS
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("eval.json")).expect("json"))
            .expect("valid json");
    assert_eq!(json["summaries"][0]["runs"], 1);
    let csv = std::fs::read_to_string(dir.join("eval.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--approve` ids are checked against all the plans together: an id that one plan has is
/// fine for the others (each run gets its own plan's ids), and an id no plan has is refused
/// before anything runs.
#[test]
fn approval_ids_are_checked_against_every_plan_together() {
    let mut a = args(&["approval_required.toml", "all_inputs.toml"]);
    a.seeds = 1;
    a.topology = TopologyChoice::Star;
    a.approve = Some("refund".parse().unwrap());
    let report = evaluate(&a).expect("refund is a task of approval_required.toml");
    assert_eq!(report.runs.len(), 2);
    for r in &report.runs {
        assert_eq!(r.stop_reason, "completed", "{r:?}");
    }
    a.approve = Some("refnud".parse().unwrap());
    let err = evaluate(&a).unwrap_err();
    assert!(err.contains("--approve names \"refnud\""), "{err}");
}
