//! End-to-end scenarios: every plan in `examples/plans/` run through `quorate::runner::run_file`
//! (supervisor, workers, scripted agents and tools on actix), with its stop reason, task states
//! and counters asserted; then every scenario again under message chaos with several seeds.
//!
//! The expected values come from each plan's leading comment, which explains why.

mod support;

use std::process::Command;

use quorate::plan_file::{PlanFile, PlanFileError};
use quorate::protocols::{Budget, PlanError, RunId, TaskId, TaskState};
use quorate::runner::{run_file, Approve, RunArgs};
use quorate::state::{AccountId, BudgetLedger, BudgetLedgerError, LedgerError, MemoryStore};

use support::*;
use TaskState::{Cancelled, Completed, Failed, StoppedLimit, WaitingApproval};

#[test]
fn all_inputs_present_completes() {
    let run = run("all_inputs.toml");
    assert_outcome(
        &run,
        "completed",
        &[
            ("gather-web", Completed),
            ("gather-db", Completed),
            ("analyse", Completed),
            ("save", Completed),
        ],
    );
    let r = &run.output.report;
    assert_eq!(r.actions.executed, 3, "two reads and one save");
    assert_eq!(r.actions.rejected, 0);
    assert_eq!(run.world.effects_of("db.save"), 1);
    assert_eq!(run.world.effects().len(), 1, "reads commit nothing");
    assert_eq!(results(&run).len(), 4);
    assert_eq!(results(&run)["analyse"]["agree"], serde_json::json!(true));
    assert_no_duplicate_effects(&run);
}

#[test]
fn empty_input_fails_the_dependent_before_it_runs() {
    let run = run("empty_input.toml");
    assert_outcome(
        &run,
        "failed",
        &[
            ("search", Completed),
            ("summarise", Failed),
            ("publish", Cancelled),
        ],
    );
    let r = &run.output.report;
    let detail = r.stop_detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("summarise") && detail.contains("precondition does not hold"),
        "{detail}"
    );
    assert!(detail.contains("search"), "names the empty input: {detail}");
    let n = attempts(&run);
    assert_eq!((n["summarise"], n["publish"]), (0, 0), "never dispatched");
    assert_eq!(r.actions.executed, 1);
    assert!(run.world.effects().is_empty());
    assert_eq!(results(&run)["search"], serde_json::json!([]), "kept");
}

#[test]
fn missing_input_fails_with_the_first_failing_observation() {
    let run = run("missing_input.toml");
    assert_outcome(
        &run,
        "failed",
        &[
            ("load-customer", Failed),
            ("score", Cancelled),
            ("notify", Cancelled),
        ],
    );
    let r = &run.output.report;
    let detail = r.stop_detail.as_deref().unwrap_or_default();
    assert!(
        detail.starts_with("failed at load-customer:")
            && detail.contains("record customers/7 not found"),
        "{detail}"
    );
    assert_eq!(r.actions.executed, 1);
    assert_eq!(run.world.effects_of("mail.send"), 0);
    assert!(run.world.effects().is_empty());
    let n = attempts(&run);
    assert_eq!((n["score"], n["notify"]), (0, 0));
}

#[test]
fn circular_reference_is_no_progress() {
    let run = run("circular_reference.toml");
    assert_outcome(
        &run,
        "no-progress",
        &[("resolve", Failed), ("report", Cancelled)],
    );
    let r = &run.output.report;
    assert_eq!(r.stop_detail.as_deref(), Some("no-progress at resolve"));
    // A, B, A, B, A: the third identical lookup of A stops it.
    assert_eq!(r.actions.executed, 5);
    assert_eq!(r.tasks[0].spent.tool_calls, 5);
    assert!(run.world.effects().is_empty());
    assert!(!results(&run).contains_key("resolve"), "never answered");
}

#[test]
fn cyclic_plan_is_refused_with_exit_code_2() {
    let path = temp_path("cyclic.toml");
    std::fs::write(
        &path,
        r#"
[run]
budget = { steps = 20 }
[[tasks]]
id = "a"
deps = ["b"]
budget = { steps = 5 }
script = [{ do = "answer", value = 1 }]
[[tasks]]
id = "b"
deps = ["a"]
budget = { steps = 5 }
script = [{ do = "answer", value = 2 }]
"#,
    )
    .unwrap();
    let file = PlanFile::load(&path).expect("the file parses");
    match file.compile(&path) {
        Err(PlanFileError::Plan {
            source: PlanError::Cycle { .. },
            ..
        }) => {}
        other => panic!("expected a cycle refusal, got {other:?}"),
    }
    assert!(run_file(&path, &RunArgs::default()).is_err());
    for cmd in ["check", "run"] {
        let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
            .arg(cmd)
            .arg(&path)
            .output()
            .expect("run the binary");
        assert_eq!(out.status.code(), Some(2), "quorate {cmd}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cycl"), "quorate {cmd}: {stderr}");
    }
}

#[test]
fn save_unchanged_is_detected_and_no_progress() {
    let run = run("save_unchanged.toml");
    assert_outcome(
        &run,
        "no-progress",
        &[("compute", Completed), ("save", Failed)],
    );
    let r = &run.output.report;
    assert_eq!(r.actions.executed, 3, "three identical unchanged saves");
    assert_eq!(
        run.world.effects_of("db.save"),
        0,
        "the store never changed"
    );
    assert!(!results(&run).contains_key("save"));
    assert_no_duplicate_effects(&run);
}

#[test]
fn tool_outside_capabilities_is_rejected_and_nothing_runs() {
    let run = run("tool_outside_capabilities.toml");
    assert_outcome(&run, "failed", &[("audit", Failed)]);
    let r = &run.output.report;
    let detail = r.stop_detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("db.save") && detail.contains("capability"),
        "{detail}"
    );
    assert_eq!(r.actions.executed, 0);
    assert_eq!(r.actions.rejected, 1);
    assert!(run.world.effects().is_empty());
    assert_eq!(r.tasks[0].spent.tool_calls, 0);
}

#[test]
fn evidence_text_cannot_add_a_tool_call() {
    let run = run("evidence_injection.toml");
    assert_outcome(&run, "completed", &[("triage", Completed)]);
    let r = &run.output.report;
    assert_eq!(r.actions.executed, 1, "only the read ran");
    assert_eq!(r.actions.rejected, 1, "the delete was refused at the gate");
    assert_eq!(run.world.effects_of("db.delete"), 0);
    assert!(run.world.effects().is_empty());
    assert_eq!(r.tasks[0].spent.tool_calls, 1);
    assert_eq!(results(&run)["triage"]["ticket"], serde_json::json!(881));
    // The refusal is logged: a call-rejected event names the tool.
    let events = run
        .output
        .log
        .read_now(r.run_id, quorate::state::Seq(0), usize::MAX);
    let rejected: Vec<serde_json::Value> = events
        .iter()
        .map(|(_, e)| serde_json::to_value(e).unwrap())
        .filter(|e| e["kind"] == "call-rejected")
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0]["tool"], "db.delete");
    assert_eq!(rejected[0]["task"], "triage");
}

#[test]
fn the_same_action_repeated_is_no_progress() {
    let run = run("repeated_action.toml");
    assert_outcome(&run, "no-progress", &[("post", Failed)]);
    let r = &run.output.report;
    assert_eq!(r.actions.executed, 3, "the 4th and 5th retries never ran");
    assert_eq!(r.tasks[0].spent.tool_calls, 3);
    assert!(run.world.effects().is_empty());
}

#[test]
fn cancel_mid_run_stops_everything_and_no_call_starts_after_it() {
    // Without a cancel the chain completes: the cancel is what stops it.
    let full = run("cancel_mid_run.toml");
    assert_outcome(
        &full,
        "completed",
        &[
            ("stage", Completed),
            ("transform", Completed),
            ("save", Completed),
        ],
    );
    assert_eq!(full.world.effects().len(), 3);

    let run = run_with("cancel_mid_run.toml", &cancel_after(2));
    assert_outcome(
        &run,
        "cancelled",
        &[
            ("stage", Completed),
            ("transform", Cancelled),
            ("save", Cancelled),
        ],
    );
    let n = attempts(&run);
    assert_eq!((n["stage"], n["transform"], n["save"]), (1, 0, 0));
    assert_eq!(run.output.report.actions.executed, 1);
    let effects = run.world.effects();
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0].tool, "db.stage");
    assert_eq!(run.world.effects_of("db.transform"), 0);
    assert_eq!(run.world.effects_of("db.save"), 0);
    // Nothing is dispatched after the cancel request.
    let log = events(&run);
    let cancel = log
        .iter()
        .position(|e| event_json(e)["kind"] == "cancel-requested")
        .expect("a cancel-requested event");
    assert!(
        log[cancel..]
            .iter()
            .all(|e| event_json(e)["kind"] != "dispatched"),
        "{log:#?}"
    );
    assert_eq!(
        event_json(log.last().unwrap())["stop_reason"],
        serde_json::json!("cancelled")
    );
}

#[test]
fn approval_waits_then_resumes_on_approve_and_cancels_on_reject() {
    let wait = run("approval_required.toml");
    assert_outcome(
        &wait,
        "waiting-approval",
        &[("check", Completed), ("refund", WaitingApproval)],
    );
    assert_eq!(
        wait.output.report.stop_detail.as_deref(),
        Some("waiting-approval at refund")
    );
    assert_eq!(
        wait.world.effects_of("payments.refund"),
        0,
        "parked, not run"
    );
    assert_eq!(wait.output.report.actions.executed, 1, "only the read");

    for yes in [
        Approve::All,
        Approve::Tasks(["refund".to_string()].into_iter().collect()),
    ] {
        let run = run_with("approval_required.toml", &approve(yes));
        assert_outcome(
            &run,
            "completed",
            &[("check", Completed), ("refund", Completed)],
        );
        assert_eq!(run.world.effects_of("payments.refund"), 1);
        assert_eq!(run.output.report.actions.executed, 2);
        assert_no_duplicate_effects(&run);
    }

    for no in [
        Approve::None,
        Approve::Tasks(["check".to_string()].into_iter().collect()),
    ] {
        let run = run_with("approval_required.toml", &approve(no));
        assert_outcome(
            &run,
            "cancelled",
            &[("check", Completed), ("refund", Cancelled)],
        );
        assert_eq!(run.world.effects_of("payments.refund"), 0);
        assert_eq!(run.output.report.actions.executed, 1);
    }
}

#[test]
fn timeout_after_commit_is_recovered_with_exactly_one_effect() {
    let run = run("timeout_after_commit.toml");
    assert_outcome(&run, "completed", &[("save", Completed)]);
    let a = run.output.report.actions;
    assert_eq!(
        (a.executed, a.unknown, a.recovered, a.duplicate_effects),
        (1, 1, 1, 0),
        "{a:?}"
    );
    let effects = run.world.effects();
    assert_eq!(effects.len(), 1);
    assert_eq!(run.world.effects_for(&effects[0].action), 1);
    assert_eq!(run.output.report.tasks[0].attempts, 1);
}

#[test]
fn late_reply_after_cancel_is_rejected_and_counted() {
    let run = run_with("late_reply_after_cancel.toml", &cancel_after(3));
    assert_outcome(
        &run,
        "cancelled",
        &[("index", Completed), ("crawl", Cancelled)],
    );
    let m = run.output.report.messages;
    assert_eq!(
        (m.rejected_late, m.acknowledged),
        (1, 1),
        "the late answer is rejected; the cancel's acknowledgement is not a rejection: {m:?}"
    );
    assert_eq!(
        (
            m.rejected_duplicate,
            m.rejected_stale,
            m.rejected_unauthorized
        ),
        (0, 0, 0)
    );
    assert!(
        !results(&run).contains_key("crawl"),
        "late answer not committed"
    );
    assert!(run.world.effects().is_empty());
    // crawl's fetch ran before the cancel; its count comes with the acknowledgement.
    assert_eq!(run.output.report.actions.executed, 1);
    let rejected: Vec<_> = events(&run)
        .iter()
        .map(event_json)
        .filter(|e| {
            e["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("rejected-"))
        })
        .collect();
    assert_eq!(rejected.len(), 1);
    assert!(rejected
        .iter()
        .all(|e| e["kind"] == "rejected-late" && e["task"] == "crawl"));
}

#[test]
fn duplicate_reply_is_rejected_once() {
    let run = run("duplicate_reply.toml");
    assert_outcome(
        &run,
        "completed",
        &[("count", Completed), ("report", Completed)],
    );
    let r = &run.output.report;
    assert_eq!(r.messages.rejected_duplicate, 1, "{:?}", r.messages);
    assert_eq!(
        (
            r.messages.rejected_late,
            r.messages.rejected_stale,
            r.messages.rejected_unauthorized
        ),
        (0, 0, 0)
    );
    assert_eq!(
        r.messages.delivered, 3,
        "two copies for count, one for report"
    );
    assert_eq!(r.actions.executed, 1);
    assert_eq!(attempts(&run)["count"], 1);
}

#[test]
fn budget_exhausted_stops_at_the_limit_and_keeps_completed_results() {
    let run = run("budget_exhausted.toml");
    assert_outcome(
        &run,
        "stopped-limit",
        &[
            ("fetch-a", Completed),
            ("fetch-b", Completed),
            ("enrich", StoppedLimit),
        ],
    );
    let r = &run.output.report;
    assert_eq!(r.stop_detail.as_deref(), Some("stopped-limit (tool_calls)"));
    assert_eq!(r.actions.executed, 4);
    let enrich = &r.tasks[2];
    assert_eq!(enrich.spent.tool_calls, 2);
    assert!(enrich.spent.fits_within(&enrich.granted), "{enrich:?}");
    assert!(r.budget.spent.fits_within(&r.budget.limit));
    let kept = results(&run);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(kept["fetch-a"]["city"], "Lyon");
    assert_eq!(kept["fetch-b"]["city"], "Porto");
}

/// Two-level delegation refused at the ledger: root -> child (with a coordination reserve) ->
/// grandchildren whose slices would exceed the child's delegable part: the ledger rule under
/// delegation (the plan-file path, `delegation_exceeds_slice.toml`, is run in
/// `tests/delegation.rs`).
#[test]
fn two_level_delegation_beyond_the_parent_slice_is_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let ledger = BudgetLedger::new(MemoryStore::new(), RunId::from_u128(1));
        ledger
            .open_root(Budget::new(20, 10, 0, 0), Budget::new(2, 0, 0, 0))
            .await
            .unwrap();
        let child = AccountId::Task(TaskId::from_u128(1));
        ledger
            .allocate_with_reserve(
                AccountId::Root,
                child,
                Budget::new(12, 6, 0, 0),
                Budget::new(2, 0, 0, 0),
            )
            .await
            .unwrap();
        // The child may delegate 10 steps and 6 tool calls.
        let g1 = AccountId::Task(TaskId::from_u128(2));
        ledger
            .allocate(child, g1, Budget::new(6, 3, 0, 0))
            .await
            .unwrap();
        let g2 = AccountId::Task(TaskId::from_u128(3));
        match ledger.allocate(child, g2, Budget::new(5, 2, 0, 0)).await {
            Err(BudgetLedgerError::Refused(LedgerError::Insufficient {
                account,
                requested: 5,
                available: 4,
                ..
            })) => assert_eq!(account, child),
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Nothing was granted by the refusal: a slice that fits still does.
        ledger
            .allocate(child, g2, Budget::new(4, 3, 0, 0))
            .await
            .unwrap();
        let g3 = AccountId::Task(TaskId::from_u128(4));
        assert!(ledger
            .allocate(child, g3, Budget::new(0, 1, 0, 0))
            .await
            .is_err());
    });
}

// ----- trace -----

#[test]
fn trace_lines_are_ordered_and_name_rejections() {
    let path = temp_path("trace.jsonl");
    let run = run_with(
        "duplicate_reply.toml",
        &RunArgs {
            trace: Some(path.clone()),
            ..RunArgs::default()
        },
    );
    assert_eq!(run.output.report.stop_reason.as_deref(), Some("completed"));
    let lines = support::trace_lines(&path);
    assert_eq!(lines.len() as u64, run.output.trace_lines);
    assert!(lines.len() > 5);
    let run_id = run.output.report.run_id.to_string();
    let mut last: Option<u64> = None;
    for l in &lines {
        let seq = l["seq"].as_u64().expect("seq");
        assert!(last.is_none_or(|p| seq > p), "seq not increasing: {l}");
        last = Some(seq);
        assert_eq!(l["run_id"], serde_json::json!(run_id));
        assert!(l["task"].is_string() || l["task"].is_null(), "{l}");
        assert!(l["kind"].is_string(), "{l}");
        if l["kind"] == "transition" {
            assert!(l["from"].is_string() && l["to"].is_string(), "{l}");
            assert!(l["task"].is_string(), "{l}");
        }
    }
    assert_eq!(lines[0]["kind"], "run-started");
    assert_eq!(lines.last().unwrap()["kind"], "run-stopped");
    let rejected: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("rejected-"))
        })
        .collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0]["kind"], "rejected-duplicate");
    assert_eq!(rejected[0]["task"], "count");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
