//! Why a run ended. Every run ends with exactly one of these; "finished" is not one.

use std::fmt;

use quorate_protocols::Component;
use serde::{Deserialize, Serialize};

/// The single reason a run stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum StopReason {
    /// Every task passed its acceptance check.
    Completed,
    /// A task failed; `observation` is the first failing observation.
    Failed {
        /// The task's node id.
        node: String,
        /// What was observed.
        observation: String,
    },
    /// A budget component ran out.
    StoppedLimit {
        /// The exhausted component.
        component: Component,
    },
    /// The run's deadline passed.
    Deadline,
    /// The same action kept repeating without new information.
    NoProgress {
        /// The task's node id.
        node: String,
    },
    /// The run was cancelled.
    Cancelled,
    /// Nothing can proceed until a human decides about a pending approval.
    WaitingApproval {
        /// The task waiting.
        node: String,
    },
}

impl StopReason {
    /// The stop for a budget slice the ledger refused: the component that ran out (steps when
    /// the refusal names none, e.g. a closed account or an arithmetic overflow).
    pub(crate) fn refused(e: &quorate_state::LedgerError) -> Self {
        let component = match e {
            quorate_state::LedgerError::Insufficient { component, .. } => *component,
            _ => Component::Steps,
        };
        StopReason::StoppedLimit { component }
    }

    /// The reason's name as it appears in JSON output (`stop_reason`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::Failed { .. } => "failed",
            StopReason::StoppedLimit { .. } => "stopped-limit",
            StopReason::Deadline => "deadline",
            StopReason::NoProgress { .. } => "no-progress",
            StopReason::Cancelled => "cancelled",
            StopReason::WaitingApproval { .. } => "waiting-approval",
        }
    }

    /// The process exit code the CLI uses for this reason (0 only for completed; 2 is reserved
    /// for bad input, [`StopReason::EXIT_RUNTIME`] for the runtime's own failure).
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            StopReason::Completed => 0,
            StopReason::Failed { .. } => 1,
            StopReason::StoppedLimit { .. } => 3,
            StopReason::Deadline => 4,
            StopReason::NoProgress { .. } => 5,
            StopReason::Cancelled => 6,
            StopReason::WaitingApproval { .. } => 7,
        }
    }
}

impl StopReason {
    /// The exit code of a run the runtime itself could not carry out, or that ended without a
    /// stop reason (a bug, not a task's failure).
    pub const EXIT_RUNTIME: u8 = 8;
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Failed { node, observation } => {
                write!(f, "failed at {node}: {observation}")
            }
            StopReason::StoppedLimit { component } => write!(f, "stopped-limit ({component})"),
            StopReason::NoProgress { node } => write!(f, "no-progress at {node}"),
            StopReason::WaitingApproval { node } => write!(f, "waiting-approval at {node}"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_state::LedgerError;

    #[test]
    fn a_refused_slice_stops_on_the_component_that_ran_out() {
        let short = LedgerError::Insufficient {
            account: quorate_state::AccountId::Root,
            component: Component::Tokens,
            requested: 10,
            available: 3,
        };
        assert_eq!(
            StopReason::refused(&short),
            StopReason::StoppedLimit {
                component: Component::Tokens
            }
        );
        // A refusal that names no component (here a closed root) stops on steps.
        let closed = LedgerError::Closed {
            account: quorate_state::AccountId::Root,
        };
        assert_eq!(
            StopReason::refused(&closed),
            StopReason::StoppedLimit {
                component: Component::Steps
            }
        );
    }
}
