//! Why a worker core refused an input.

use quorate_protocols::{ActionId, TaskId};

use crate::book::BookError;

/// An input did not fit the worker's state. Nothing changed (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// No attempt of the task runs or ran here.
    #[error("no attempt of task {task} is known here")]
    UnknownTask {
        /// The task.
        task: TaskId,
    },
    /// The input names an older attempt than the current one; it is late.
    #[error("task {task}: attempt {got} is not the current attempt {current}")]
    StaleAttempt {
        /// The task.
        task: TaskId,
        /// The current attempt.
        current: u32,
        /// The attempt the input named.
        got: u32,
    },
    /// This attempt was assigned already (a duplicate assignment).
    #[error("task {task}: attempt {attempt} was assigned already")]
    DuplicateAssignment {
        /// The task.
        task: TaskId,
        /// The attempt.
        attempt: u32,
    },
    /// The current attempt is not waiting for this action's answer (late or duplicate).
    #[error("action {action} is not awaited (late or duplicate answer)")]
    NotAwaited {
        /// The action.
        action: ActionId,
    },
    /// No call is parked for approval under this action.
    #[error("no call is parked for approval under action {action}")]
    NotParked {
        /// The action.
        action: ActionId,
    },
    /// The attempt has ended already.
    #[error("task {task}: attempt {attempt} has ended")]
    AttemptEnded {
        /// The task.
        task: TaskId,
        /// The attempt.
        attempt: u32,
    },
    /// The action's state machine refused the input.
    #[error(transparent)]
    Book(#[from] BookError),
}
