//! Workers on threads of their own (`worker_threads`), and `bench dag` end to end.

mod support;

use quorate::bench_dag::{run as bench, DagArgs};
use quorate::coordinator::chaos::ChaosConfig;
use quorate::runner::RunArgs;
use support::*;

fn threads(n: usize) -> RunArgs {
    RunArgs {
        worker_threads: n,
        ..RunArgs::default()
    }
}

#[test]
fn workers_on_their_own_threads_end_as_on_one() {
    let one = run("all_inputs.toml");
    for n in [1, 2] {
        let many = run_with("all_inputs.toml", &threads(n));
        assert_eq!(many.output.report.stop_reason.as_deref(), Some("completed"));
        assert_eq!(states(&many), states(&one), "{n} worker threads");
        assert_eq!(results(&many), results(&one), "{n} worker threads");
        assert_eq!(many.world.effects_of("db.save"), 1);
        assert_no_duplicate_effects(&many);
    }
}

#[test]
fn workers_on_their_own_threads_survive_chaos() {
    for seed in 0..3 {
        let args = RunArgs {
            seed,
            chaos: Some(CHAOS.parse::<ChaosConfig>().expect("chaos spec")),
            ..threads(1)
        };
        let run = run_with("timeout_after_commit.toml", &args);
        assert_eq!(
            run.output.report.stop_reason.as_deref(),
            Some("completed"),
            "seed {seed}"
        );
        assert_no_duplicate_effects(&run);
    }
}

#[test]
fn bench_dag_reports_the_median_run_of_complete_runs() {
    let base = DagArgs {
        layers: 3,
        width: 4,
        workers: 2,
        threads: 1,
        runs: 2,
        warmup: true,
        result_bytes: 0,
        cites: quorate::bench_dag::Cites::Inputs,
    };
    assert!(
        bench(DagArgs { runs: 0, ..base }).is_err(),
        "zero runs is refused, not taken for one"
    );
    for runs in [2, 3] {
        let args = DagArgs {
            runs,
            warmup: runs == 3,
            ..base
        };
        let b = bench(args).expect("the DAG completes");
        assert_eq!(b.tasks, 12);
        assert_eq!(b.tasks_per_s_runs.len(), runs);
        assert_eq!(b.baseline_round_trips_per_s_runs.len(), runs);
        let median = quorate::bench_dag::median_index(&b.tasks_per_s_runs).expect("runs");
        assert_eq!(b.tasks_per_s, b.tasks_per_s_runs[median], "the median run");
        // Every figure is the median run's own: its time and the baseline measured before it.
        assert!(
            (b.elapsed_s * b.tasks_per_s - 12.0).abs() < 1e-6,
            "{runs} runs"
        );
        assert_eq!(
            b.baseline_round_trips_per_s,
            b.baseline_round_trips_per_s_runs[median]
        );
        assert!(b.first_run_tasks_per_s > 0.0);
        if !b.warmup {
            assert_eq!(
                b.first_run_tasks_per_s, b.tasks_per_s_runs[0],
                "without a warm-up the first run is the first measured one"
            );
        }
    }
    // Answers of 4 KiB travel the same path (store, log, every dependent's input) and the runs
    // complete just the same (an incomplete run would be an error).
    let big = DagArgs {
        result_bytes: 4096,
        runs: 1,
        ..base
    };
    let b = bench(big).expect("the DAG completes with 4 KiB answers");
    assert_eq!((b.tasks, b.result_bytes), (12, 4096));
    // Answers citing nothing (suggestions, which every node of that plan accepts) complete too.
    let uncited = DagArgs {
        cites: quorate::bench_dag::Cites::Nothing,
        runs: 1,
        ..base
    };
    let b = bench(uncited).expect("the DAG completes with uncited answers");
    assert_eq!((b.tasks, b.cites), (12, quorate::bench_dag::Cites::Nothing));
}
