//! The CLI's output to a reader that went away (`quorate run plan.toml | head -1`): the process
//! ends quietly instead of panicking on the broken pipe.

mod support;

use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .arg("run")
        .arg(support::plan("all_inputs.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    // Close the reading end before the run prints anything: every write then fails.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("the binary ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
