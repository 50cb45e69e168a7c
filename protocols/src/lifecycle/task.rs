use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a task is in its life.
///
/// ```text
/// pending -> ready -> running -> {waiting-approval -> running} -> terminal
/// terminal = completed | failed | stopped-limit | cancelled
/// peer mode: any live state -> the state of the task's committed record (TaskEvent::Settled)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Waiting for dependencies or preconditions.
    Pending,
    /// Every dependency completed and the preconditions hold; may be dispatched.
    Ready,
    /// Assigned to a worker, which is working on the current attempt.
    Running,
    /// The worker asked for human approval and is parked until it comes.
    WaitingApproval,
    /// The acceptance check passed on observed results. Terminal.
    Completed,
    /// The task failed with an observation. Terminal.
    Failed,
    /// A budget component or the step bound ran out. Terminal.
    StoppedLimit,
    /// Cancelled by the user, a replan or a rejected approval. Terminal.
    Cancelled,
}

impl TaskState {
    /// Every state, in the order above (a state added to the enum goes here too).
    pub const ALL: [TaskState; 8] = [
        TaskState::Pending,
        TaskState::Ready,
        TaskState::Running,
        TaskState::WaitingApproval,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::StoppedLimit,
        TaskState::Cancelled,
    ];
}

/// What can happen to a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskEvent {
    /// All dependencies completed and the preconditions hold (`pending -> ready`).
    DependenciesMet,
    /// A precondition stopped holding before dispatch (`ready -> pending`).
    PreconditionLost,
    /// Sent to a worker (`ready -> running`).
    Dispatched,
    /// The worker crashed or the attempt timed out; a new attempt will be made (`running -> ready`).
    Requeued,
    /// The worker asked for approval (`running -> waiting-approval`).
    ApprovalRequested,
    /// Approval granted (`waiting-approval -> running`).
    Approved,
    /// The acceptance check passed (`running -> completed`).
    AcceptancePassed,
    /// A failure was observed (any live state `-> failed`).
    Failed,
    /// A budget or step limit ran out (any live state `-> stopped-limit`).
    LimitReached,
    /// Cancelled (any live state `-> cancelled`).
    Cancelled,
    /// The task's end was decided and committed elsewhere: in peer mode, the terminal record in
    /// the shared store (another peer's, or this peer's own once the store took it). Any live
    /// state `->` the recorded state, a terminal one or `waiting-approval` (a task parked for a
    /// human, which settles the run).
    Settled(TaskState),
}

/// A task event did not fit the task's state. Retrying the same event cannot help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskTransitionError {
    /// The task is terminal: it never changes state again.
    #[error("task is terminal ({state}); {event:?} is refused")]
    Terminal {
        /// The terminal state the task stays in.
        state: TaskState,
        /// The refused event.
        event: TaskEvent,
    },
    /// The event does not apply to this live state.
    #[error("task in state {from} cannot take {event:?}")]
    Illegal {
        /// The current state.
        from: TaskState,
        /// The refused event.
        event: TaskEvent,
    },
}

impl TaskState {
    /// `true` for completed, failed, stopped-limit and cancelled.
    #[must_use]
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed
                | TaskState::Failed
                | TaskState::StoppedLimit
                | TaskState::Cancelled
        )
    }

    /// The state after `event`, or why it is refused.
    ///
    /// ```
    /// use quorate_protocols::{TaskEvent, TaskState, TaskTransitionError};
    ///
    /// let s = TaskState::Pending.on(TaskEvent::DependenciesMet)?;
    /// let s = s.on(TaskEvent::Dispatched)?.on(TaskEvent::AcceptancePassed)?;
    /// assert_eq!(s, TaskState::Completed);
    /// assert!(matches!(s.on(TaskEvent::Dispatched), Err(TaskTransitionError::Terminal { .. })));
    /// # Ok::<(), TaskTransitionError>(())
    /// ```
    pub fn on(self, event: TaskEvent) -> Result<TaskState, TaskTransitionError> {
        use TaskEvent as E;
        use TaskState as S;
        if self.is_terminal() {
            return Err(TaskTransitionError::Terminal { state: self, event });
        }
        let next = match (self, event) {
            (_, E::Failed) => S::Failed,
            (_, E::LimitReached) => S::StoppedLimit,
            (_, E::Cancelled) => S::Cancelled,
            (S::Pending, E::DependenciesMet) => S::Ready,
            (S::Ready, E::PreconditionLost) => S::Pending,
            (S::Ready, E::Dispatched) => S::Running,
            (S::Running, E::Requeued) => S::Ready,
            (S::Running, E::ApprovalRequested) => S::WaitingApproval,
            (S::WaitingApproval, E::Approved) => S::Running,
            (S::Running, E::AcceptancePassed) => S::Completed,
            (from, E::Settled(to))
                if from != to && (to.is_terminal() || to == S::WaitingApproval) =>
            {
                to
            }
            (from, event) => return Err(TaskTransitionError::Illegal { from, event }),
        };
        Ok(next)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskState::Pending => "pending",
            TaskState::Ready => "ready",
            TaskState::Running => "running",
            TaskState::WaitingApproval => "waiting-approval",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::StoppedLimit => "stopped-limit",
            TaskState::Cancelled => "cancelled",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EVENTS: [TaskEvent; 14] = [
        TaskEvent::DependenciesMet,
        TaskEvent::PreconditionLost,
        TaskEvent::Dispatched,
        TaskEvent::Requeued,
        TaskEvent::ApprovalRequested,
        TaskEvent::Approved,
        TaskEvent::AcceptancePassed,
        TaskEvent::Failed,
        TaskEvent::LimitReached,
        TaskEvent::Cancelled,
        TaskEvent::Settled(TaskState::Completed),
        TaskEvent::Settled(TaskState::WaitingApproval),
        TaskEvent::Settled(TaskState::Failed),
        TaskEvent::Settled(TaskState::Ready),
    ];

    #[test]
    fn completed_needs_running() {
        assert_eq!(
            TaskState::Ready.on(TaskEvent::AcceptancePassed),
            Err(TaskTransitionError::Illegal {
                from: TaskState::Ready,
                event: TaskEvent::AcceptancePassed
            })
        );
        assert!(TaskState::WaitingApproval
            .on(TaskEvent::AcceptancePassed)
            .is_err());
    }

    #[test]
    fn a_committed_record_settles_any_live_state_to_its_own() {
        use TaskState as S;
        for from in [S::Pending, S::Ready, S::Running, S::WaitingApproval] {
            assert_eq!(from.on(TaskEvent::Settled(S::Completed)), Ok(S::Completed));
            assert_eq!(from.on(TaskEvent::Settled(S::Cancelled)), Ok(S::Cancelled));
            let live = TaskEvent::Settled(S::Running);
            assert_eq!(
                from.on(live),
                Err(TaskTransitionError::Illegal { from, event: live }),
                "a record settles a task: it never names a live state but waiting-approval"
            );
        }
        let parked = TaskEvent::Settled(S::WaitingApproval);
        assert_eq!(S::Running.on(parked), Ok(S::WaitingApproval));
        assert!(
            S::WaitingApproval.on(parked).is_err(),
            "no change is no transition"
        );
        assert!(matches!(
            S::Failed.on(TaskEvent::Settled(S::Completed)),
            Err(TaskTransitionError::Terminal { .. })
        ));
    }

    proptest! {
        /// The first terminal state is the final state, whatever events follow.
        #[test]
        fn first_terminal_state_is_final(events in proptest::collection::vec(0..EVENTS.len(), 0..64)) {
            let mut state = TaskState::Pending;
            let mut first_terminal = None;
            for i in events {
                let event = EVENTS[i];
                match state.on(event) {
                    Ok(next) => {
                        prop_assert!(first_terminal.is_none(), "left terminal {state} via {event:?}");
                        state = next;
                    }
                    Err(TaskTransitionError::Terminal { state: s, .. }) => prop_assert_eq!(s, state),
                    Err(TaskTransitionError::Illegal { from, .. }) => {
                        prop_assert_eq!(from, state);
                        prop_assert!(!state.is_terminal());
                    }
                }
                if state.is_terminal() && first_terminal.is_none() {
                    first_terminal = Some(state);
                }
                if let Some(t) = first_terminal {
                    prop_assert_eq!(state, t);
                }
            }
        }
    }
}
