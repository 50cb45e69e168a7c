//! `quorate run`'s exit codes, one per stop reason and 2 for bad input, as docs/cli.md's table
//! gives them, checked on the binary (code 8, a runtime that fails without a report, has no
//! plan file that causes it; a report without a stop reason is checked in the supervisor core's
//! tests).

mod support;

use std::path::PathBuf;
use support::{plan, quorate, temp_path};

/// Runs `plan` with `flags` and `--json`; the exit code and the report's stop reason.
fn run(plan: &std::path::Path, flags: &[&str]) -> (i32, String) {
    let path = plan.to_str().expect("utf-8 path");
    let mut args = vec!["run", path, "--json"];
    args.extend_from_slice(flags);
    let out = quorate(&args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{path} {flags:?}: no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let reason = report["stop_reason"].as_str().expect("a stop reason");
    (out.status.code().expect("an exit code"), reason.to_string())
}

/// A plan file written for one test, at a fresh path.
fn temp_plan(name: &str, text: &str) -> PathBuf {
    let path = temp_path(&format!("{name}.toml"));
    std::fs::write(&path, text).expect("temp plan written");
    path
}

#[test]
fn each_stop_reason_has_its_own_exit_code() {
    // A call that never answers within its 5 s timeout, under a 50 ms deadline.
    let slow = temp_plan(
        "deadline",
        r#"
[run]
budget = { steps = 10, tool_calls = 4 }
capabilities = ["slow.call"]
deadline_ms = 50
call_timeout_ms = 5000
attempt_timeout_ms = 10000
[[tasks]]
id = "slow"
capabilities = ["slow.call"]
budget = { steps = 5, tool_calls = 2 }
script = [ { do = "call", tool = "slow.call", outcome = "timeout-before-commit" } ]
"#,
    );
    let cases: [(PathBuf, &[&str], i32, &str); 7] = [
        (plan("all_inputs.toml"), &[], 0, "completed"),
        (plan("missing_input.toml"), &[], 1, "failed"),
        (plan("budget_exhausted.toml"), &[], 3, "stopped-limit"),
        (slow, &[], 4, "deadline"),
        (plan("repeated_action.toml"), &[], 5, "no-progress"),
        (
            plan("approval_required.toml"),
            &["--approve", "none"],
            6,
            "cancelled",
        ),
        (plan("approval_required.toml"), &[], 7, "waiting-approval"),
    ];
    for (path, flags, code, reason) in cases {
        let got = run(&path, flags);
        assert_eq!(
            got,
            (code, reason.to_string()),
            "{} {flags:?}",
            path.display()
        );
    }
}

#[test]
fn bad_input_is_exit_code_2_with_a_message_naming_it() {
    let approval = plan("approval_required.toml");
    let approval = approval.to_str().unwrap();
    let no_workers = temp_plan(
        "workers",
        "[run]\nworkers = 0\nbudget = { steps = 4 }\n[[tasks]]\nid = \"a\"\nbudget = { steps = 2 }\n",
    );
    let no_attempts = temp_plan(
        "attempts",
        "[run]\nmax_attempts = 0\nbudget = { steps = 4 }\n[[tasks]]\nid = \"a\"\nbudget = { steps = 2 }\n",
    );
    let early_attempt = temp_plan(
        "attempt",
        "[run]\ncall_timeout_ms = 100\nattempt_timeout_ms = 50\nbudget = { steps = 4 }\n[[tasks]]\nid = \"a\"\nbudget = { steps = 2 }\n",
    );
    let huge_tokens = temp_plan(
        "tokens",
        "[run]\nbudget = { steps = 4, tokens = 18446744073709551615 }\n[[tasks]]\nid = \"a\"\nbudget = { steps = 2 }\n",
    );
    let deep_params = temp_plan(
        "deep",
        &format!(
            "[run]\nbudget = {{ steps = 4, tool_calls = 1 }}\ncapabilities = [\"db.read\"]\n[[tasks]]\nid = \"a\"\ncapabilities = [\"db.read\"]\nbudget = {{ steps = 2, tool_calls = 1 }}\nscript = [ {{ do = \"call\", tool = \"db.read\", params = {} }} ]\n",
            "{ a = ".repeat(40) + "1" + &" }".repeat(40)
        ),
    );
    let cases: [(Vec<&str>, &str); 12] = [
        (vec!["run", "no/such/plan.toml"], "no/such/plan.toml"),
        (
            vec!["run", approval, "--chaos", "dup=0.1,dup=0.9"],
            "chaos key \"dup\" is given more than once",
        ),
        (
            vec!["run", approval, "--approve", "refnud"],
            "--approve names \"refnud\", which is not a task",
        ),
        (
            vec!["run", approval, "--approve", "All"],
            "(tasks: check, refund)",
        ),
        (vec!["run", approval, "--approve", "a,,b"], "empty task id"),
        (
            vec!["run", approval, "--approve", "none,refund"],
            "all or none, or task ids, not both",
        ),
        (
            vec!["run", no_workers.to_str().unwrap()],
            "run.workers is 0: a run needs at least one worker",
        ),
        (
            vec!["run", no_attempts.to_str().unwrap()],
            "run.max_attempts is 0: a task needs at least one attempt",
        ),
        (
            vec!["run", early_attempt.to_str().unwrap()],
            "run.attempt_timeout_ms is 50: it must be longer than run.call_timeout_ms (100)",
        ),
        (
            vec!["check", early_attempt.to_str().unwrap()],
            "run.attempt_timeout_ms is 50: it must be longer than run.call_timeout_ms (100)",
        ),
        (
            vec!["run", huge_tokens.to_str().unwrap()],
            "line 2: tokens = 18446744073709551615 is out of range: plan files take integers up to 2^63-1",
        ),
        (
            vec!["run", deep_params.to_str().unwrap()],
            "task a: script[0].params: envelope nests 33 levels deep; the limit is 32",
        ),
    ];
    for (args, message) in cases {
        let out = quorate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: no report for bad input");
    }
}

#[test]
fn a_cancel_that_finds_every_task_ended_is_no_cancellation() {
    // stage -> transform -> save: six steps (a dispatch and a reply each). A cancel due at step
    // 5 (save's dispatch) or 6 (its reply) is checked after save's reply: nothing is left to
    // cancel, so the run completes. At 4 it lands before save is dispatched.
    let path = plan("cancel_mid_run.toml");
    for (k, code, reason) in [
        ("4", 6, "cancelled"),
        ("5", 0, "completed"),
        ("6", 0, "completed"),
    ] {
        let got = run(&path, &["--cancel-after-steps", k]);
        assert_eq!(got, (code, reason.to_string()), "--cancel-after-steps {k}");
    }
}

/// A binary built without the cargo feature `etcd` refuses an etcd store as bad input, naming
/// the feature, for every command that takes `--store`, and creates nothing.
#[cfg(not(feature = "etcd"))]
#[test]
fn an_etcd_store_without_the_feature_is_exit_2_naming_it() {
    let url = "etcd://127.0.0.1:2379/quorate";
    let p = plan("all_inputs.toml");
    let plan_arg = p.to_str().expect("utf-8");
    for args in [
        vec!["run", plan_arg, "--store", url],
        vec!["runs", "--store", url],
        vec![
            "resume",
            "01a234e9-77ce-7659-886a-84382c1bbf1c",
            "--store",
            url,
        ],
        vec![
            "show",
            "01a234e9-77ce-7659-886a-84382c1bbf1c",
            "--store",
            url,
        ],
        vec!["bench", "dag", "--store", url],
    ] {
        let out = quorate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("built without etcd support") && stderr.contains("--features etcd"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing run");
    }
}
