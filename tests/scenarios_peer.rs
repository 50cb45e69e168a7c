//! The scenarios that peer mode cannot run with the star's outcome (`tests/scenarios_chaos.rs`,
//! `every_scenario_holds_in_peer_mode`, leaves them out; docs/plan-format.md says why), each
//! with a peer variant that pins what peers do instead.

mod support;

use quorate::protocols::TaskState;
use quorate::runner::{run_file, FileRun, RunArgs};
use support::{assert_no_duplicate_effects, assert_outcome, cancel_after, variant};
use TaskState::{Cancelled, Completed, StoppedLimit};

/// Example plan `name` in peer mode with one peer (`workers = 2` in the file): one peer counts
/// every step of the run, in one order, so a cancel after K steps lands at one point.
fn one_peer(name: &str) -> std::path::PathBuf {
    variant(
        name,
        "one_peer",
        &[(
            "[run]\nworkers = 2\n",
            "[run]\ntopology = \"peer\"\nworkers = 1\n",
        )],
    )
}

fn run(path: &std::path::Path, args: &RunArgs) -> FileRun {
    let run = run_file(path, args).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_no_duplicate_effects(&run);
    run
}

/// `cancel_mid_run.toml`: with one peer, claiming `stage` is step 1 and accepting its reply
/// step 2, so the cancel lands as in the star: `stage` completed, the rest cancelled unrun.
#[test]
fn cancel_mid_run_with_one_peer_cancels_after_the_first_stage() {
    let run = run(&one_peer("cancel_mid_run.toml"), &cancel_after(2));
    assert_outcome(
        &run,
        "cancelled",
        &[
            ("stage", Completed),
            ("transform", Cancelled),
            ("save", Cancelled),
        ],
    );
    assert_eq!(run.output.report.actions.executed, 1);
    assert_eq!(run.world.effects().len(), 1);
}

/// `late_reply_after_cancel.toml`: one peer runs one task at a time, so it never has `index`
/// and `crawl` out together as the star's two workers do: claiming `index` is step 1,
/// accepting its reply step 2, claiming `crawl` step 3, and the cancel lands before `crawl`
/// runs. No reply comes late, and nothing is called.
#[test]
fn late_reply_after_cancel_with_one_peer_cancels_crawl_before_it_runs() {
    let run = run(&one_peer("late_reply_after_cancel.toml"), &cancel_after(3));
    assert_outcome(
        &run,
        "cancelled",
        &[("index", Completed), ("crawl", Cancelled)],
    );
    let r = &run.output.report;
    assert_eq!(
        (r.messages.rejected_late, r.actions.executed),
        (0, 0),
        "{r:#?}"
    );
    assert_eq!(r.tasks[1].attempts, 0, "crawl never ran");
}

/// `budget_ask.toml`: no supervisor keeps a peer run's top-up request, so `enrich` stops at
/// its limit (`quorate check` warns: `AskInPeer`) and `summary` is cancelled; an answer given
/// for it changes nothing.
#[test]
fn budget_ask_in_peer_mode_stops_at_the_limit() {
    let path = support::peer_variant("budget_ask.toml");
    let grant = RunArgs {
        top_ups: quorate::coordinator::TopUpPolicy(
            [(
                "enrich".to_string(),
                quorate::coordinator::TopUp::Grant(quorate::protocols::Budget::steps(5)),
            )]
            .into_iter()
            .collect(),
        ),
        ..RunArgs::default()
    };
    for args in [RunArgs::default(), grant] {
        let run = run(&path, &args);
        assert_outcome(
            &run,
            "stopped-limit",
            &[
                ("fetch", Completed),
                ("notify", Completed),
                ("enrich", StoppedLimit),
                ("summary", Cancelled),
            ],
        );
        assert!(
            run.output.report.tasks[2].top_up.is_none(),
            "no request kept"
        );
        assert_eq!(run.world.effects_of("geo.lookup"), 3);
    }
}
