//! Pieces shared by the tests that start `quorate` processes (included by `tests/support` and
//! `tests/secure`): a guard that kills a process the test did not wait for, and a sum over the
//! processes' JSON reports.

use std::process::Command;

/// A process a test started: killed (SIGKILL, which ends a stopped process too) if the test ends
/// without waiting for it, so a failing test leaves nothing behind.
pub(crate) struct Running(pub(crate) Option<std::process::Child>);

impl Running {
    /// Sends the signal `name` (`STOP`, `CONT`, `KILL`) with `kill`.
    pub(crate) fn signal(&self, name: &str) {
        let pid = self.0.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([format!("-{name}"), pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name}");
    }

    /// The child, to wait for (no longer killed on drop).
    pub(crate) fn take(mut self) -> std::process::Child {
        self.0.take().expect("running")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The sum over `reports` of the number at JSON pointer `field` (each report must have it).
pub(crate) fn sum_of(reports: &[serde_json::Value], field: &str) -> u64 {
    reports
        .iter()
        .map(|r| {
            r.pointer(field)
                .and_then(serde_json::Value::as_u64)
                .expect(field)
        })
        .sum()
}
