//! Peer mode end to end: `examples/plans/all_inputs.toml` with `topology = "peer"` and three
//! peers, through `quorate::runner::run_file`, with and without message chaos.

mod support;

use std::path::PathBuf;

use quorate::coordinator::chaos::ChaosConfig;
use quorate::coordinator::trace::check_terminal_is_final;
use quorate::coordinator::{Event, EventKind};
use quorate::protocols::TaskState;
use quorate::runner::{run_file, Approve, FileRun, RunArgs};
use support::{
    assert_no_duplicate_effects, assert_outcome, variant, with_and_without_chaos, CHAOS,
};

/// A copy of `all_inputs.toml` switched to peer mode with `peers` peers.
fn peer_plan(tag: &str, peers: usize) -> PathBuf {
    let peers = format!("workers = {peers}");
    variant(
        "all_inputs.toml",
        tag,
        &[
            ("topology = \"star\"", "topology = \"peer\""),
            ("workers = 2", &peers),
        ],
    )
}

#[track_caller]
fn assert_completed_once(run: &FileRun, peers: u64) {
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:#?}");
    assert_eq!(r.stop_exit_code(), 0);
    assert_eq!(r.tasks.len(), 4);
    for t in &r.tasks {
        assert_eq!(t.state, TaskState::Completed, "{}", t.id);
        assert_eq!(t.attempts, 1, "{} ran once, on one peer", t.id);
        assert!(t.spent.fits_within(&t.granted), "{}", t.id);
    }
    assert_eq!(r.actions.executed, 3, "two reads and one save");
    assert_eq!(run.world.effects_of("db.save"), 1);
    assert_eq!(run.world.effects().len(), 1);
    assert_no_duplicate_effects(run);
    // One broadcast per task, to every other peer.
    assert_eq!(r.messages.sent, 4 * (peers - 1), "{:?}", r.messages);
    assert!(r.budget.spent.fits_within(&r.budget.limit));
    assert_eq!(
        r.budget.granted,
        r.tasks
            .iter()
            .fold(quorate::protocols::Budget::ZERO, |acc, t| acc
                .saturating_add(&t.granted),)
    );
    let prefix = quorate::coordinator::result_key(r.run_id, "");
    assert_eq!(run.output.results.scan_now(&prefix).len(), 4);
}

#[test]
fn all_inputs_in_peer_mode_completes() {
    let run = run_file(&peer_plan("plain", 3), &RunArgs::default()).expect("runs");
    assert_completed_once(&run, 3);
    let m = run.output.report.messages;
    assert_eq!(
        m.delivered, m.sent,
        "no chaos: every broadcast arrives once"
    );
    assert_eq!(
        m.rejected_duplicate + m.rejected_late + m.rejected_unauthorized,
        0
    );
    println!("peer messages (3 peers): {m:?}");
    let star = support::run("all_inputs.toml");
    println!(
        "star messages (2 workers): {:?}",
        star.output.report.messages
    );
    let two = run_file(&peer_plan("two", 2), &RunArgs::default()).expect("runs");
    assert_completed_once(&two, 2);
    println!("peer messages (2 peers): {:?}", two.output.report.messages);
}

#[test]
fn one_peer_is_one_peer() {
    // `workers = 1` runs one peer (it used to run two, silently): it claims every task itself
    // and has nobody to broadcast to.
    let run = run_file(&peer_plan("one", 1), &RunArgs::default()).expect("runs");
    assert_completed_once(&run, 1);
    assert_eq!(run.output.report.messages.sent, 0);
}

#[test]
fn all_inputs_in_peer_mode_under_chaos() {
    let path = peer_plan("chaos", 3);
    for seed in 1..=3 {
        let args = RunArgs {
            seed,
            chaos: Some(CHAOS.parse::<ChaosConfig>().expect("chaos")),
            ..RunArgs::default()
        };
        let run = run_file(&path, &args).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_completed_once(&run, 3);
        let m = run.output.report.messages;
        println!("seed {seed}: {m:?} chaos {:?}", run.output.chaos);
    }
}

#[test]
fn a_peer_trace_names_each_event_s_writer_and_a_task_ends_once_per_peer() {
    let path = support::temp_path("peer_trace.jsonl");
    let args = RunArgs {
        trace: Some(path.clone()),
        seed: 2,
        chaos: Some(CHAOS.parse::<ChaosConfig>().expect("chaos")),
        ..RunArgs::default()
    };
    let run = run_file(&peer_plan("traced", 3), &args).expect("runs");
    assert_completed_once(&run, 3);
    let text = std::fs::read_to_string(&path).expect("trace written");
    let events: Vec<Event> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is an event"))
        .collect();
    assert_eq!(events.len() as u64, run.output.trace_lines);
    assert!(
        events.iter().all(|e| e.peer.is_some_and(|p| p < 3)),
        "every line names one of the three peers"
    );
    check_terminal_is_final(&events).expect("no transition after a terminal state, per peer");
    // Every peer wrote its own copy of every task's end (and of the run's stop).
    for task in &run.output.report.tasks {
        let mut writers: Vec<usize> = events
            .iter()
            .filter(|e| e.task.as_deref() == Some(task.id.as_str()))
            .filter(|e| matches!(e.kind, EventKind::Transition { to, .. } if to.is_terminal()))
            .filter_map(|e| e.peer)
            .collect();
        writers.sort_unstable();
        assert_eq!(writers, [0, 1, 2], "{}", task.id);
    }
    let stops = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RunStopped { .. }))
        .count();
    assert_eq!(stops, 3, "one run-stopped per peer");
    // Read as one writer's, the same trace breaks the rule: the peer field is what keeps the
    // copies apart.
    let merged: Vec<Event> = events
        .iter()
        .cloned()
        .map(|e| Event { peer: None, ..e })
        .collect();
    assert!(check_terminal_is_final(&merged).is_err());
    let _ = std::fs::remove_dir_all(path.parent().expect("temp dir"));
}

/// `precondition_replan.toml` in peer mode with two peers; `channel` adds `config/channel` to
/// its `[data]`, `fallback` keeps its `[fallback]`.
fn precondition_plan(tag: &str, channel: bool, fallback: bool) -> PathBuf {
    let peer = ("[run]\n", "[run]\ntopology = \"peer\"\n");
    let data = ("[data]\n", "[data]\n\"config/channel\" = \"mail\"\n");
    let (with, without) = ([peer, data], [peer]);
    let edits: &[(&str, &str)] = if channel { &with } else { &without };
    let path = variant("precondition_replan.toml", tag, edits);
    if !fallback {
        let text = std::fs::read_to_string(&path).expect("written");
        let cut = text.rfind("[fallback]").expect("the plan has a fallback");
        std::fs::write(&path, &text[..cut]).expect("written");
    }
    path
}

#[test]
fn peer_mode_writes_data_and_checks_store_preconditions() {
    // The key is in [data]: publish's precondition holds and it runs.
    let run = run_file(&precondition_plan("held", true, true), &RunArgs::default()).expect("runs");
    let r = &run.output.report;
    assert_eq!(r.stop_reason.as_deref(), Some("completed"), "{r:#?}");
    assert_eq!(r.plan_version, 1);
    assert_eq!(run.world.effects_of("mail.send"), 1);
    // It is not: the peers switch to the fallback, as the star does (tests/replan.rs).
    let run = run_file(
        &precondition_plan("missing", false, true),
        &RunArgs::default(),
    )
    .expect("runs");
    assert_outcome(
        &run,
        "completed",
        &[
            ("load", TaskState::Completed),
            ("draft", TaskState::Completed),
        ],
    );
    assert_eq!(run.output.report.plan_version, 2);
    assert_eq!(run.world.effects_of("mail.send"), 0, "publish never ran");
    // No fallback: publish fails on the observation and never runs.
    let run = run_file(
        &precondition_plan("alone", false, false),
        &RunArgs::default(),
    )
    .expect("runs");
    let r = &run.output.report;
    assert_outcome(
        &run,
        "failed",
        &[
            ("load", TaskState::Completed),
            ("publish", TaskState::Failed),
        ],
    );
    assert!(
        r.stop_detail
            .as_deref()
            .is_some_and(|d| d.contains("config/channel")),
        "{r:#?}"
    );
    assert_eq!(r.plan_version, 1);
    assert_eq!(run.world.effects_of("mail.send"), 0, "publish never ran");
}

/// `delegated_approval.toml` in peer mode: undecided, the run stops with `waiting-approval`
/// and nothing is dropped (also under chaos between the peers); approved, the decision goes
/// down to the sub-task and the table is dropped once; rejected, the task is cancelled. (That
/// the stop waits for the task's other sub-tasks is the next test's.)
#[test]
fn a_delegated_approval_in_peer_mode_waits_and_follows_decisions() {
    let path = variant(
        "delegated_approval.toml",
        "peer",
        &[("workers = 1", "workers = 2\ntopology = \"peer\"")],
    );
    for args in with_and_without_chaos() {
        let seed = args.seed;
        let run = run_file(&path, &args).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_outcome(
            &run,
            "waiting-approval",
            &[("cleanup", TaskState::WaitingApproval)],
        );
        assert!(
            run.world.effects().is_empty(),
            "seed {seed}: nothing dropped"
        );
    }
    let approve = |approve: Approve| RunArgs {
        approve,
        ..RunArgs::default()
    };
    let run = run_file(&path, &approve(Approve::All)).expect("runs");
    assert_outcome(&run, "completed", &[("cleanup", TaskState::Completed)]);
    assert_eq!(run.world.effects_of("db.drop"), 1, "dropped once");
    assert_no_duplicate_effects(&run);
    let run = run_file(&path, &approve(Approve::None)).expect("runs");
    assert_outcome(&run, "cancelled", &[("cleanup", TaskState::Cancelled)]);
    assert!(run.world.effects().is_empty(), "nothing dropped");
}

/// `delegated_approval.toml` with a second sub-task, `mark`, that makes three calls one after
/// another while `purge` waits for a human: in both topologies the run stops with
/// `waiting-approval` only after `mark` is done (before, peer mode stopped at `purge`'s
/// request, and `mark` never made a call).
#[test]
fn a_parked_sub_task_does_not_stop_its_sibling_in_either_topology() {
    let mark = r#"output = "dropped" }]

[[tasks.script.subtasks]]
name = "mark"
capabilities = ["db.mark"]
budget = { steps = 8, tool_calls = 3 }
script = [
  { do = "call", tool = "db.mark", params = { n = 1 }, side-effect = "idempotent-write", output = "ok" },
  { do = "call", tool = "db.mark", params = { n = 2 }, side-effect = "idempotent-write", output = "ok" },
  { do = "call", tool = "db.mark", params = { n = 3 }, side-effect = "idempotent-write", output = "ok" },
]"#;
    for topology in ["star", "peer"] {
        let path = variant(
            "delegated_approval.toml",
            &format!("sibling_{topology}"),
            &[
                ("workers = 1", &format!("workers = 1\ntopology = \"{topology}\"")),
                (
                    "budget = { steps = 20, tool_calls = 4 }",
                    "budget = { steps = 30, tool_calls = 6 }",
                ),
                (
                    "capabilities = [\"db.drop\"]\ncall_timeout_ms",
                    "capabilities = [\"db.drop\", \"db.mark\"]\ncall_timeout_ms",
                ),
                (
                    "capabilities = [\"db.drop\"]\nbudget = { steps = 10, tool_calls = 2 }",
                    "capabilities = [\"db.drop\", \"db.mark\"]\nbudget = { steps = 20, tool_calls = 4 }",
                ),
                ("output = \"dropped\" }]", mark),
            ],
        );
        for args in with_and_without_chaos() {
            let seed = args.seed;
            let run =
                run_file(&path, &args).unwrap_or_else(|e| panic!("{topology}, seed {seed}: {e}"));
            assert_outcome(
                &run,
                "waiting-approval",
                &[("cleanup", TaskState::WaitingApproval)],
            );
            assert_eq!(
                run.world.effects_of("db.mark"),
                3,
                "{topology}, seed {seed}: mark finished before the stop"
            );
            assert_eq!(
                run.world.effects_of("db.drop"),
                0,
                "{topology}: nothing dropped"
            );
            assert_eq!(run.output.report.actions.executed, 3);
        }
    }
}
