//! The README's plan file in brief, run as the README says: `check` accepts it, `run` stops
//! waiting for approval (exit 7), and `run --approve save` completes it with the write recovered
//! after its lost answer (one effect). The Rust block of the README is a doctest of the crate.

mod support;

use std::process::{Command, Output};

use support::temp_path;

/// The first ```toml block of the README.
fn readme_plan() -> String {
    let readme = include_str!("../README.md");
    let start = readme
        .find("```toml\n")
        .expect("the README has a toml block")
        + "```toml\n".len();
    let len = readme[start..].find("```").expect("the toml block ends");
    readme[start..start + len].to_string()
}

fn quorate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn the_readme_plan_checks_waits_for_approval_and_completes_once_approved() {
    let path = temp_path("readme_plan.toml");
    std::fs::write(&path, readme_plan()).expect("plan written");
    let path = path.to_str().expect("utf-8 path");

    let check = quorate(&["check", path]);
    assert!(
        check.status.success(),
        "check refused the README's plan: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    let waiting = quorate(&["run", path, "--json"]);
    assert_eq!(waiting.status.code(), Some(7));
    assert_eq!(report(&waiting)["stop_reason"], "waiting-approval");

    let approved = quorate(&["run", path, "--json", "--approve", "save"]);
    assert_eq!(approved.status.code(), Some(0));
    let report = report(&approved);
    assert_eq!(report["stop_reason"], "completed");
    assert_eq!(report["actions"]["unknown"], 1, "the lost answer: {report}");
    assert_eq!(
        report["actions"]["recovered"], 1,
        "recovered by query: {report}"
    );
    assert_eq!(report["actions"]["duplicate_effects"], 0);
}
