//! What the CLI writes on stderr: the plan's warnings (`check` and `run`), and log lines
//! without colour codes when stderr is not a terminal.

mod support;

use support::{plan, quorate, quorate_command, temp_path};

/// A plan whose task `quiet` has no step, and whose task `audit` calls a tool it lacks and,
/// with a budget of 0 tool calls, one it holds.
const WARNED: &str = r#"
[run]
budget = { steps = 10, tool_calls = 2 }
capabilities = ["db.read", "db.save"]
[[tasks]]
id = "quiet"
budget = { steps = 0 }
[[tasks]]
id = "audit"
capabilities = ["db.read"]
budget = { steps = 4, tool_calls = 0 }
script = [
  { do = "call", tool = "db.save" },
  { do = "call", tool = "db.read" },
]
"#;

const WARNINGS: [&str; 3] = [
    "task quiet has 0 steps in its budget: it cannot take a single step",
    r#"task audit: script step 0 calls db.save, a capability the task lacks (it has ["db.read"]): the gate refuses the call"#,
    "task audit: script step 1 calls db.read, but the task's budget has 0 tool calls: the call is refused",
];

#[test]
fn check_warns_about_tasks_that_cannot_work_and_denies_them_on_request() {
    let path = temp_path("warned.toml");
    std::fs::write(&path, WARNED).unwrap();
    let path = path.to_str().unwrap();

    let out = quorate(&["check", path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "warnings alone pass: {stderr}");
    for w in WARNINGS {
        assert!(
            stderr.contains(&format!("quorate: warning: {path}: {w}")),
            "{w}\n{stderr}"
        );
    }
    assert_eq!(stderr.lines().count(), 3, "{stderr}");
    assert!(
        stdout.starts_with(&format!("{path}: 2 tasks, valid, 3 warnings")),
        "{stdout}"
    );

    let denied = quorate(&["check", path, "--deny-warnings"]);
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert_eq!(denied.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("warnings denied"), "{stderr}");

    // A plan without warnings says nothing on stderr and passes --deny-warnings.
    let clean = quorate(&[
        "check",
        plan("all_inputs.toml").to_str().unwrap(),
        "--deny-warnings",
    ]);
    assert_eq!(clean.status.code(), Some(0));
    assert!(
        clean.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
}

#[test]
fn run_prints_the_same_warnings_before_running() {
    let path = plan("tool_outside_capabilities.toml");
    let path = path.to_str().unwrap();
    let out = quorate(&["run", path, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "quorate: warning: {path}: task audit: script step 0 calls db.save, a capability the task lacks"
        )),
        "{stderr}"
    );
    // The run still runs (the plan shows the refusal on purpose).
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(report["stop_reason"], "failed");
}

#[test]
fn log_lines_have_no_colour_codes_when_stderr_is_not_a_terminal() {
    let out = quorate_command()
        .args(["run", plan("all_inputs.toml").to_str().unwrap()])
        .env("RUST_LOG", "debug")
        .env_remove("NO_COLOR")
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("INFO"), "log lines are written: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no escape codes: {stderr}");
}

#[test]
fn check_warns_that_a_budget_that_asks_needs_a_supervisor() {
    let text = std::fs::read_to_string(plan("budget_ask.toml"))
        .unwrap()
        .replace("[run]\n", "[run]\ntopology = \"peer\"\n");
    let path = temp_path("ask_peer.toml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let out = quorate(&["check", path]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "quorate: warning: {path}: task enrich: on_exhausted = \"ask\" needs topology star"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The star plan as shipped has no warning.
    let star = quorate(&["check", plan("budget_ask.toml").to_str().unwrap()]);
    assert!(
        star.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&star.stderr)
    );
}
