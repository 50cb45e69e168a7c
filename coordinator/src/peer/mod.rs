//! Peer mode: the same plan run by `n` peers without a supervisor.
//!
//! Every peer holds its own view of every task and runs its own worker. A task whose
//! dependencies completed is *claimed* by compare-and-swap on a shared store (`claim/<run>/<node>`,
//! written once), so exactly one peer executes it. A task's terminal state is also chosen by CAS
//! (`state/<run>/<node>`, written once: the first terminal state wins, a loser adopts the stored
//! one and never overwrites it), and the winner broadcasts it with its result to every other
//! peer (`n - 1` messages). A peer is done when every task is terminal in its view; the run is
//! done when every peer is. The stop reason is derived from the committed terminal records
//! (completed if all completed, otherwise the cause of the earliest committed non-completed
//! record), so all peers agree.
//!
//! * [`PeerCore`]: the pure decision logic of one peer (no clock, no I/O).
//! * [`PeerActor`]: its actix shell (stores, worker, links to the other peers).
//! * [`run_peer`]: runs a plan in peer mode and builds the same [`RunReport`](crate::RunReport)
//!   as the star.

mod actor;
mod core;
mod run;
mod slot;

use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Budget, Envelope, EvidenceRef, TaskId, TaskState};
use quorate_state::LedgerError;
use serde::{Deserialize, Serialize};

use crate::{Event, StopReason};

pub use self::core::PeerCore;
pub use actor::{PeerActor, PeerMsgEnvelope, PeerStores};
pub use run::run_peer;

/// The committed end of one task: what `state/<run>/<node>` holds and what peers broadcast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Terminal {
    /// Node index in the plan.
    pub node: u32,
    /// The settled state: a terminal state, or `waiting-approval` for a task parked for a human.
    pub state: TaskState,
    /// The accepted result (completed tasks only).
    pub result: Option<serde_json::Value>,
    /// The evidence the result rests on.
    pub evidence: Vec<EvidenceRef>,
    /// What this end means for the run (`None` for completed tasks).
    pub cause: Option<StopReason>,
    /// The peer that committed it.
    pub by: usize,
}

/// Peer -> peers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PeerMsg {
    /// A task's terminal record was committed at store version `version`.
    Terminal {
        /// The record.
        record: Terminal,
        /// The store version it was committed at (orders commits run-wide).
        version: u64,
    },
}

/// What the shell of a [`PeerCore`] must do.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum PeerEffect {
    /// CAS `claim/<run>/<node>` from absent to this peer; feed the outcome to
    /// [`PeerCore::handle_claim_result`].
    TryClaim {
        /// Node index.
        node: u32,
    },
    /// Allocate `slice` for `task` from the shared root account (CAS, re-read on conflict); feed
    /// the outcome to [`PeerCore::handle_allocation`].
    Allocate {
        /// Node index.
        node: u32,
        /// The task.
        task: TaskId,
        /// The slice.
        slice: Budget,
    },
    /// Return `task`'s slice to the shared root account; `spent` stays spent.
    CloseSlice {
        /// The task.
        task: TaskId,
        /// What it spent.
        spent: Budget,
    },
    /// Check node `node`'s store preconditions against the shared result store and answer with
    /// [`PeerCore::handle_preconditions`].
    CheckPreconditions {
        /// Node index.
        node: u32,
        /// What must hold.
        checks: Vec<quorate_protocols::Precondition>,
    },
    /// Hand an assignment to this peer's own worker.
    Execute(Box<Envelope<Assignment>>),
    /// Send a control message to this peer's own worker.
    Control(Envelope<Control>),
    /// CAS `state/<run>/<node>` from absent to `record`; feed what the store holds afterwards to
    /// [`PeerCore::handle_commit`].
    CommitTerminal(Terminal),
    /// Merge a task's accepted result into the result store under `key` (CAS from absent:
    /// never overwrite).
    CommitResult {
        /// Store key (`result/<run>/<node>`).
        key: String,
        /// The result.
        value: serde_json::Value,
    },
    /// Send this envelope to every other peer.
    Broadcast(Box<Envelope<PeerMsg>>),
    /// Append to the run log and the trace.
    Record(Event),
    /// This peer is done: every task is terminal in its view.
    Done(StopReason),
}

/// Why a budget allocation failed, as fed back to the core.
pub type AllocationResult = Result<(), LedgerError>;
