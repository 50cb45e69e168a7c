//! What a supervisor is told to enforce: its settings and how it answers approval requests.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

/// How approval requests are answered. The default is [`Ask`](Self::Ask), as `quorate run`
/// without `--approve`: nothing is decided for a human.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApprovalPolicy {
    /// Approve every request.
    All,
    /// Reject every request (the task is cancelled).
    None,
    /// Approve requests of these nodes; reject the others.
    Nodes(HashSet<String>),
    /// Decide nothing; the run stops with `waiting-approval` when nothing else can proceed
    /// (decisions then come through [`SupervisorCore::handle_approval`](super::SupervisorCore::handle_approval)).
    /// The default.
    #[default]
    Ask,
}

/// Run settings the supervisor enforces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorConfig {
    /// Number of workers to spread tasks over.
    pub workers: usize,
    /// The run stops with `deadline` at this many milliseconds after start.
    pub deadline_ms: Option<u64>,
    /// An attempt with no accepted reply after this long is dispatched again (lost envelopes).
    pub attempt_timeout_ms: u64,
    /// Attempts per task before it fails.
    pub max_attempts: u32,
    /// How approval requests are answered (default [`ApprovalPolicy::Ask`]: wait for a human).
    pub approvals: ApprovalPolicy,
    /// Cancel the run after this many handled inputs (dispatches + replies); for tests and demos.
    pub cancel_after_steps: Option<u64>,
    /// Answers to the top-up requests of tasks that ran out of their slice (nodes with
    /// `on_exhausted = "ask"`); a request it does not answer waits for a person.
    #[serde(default)]
    pub top_ups: super::TopUpPolicy,
}

/// Settings a supervisor cannot run with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `workers` is 0: nobody could run a task. Give at least one worker.
    #[error("a supervisor needs at least one worker (workers = 0)")]
    NoWorkers,
}

impl SupervisorConfig {
    /// Checks the settings a run cannot go on without, instead of changing them quietly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.workers == 0 {
            return Err(ConfigError::NoWorkers);
        }
        Ok(())
    }
}

impl ApprovalPolicy {
    /// The answer to an approval request from node `node`; `None` under `Ask` (a human decides).
    #[must_use]
    pub fn decide(&self, node: &str) -> Option<bool> {
        match self {
            ApprovalPolicy::All => Some(true),
            ApprovalPolicy::None => Some(false),
            ApprovalPolicy::Nodes(nodes) => Some(nodes.contains(node)),
            ApprovalPolicy::Ask => None,
        }
    }
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            deadline_ms: None,
            attempt_timeout_ms: 2_000,
            max_attempts: 5,
            approvals: ApprovalPolicy::Ask,
            cancel_after_steps: None,
            top_ups: super::TopUpPolicy::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_workers_is_refused() {
        let none = SupervisorConfig {
            workers: 0,
            ..SupervisorConfig::default()
        };
        assert_eq!(none.validate(), Err(ConfigError::NoWorkers));
        assert_eq!(SupervisorConfig::default().validate(), Ok(()));
    }
}
