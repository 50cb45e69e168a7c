//! The task rules both topologies share: the star's [`SupervisorCore`](crate::SupervisorCore)
//! and the peers' [`PeerCore`](crate::PeerCore) are policies over them (a supervisor dispatches;
//! peers claim by CAS), and neither re-implements them.
//!
//! * Lifecycle: every state change of a task goes through
//!   [`TaskState::on`](quorate_protocols::TaskState::on) (`protocols/src/lifecycle/task.rs`).
//! * [`judge`]: which replies a task accepts (duplicate, late, stale and unauthorized ones are
//!   rejected), over a [`ReplyGuard`] built from the task's record.
//! * [`SeenKeys`]: the dedupe keys a task accepted replies under.
//! * [`Parked`]: an action parked for a human's decision, and the `Quiet` handshake that says
//!   when nothing else of its task works.
//! * [`AttemptTimeouts`] and [`on_timeout`]: an attempt without an accepted reply is run again,
//!   up to `max_attempts`, then its task fails.
//!
//! Acceptance checks on observed results are [`crate::acceptance`].

mod approval;
mod reply;
mod seen;
mod timeout;

pub(crate) use approval::Parked;
pub(crate) use reply::{judge, refuse, ReplyGuard};
pub(crate) use seen::SeenKeys;
pub(crate) use timeout::{on_timeout, AttemptTimeouts, Expiry};
