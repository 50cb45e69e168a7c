use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a side-effecting tool call is in its life.
///
/// ```text
/// proposed -> validated -> executing -> {succeeded, failed, outcome-unknown}
/// proposed -> rejected                  (refused at the gate)
/// outcome-unknown -> succeeded | failed (resolved by querying the tool by ActionId)
/// outcome-unknown -> executing          (retried: same ActionId, same parameters, idempotent tool)
/// ```
///
/// *Outcome unknown* is not *failed*: a timeout after sending may have committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionState {
    /// An agent proposed the call.
    Proposed,
    /// The gate checked capability, parameters, preconditions and reserved budget.
    Validated,
    /// The call was sent to the tool.
    Executing,
    /// The tool confirmed the effect. Terminal.
    Succeeded,
    /// The tool confirmed that nothing was committed. Terminal.
    Failed,
    /// The call was sent but no answer came; it may or may not have committed.
    OutcomeUnknown,
    /// The gate refused the call; nothing was sent. Terminal.
    Rejected,
}

/// What can happen to an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionEvent {
    /// Every gate check passed and the budget is reserved.
    GatePassed,
    /// A gate check failed.
    GateRejected,
    /// The call was sent.
    Started,
    /// The tool answered with success.
    Succeeded,
    /// The tool answered with a failure that committed nothing.
    Failed,
    /// No answer before the per-call timeout.
    TimedOut,
    /// A query by `ActionId` found the effect committed.
    FoundCommitted,
    /// A query by `ActionId` found nothing committed.
    FoundAbsent,
    /// Sent again with the same id and parameters (idempotent tools only; the gate decides).
    Retried,
}

/// An action event did not fit the action's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionTransitionError {
    /// The action already ended.
    #[error("action is terminal ({state}); {event:?} is refused")]
    Terminal {
        /// The terminal state.
        state: ActionState,
        /// The refused event.
        event: ActionEvent,
    },
    /// The event does not apply to this state.
    #[error("action in state {from} cannot take {event:?}")]
    Illegal {
        /// The current state.
        from: ActionState,
        /// The refused event.
        event: ActionEvent,
    },
}

impl ActionState {
    /// `true` for succeeded, failed and rejected.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            ActionState::Succeeded | ActionState::Failed | ActionState::Rejected
        )
    }

    /// The state after `event`, or why it is refused.
    ///
    /// ```
    /// use quorate_protocols::{ActionEvent as E, ActionState as S};
    ///
    /// let s = S::Proposed.on(E::GatePassed)?.on(E::Started)?.on(E::TimedOut)?;
    /// assert_eq!(s, S::OutcomeUnknown);
    /// assert_eq!(s.on(E::FoundCommitted)?, S::Succeeded);
    /// # Ok::<(), quorate_protocols::ActionTransitionError>(())
    /// ```
    pub fn on(self, event: ActionEvent) -> Result<ActionState, ActionTransitionError> {
        use ActionEvent as E;
        use ActionState as S;
        if self.is_terminal() {
            return Err(ActionTransitionError::Terminal { state: self, event });
        }
        let next = match (self, event) {
            (S::Proposed, E::GatePassed) => S::Validated,
            (S::Proposed, E::GateRejected) => S::Rejected,
            (S::Validated, E::Started) => S::Executing,
            (S::Executing, E::Succeeded) => S::Succeeded,
            (S::Executing, E::Failed) => S::Failed,
            (S::Executing, E::TimedOut) => S::OutcomeUnknown,
            (S::OutcomeUnknown, E::FoundCommitted) => S::Succeeded,
            (S::OutcomeUnknown, E::FoundAbsent) => S::Failed,
            (S::OutcomeUnknown, E::Retried) => S::Executing,
            (from, event) => return Err(ActionTransitionError::Illegal { from, event }),
        };
        Ok(next)
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActionState::Proposed => "proposed",
            ActionState::Validated => "validated",
            ActionState::Executing => "executing",
            ActionState::Succeeded => "succeeded",
            ActionState::Failed => "failed",
            ActionState::OutcomeUnknown => "outcome-unknown",
            ActionState::Rejected => "rejected",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_is_not_failure() {
        let s = ActionState::Executing.on(ActionEvent::TimedOut).unwrap();
        assert_eq!(s, ActionState::OutcomeUnknown);
        assert!(!s.is_terminal());
        assert_eq!(s.on(ActionEvent::Retried).unwrap(), ActionState::Executing);
    }

    #[test]
    fn rejected_actions_never_execute() {
        let s = ActionState::Proposed.on(ActionEvent::GateRejected).unwrap();
        assert_eq!(
            s.on(ActionEvent::Started),
            Err(ActionTransitionError::Terminal {
                state: ActionState::Rejected,
                event: ActionEvent::Started
            })
        );
        assert!(ActionState::Proposed.on(ActionEvent::Started).is_err());
    }
}
