//! The CLI's output to a reader that went away (`quorate run plan.toml | head -1`): no panic on
//! the broken pipe, the command's own exit code, and the files it was asked to write.

mod support;

use std::process::{Command, Stdio};

/// Runs the binary with `args`, its stdout closed before it writes anything.
fn with_stdout_closed(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    // Close the reading end before the command prints anything: every write then fails.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("the binary ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    out
}

#[test]
fn a_closed_stdout_keeps_the_exit_code() {
    let ok = support::plan("all_inputs.toml");
    let out = with_stdout_closed(&["run".as_ref(), ok.as_os_str()]);
    assert_eq!(out.status.code(), Some(0), "completed");
    let failing = support::plan("missing_input.toml");
    let out = with_stdout_closed(&["run".as_ref(), failing.as_os_str()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "failed, not hidden by the closed pipe"
    );
}

#[test]
fn a_closed_stdout_still_writes_the_files_asked_for() {
    let csv = support::temp_path("closed_stdout_topology.csv");
    let out = with_stdout_closed(&[
        "experiment".as_ref(),
        "topology".as_ref(),
        "--agents".as_ref(),
        "2,4".as_ref(),
        "--rounds".as_ref(),
        "1".as_ref(),
        "--csv".as_ref(),
        csv.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&csv).expect("the CSV was written");
    assert!(text.lines().count() > 1, "{text}");
}

fn table(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(args)
        .output()
        .expect("the binary runs");
    String::from_utf8(out.stdout).expect("utf-8 table")
}

#[test]
fn the_table_names_the_two_directions_of_messages_and_shows_chaos_when_on() {
    let approval = support::plan("delegated_approval.toml");
    let text = table(&["run", approval.to_str().unwrap()]);
    // One assignment; two replies: the sub-task's approval request and the `Quiet` after it.
    assert!(
        text.contains("messages to workers: sent 1  from workers: delivered 2  "),
        "{text}"
    );
    assert!(
        !text.contains("chaos"),
        "no chaos line without --chaos: {text}"
    );

    let inputs = support::plan("all_inputs.toml");
    let text = table(&[
        "run",
        inputs.to_str().unwrap(),
        "--chaos",
        support::CHAOS,
        "--seed",
        "2",
    ]);
    let line = text
        .lines()
        .find(|l| l.starts_with("chaos    messages "))
        .unwrap_or_else(|| panic!("a chaos line: {text}"));
    let handed: u64 = line
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(handed >= 8, "4 assignments and 4 replies at least: {line}");
    assert!(
        line.contains("duplicated ") && line.contains("dropped "),
        "{line}"
    );
}
