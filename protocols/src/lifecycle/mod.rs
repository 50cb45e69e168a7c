//! Task and action lifecycles as explicit state machines.
//!
//! Each machine is an enum of states and an enum of events; [`TaskState::on`] and
//! [`ActionState::on`] return the next state or a typed error naming the state and the event that
//! did not fit. Terminal states accept no event at all: the first terminal state is the final one.

mod action;
mod task;

pub use action::{ActionEvent, ActionState, ActionTransitionError};
pub use task::{TaskEvent, TaskState, TaskTransitionError};
