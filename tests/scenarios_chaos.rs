//! Every scenario of `examples/plans/` again under message chaos with several seeds: the same
//! stop reason and task states as without chaos, and no action with more than one effect; and
//! a check that every plan file has a scenario.

mod support;

use quorate::coordinator::chaos::ChaosConfig;
use quorate::protocols::TaskState;
use quorate::runner::{Approve, FileRun, RunArgs};

use support::*;
use TaskState::{Cancelled, Completed, Failed, StoppedLimit, WaitingApproval};

// ----- chaos -----

struct Scenario {
    file: &'static str,
    args: fn() -> RunArgs,
    stop: &'static str,
    states: &'static [(&'static str, TaskState)],
    /// Extra invariant checked with and without chaos.
    check: fn(&FileRun),
}

impl Scenario {
    /// `run` (of this scenario, described as `what`) ended as the scenario says: stop reason,
    /// task states, no action with two effects, and the scenario's own check.
    #[track_caller]
    fn assert_held(&self, run: &FileRun, what: &str) {
        let r = &run.output.report;
        assert_eq!(r.stop_reason.as_deref(), Some(self.stop), "{what}: {r:#?}");
        let want: Vec<(String, TaskState)> = self
            .states
            .iter()
            .map(|(id, st)| ((*id).to_string(), *st))
            .collect();
        assert_eq!(states(run), want, "{what}: {r:#?}");
        assert_no_duplicate_effects(run);
        (self.check)(run);
    }
}

fn no_args() -> RunArgs {
    RunArgs::default()
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            file: "all_inputs.toml",
            args: no_args,
            stop: "completed",
            states: &[
                ("gather-web", Completed),
                ("gather-db", Completed),
                ("analyse", Completed),
                ("save", Completed),
            ],
            check: |r| assert_eq!(r.world.effects_of("db.save"), 1),
        },
        Scenario {
            file: "empty_input.toml",
            args: no_args,
            stop: "failed",
            states: &[
                ("search", Completed),
                ("summarise", Failed),
                ("publish", Cancelled),
            ],
            check: |r| assert!(r.world.effects().is_empty()),
        },
        Scenario {
            file: "missing_input.toml",
            args: no_args,
            stop: "failed",
            states: &[
                ("load-customer", Failed),
                ("score", Cancelled),
                ("notify", Cancelled),
            ],
            check: |r| assert!(r.world.effects().is_empty()),
        },
        Scenario {
            file: "circular_reference.toml",
            args: no_args,
            stop: "no-progress",
            states: &[("resolve", Failed), ("report", Cancelled)],
            check: |r| assert_eq!(r.output.report.actions.executed, 5),
        },
        Scenario {
            file: "save_unchanged.toml",
            args: no_args,
            stop: "no-progress",
            states: &[("compute", Completed), ("save", Failed)],
            check: |r| assert_eq!(r.world.effects_of("db.save"), 0),
        },
        Scenario {
            file: "tool_outside_capabilities.toml",
            args: no_args,
            stop: "failed",
            states: &[("audit", Failed)],
            check: |r| assert_eq!(r.output.report.actions.executed, 0),
        },
        Scenario {
            file: "evidence_injection.toml",
            args: no_args,
            stop: "completed",
            states: &[("triage", Completed)],
            // The refused delete is logged (by the supervisor or by the peer).
            check: |r| {
                assert_eq!(r.world.effects_of("db.delete"), 0);
                let refused: Vec<serde_json::Value> = events(r)
                    .iter()
                    .map(event_json)
                    .filter(|e| e["kind"] == "call-rejected")
                    .map(|e| e["tool"].clone())
                    .collect();
                assert_eq!(refused, ["db.delete"]);
            },
        },
        Scenario {
            file: "repeated_action.toml",
            args: no_args,
            stop: "no-progress",
            states: &[("post", Failed)],
            check: |r| assert_eq!(r.output.report.actions.executed, 3),
        },
        Scenario {
            file: "cancel_mid_run.toml",
            args: || cancel_after(2),
            stop: "cancelled",
            states: &[
                ("stage", Completed),
                ("transform", Cancelled),
                ("save", Cancelled),
            ],
            // Duplicated replies are rejected and do not count as steps, so the cancel lands
            // at the same point under chaos.
            check: |r| {
                assert_eq!(r.output.report.actions.executed, 1);
                assert_eq!(r.world.effects().len(), 1);
            },
        },
        Scenario {
            file: "delegated_approval.toml",
            args: no_args,
            stop: "waiting-approval",
            states: &[("cleanup", WaitingApproval)],
            check: |r| assert_eq!(r.world.effects_of("db.drop"), 0, "parked, not run"),
        },
        Scenario {
            file: "delegated_approval.toml",
            args: || approve(Approve::All),
            stop: "completed",
            states: &[("cleanup", Completed)],
            check: |r| {
                assert_eq!(r.world.effects_of("db.drop"), 1);
                assert_eq!(r.output.report.actions.executed, 1);
            },
        },
        Scenario {
            file: "delegated_approval.toml",
            args: || approve(Approve::None),
            stop: "cancelled",
            states: &[("cleanup", Cancelled)],
            check: |r| assert_eq!(r.world.effects_of("db.drop"), 0),
        },
        Scenario {
            file: "approval_required.toml",
            args: no_args,
            stop: "waiting-approval",
            states: &[("check", Completed), ("refund", WaitingApproval)],
            check: |r| assert_eq!(r.world.effects_of("payments.refund"), 0),
        },
        Scenario {
            file: "approval_required.toml",
            args: || approve(Approve::All),
            stop: "completed",
            states: &[("check", Completed), ("refund", Completed)],
            check: |r| assert_eq!(r.world.effects_of("payments.refund"), 1),
        },
        Scenario {
            file: "approval_required.toml",
            args: || approve(Approve::None),
            stop: "cancelled",
            states: &[("check", Completed), ("refund", Cancelled)],
            check: |r| assert_eq!(r.world.effects_of("payments.refund"), 0),
        },
        Scenario {
            file: "timeout_after_commit.toml",
            args: no_args,
            stop: "completed",
            states: &[("save", Completed)],
            check: |r| {
                let a = r.output.report.actions;
                assert_eq!((a.unknown, a.recovered), (1, 1));
                assert_eq!(r.world.effects().len(), 1);
            },
        },
        Scenario {
            file: "late_reply_after_cancel.toml",
            args: || cancel_after(3),
            stop: "cancelled",
            states: &[("index", Completed), ("crawl", Cancelled)],
            // Under chaos either reply may come first (the first final reply after the cancel
            // acknowledges it) and the other may be delayed past the end of the run: only one of
            // the two is sure to be counted, as `acknowledged` or as `rejected_late`.
            check: |r| {
                let m = r.output.report.messages;
                assert!(m.acknowledged + m.rejected_late >= 1, "{m:?}");
                assert!(!results(r).contains_key("crawl"));
            },
        },
        Scenario {
            file: "guarded_write.toml",
            args: no_args,
            stop: "completed",
            states: &[("load", Completed), ("reprice", Completed)],
            // The precondition holds, so the write runs once (the worker tests show it refused
            // when it stops holding).
            check: |r| {
                assert_eq!(r.world.effects_of("prices.update"), 1);
                let a = r.output.report.actions;
                assert_eq!((a.executed, a.rejected), (2, 0), "the read and the write");
            },
        },
        Scenario {
            file: "duplicate_reply.toml",
            args: no_args,
            stop: "completed",
            states: &[("count", Completed), ("report", Completed)],
            // Chaos can duplicate more replies; the scripted duplicate is always there.
            check: |r| assert!(r.output.report.messages.rejected_duplicate >= 1),
        },
        Scenario {
            file: "budget_exhausted.toml",
            args: no_args,
            stop: "stopped-limit",
            states: &[
                ("fetch-a", Completed),
                ("fetch-b", Completed),
                ("enrich", StoppedLimit),
            ],
            check: |r| {
                assert_eq!(r.output.report.tasks[2].spent.tool_calls, 2);
                assert_eq!(results(r).len(), 2);
            },
        },
        Scenario {
            file: "budget_ask.toml",
            args: no_args,
            stop: "waiting-approval",
            states: &[
                ("fetch", Completed),
                ("notify", Completed),
                ("enrich", WaitingApproval),
                ("summary", TaskState::Pending),
            ],
            check: |r| {
                let ask = r.output.report.tasks[2]
                    .top_up
                    .as_deref()
                    .expect("a request");
                assert_eq!(ask.component, quorate::protocols::Component::Steps);
                assert_eq!(ask.needed, 1);
                assert_eq!(ask.spent.steps, 3);
                assert_eq!(r.world.effects_of("geo.lookup"), 3);
            },
        },
        Scenario {
            file: "budget_ask.toml",
            args: || top_ups("enrich", Some(quorate::protocols::Budget::steps(5))),
            stop: "completed",
            states: &[
                ("fetch", Completed),
                ("notify", Completed),
                ("enrich", Completed),
                ("summary", Completed),
            ],
            check: |r| {
                let report = &r.output.report;
                assert_eq!(report.tasks[2].granted.steps, 8, "3 and the top-up of 5");
                assert!(report.budget.granted.fits_within(&report.budget.limit));
                assert_eq!(r.world.effects_of("geo.lookup"), 4, "none repeated");
            },
        },
        Scenario {
            file: "budget_ask.toml",
            args: || top_ups("enrich", None),
            stop: "stopped-limit",
            states: &[
                ("fetch", Completed),
                ("notify", Completed),
                ("enrich", StoppedLimit),
                ("summary", Cancelled),
            ],
            check: |r| assert_eq!(r.world.effects_of("geo.lookup"), 3),
        },
    ]
}

/// Answers the top-up request of `task`: a grant of `grant`, or a rejection.
fn top_ups(task: &str, grant: Option<quorate::protocols::Budget>) -> RunArgs {
    use quorate::coordinator::TopUp;
    let answer = grant.map_or(TopUp::Reject, TopUp::Grant);
    RunArgs {
        top_ups: quorate::coordinator::TopUpPolicy(
            [(task.to_string(), answer)].into_iter().collect(),
        ),
        ..RunArgs::default()
    }
}

#[test]
fn every_plan_file_has_a_scenario() {
    let covered: Vec<&str> = scenarios().iter().map(|s| s.file).collect();
    for entry in std::fs::read_dir(plan("")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        // These have their own test files (tests/replan.rs, tests/delegation.rs), which also run
        // them under chaos.
        let elsewhere = [
            "precondition_replan.toml",
            "delegation.toml",
            "delegation_exceeds_slice.toml",
        ];
        // Plans whose agents are models need a model server: the model tier runs them
        // (tests/model_tier.rs, cargo feature `llm`).
        let model = std::fs::read_to_string(plan(&name))
            .unwrap_or_default()
            .contains("[models.");
        if name.ends_with(".toml") && !elsewhere.contains(&name.as_str()) && !model {
            assert!(covered.contains(&name.as_str()), "{name} is not covered");
        }
    }
}

#[test]
fn every_scenario_holds_under_chaos() {
    let chaos: ChaosConfig = CHAOS.parse().unwrap();
    let list = scenarios();
    let mut disturbed = 0u64;
    // All runs of one seed in parallel threads (each run has its own actix system); the runs
    // spend most of their time waiting on timers.
    for seed in 1..=3u64 {
        std::thread::scope(|s| {
            let handles: Vec<_> = list
                .iter()
                .map(|sc| {
                    s.spawn(move || {
                        let mut args = (sc.args)();
                        args.chaos = Some(chaos);
                        args.seed = seed;
                        (sc, run_with(sc.file, &args))
                    })
                })
                .collect();
            for h in handles {
                let (sc, run) = h.join().expect("a scenario panicked");
                let what = format!("{} (seed {seed})", sc.file);
                sc.assert_held(&run, &what);
                let c = run.output.chaos;
                assert!(c.messages > 0, "{what}: chaos was not in the path");
                disturbed += c.duplicated + c.dropped + c.reordered;
            }
        });
    }
    assert!(disturbed > 10, "chaos did something: {disturbed}");
}

#[test]
fn every_scenario_holds_without_chaos() {
    for sc in scenarios() {
        let run = run_with(sc.file, &(sc.args)());
        sc.assert_held(&run, sc.file);
    }
}

/// Peer mode keeps the same invariants: every scenario ends with the same stop reason, task
/// states and checks when peers run it instead of a supervisor (the replan scenario, which has
/// its own file, runs in peer mode there: `tests/replan.rs`). Left out: the two that cancel
/// after K steps: each peer counts its own steps, so where the cancel lands depends on how the
/// peers' messages interleave (another peer may start the next task before the cancel reaches
/// it); and the budget that asks (no supervisor keeps a peer run's top-up request: the task
/// stops at its limit, as `quorate check` warns). `tests/scenarios_peer.rs` pins what peers do
/// with each.
#[test]
fn every_scenario_holds_in_peer_mode() {
    let left_out = [
        "cancel_mid_run.toml",
        "late_reply_after_cancel.toml",
        "budget_ask.toml",
    ];
    for sc in scenarios()
        .into_iter()
        .filter(|sc| !left_out.contains(&sc.file))
    {
        let path = peer_variant(sc.file);
        let run = quorate::runner::run_file(&path, &(sc.args)()).expect("runs");
        sc.assert_held(&run, &format!("{} in peer mode", sc.file));
    }
}
