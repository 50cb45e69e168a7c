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
//! A peer runs its claimed task's attempts on its own worker under the star's task rules
//! (`coordinator/src/rules/`), attempt timeouts included. Its shell tries each CAS on the shared
//! stores once and reports ([`RootUpdate`], [`TerminalCommit`]); the core decides whether to try
//! again or to give the change up ([`SharedStoreError`]). In a trace, each event names the peer
//! that wrote it (`peer`).
//!
//! A failed store precondition switches the run to its fallback plan (`[fallback]`) as in star
//! mode, once: peers agree on the plan version by CAS on `plan/<run>` (written once, from
//! absent, with the new plan's task ids: the first peer to write it wins, the others read it
//! and follow; see [`PlanVersion`]).
//!
//! * [`PeerCore`]: the pure decision logic of one peer (no clock, no I/O).
//! * [`drive`]: the one drive loop of the peer core, over an environment ([`drive::PeerEnv`])
//!   that every driver implements.
//! * [`PeerActor`]: its actix shell (stores, worker, links to the other peers).
//! * [`run_peer`]: runs a plan in peer mode and builds the same [`RunReport`](crate::RunReport)
//!   as the star.

mod actor;
mod core;
pub mod drive;
pub mod resume;
mod run;
mod slot;

use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Budget, Envelope, EvidenceRef, TaskId, TaskState};
use quorate_state::{Account, CasOutcome, LedgerError, MemoryStore};
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
    pub result: Option<quorate_protocols::Payload>,
    /// The evidence the result rests on.
    pub evidence: Vec<EvidenceRef>,
    /// What this end means for the run (`None` for completed tasks).
    pub cause: Option<StopReason>,
    /// The peer that committed it.
    pub by: usize,
    /// Set on the record a switch of plan version writes for the node whose store precondition
    /// failed, when the new plan drops that node: the version that drops it. Such a record is
    /// not the task's end but the run's decision to switch (the proposer writes it before it
    /// proposes the switch, so no peer commits the node under the old plan afterwards; see
    /// `core/replan.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_by: Option<u32>,
}

impl Terminal {
    /// `true` if this record is a switch of plan version dropping its node ([`Self::dropped_by`]).
    #[must_use]
    pub fn is_dropped(&self) -> bool {
        self.dropped_by.is_some()
    }
}

/// A plan version the peers switched to: what `plan/<run>` holds (written once, from absent,
/// by the first peer whose store precondition failed; the run's first version is the key's
/// absence).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanVersion {
    /// The version (2: a run switches to its fallback at most once).
    pub version: u32,
    /// The task id of each node of the new plan, in its order: carried-over tasks keep theirs,
    /// new ones get ids the writer drew.
    pub tasks: Vec<TaskId>,
    /// The peer that wrote it.
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
    /// Allocate `slice` for `task` from the shared root account: read it, allocate, CAS once
    /// from the version read; feed what became of it to [`PeerCore::handle_allocation`] (on
    /// contention the core decides whether to try again).
    Allocate {
        /// Node index.
        node: u32,
        /// The task.
        task: TaskId,
        /// The slice.
        slice: Budget,
    },
    /// Return `task`'s slice to the shared root account (`spent` stays spent): read it, close the
    /// child, CAS once from the version read; feed what became of it to
    /// [`PeerCore::handle_slice_closed`].
    CloseSlice {
        /// Node index.
        node: u32,
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
    /// Raise `task`'s fence in the store of record, by compare-and-swap and only while this
    /// peer holds `node`'s claim, to the first attempt after both `past` and the attempt the
    /// fence names (none: 0); feed the attempt it now names, or `None` if the claim is not
    /// this peer's, to [`PeerCore::handle_fence_raised`]. Only a core with
    /// [`PeerCore::set_fenced`] asks for it, before each [`PeerEffect::Execute`].
    RaiseFence {
        /// Node index.
        node: u32,
        /// The task (its fence's key).
        task: TaskId,
        /// This peer's last attempt of the task (0: none).
        past: u32,
    },
    /// Hand an assignment to this peer's own worker.
    Execute(Box<Envelope<Assignment>>),
    /// Send a control message to this peer's own worker.
    Control(Envelope<Control>),
    /// CAS `state/<run>/<node>` from absent to `record`; feed what the store holds afterwards to
    /// [`PeerCore::handle_commit`] as a [`TerminalCommit`].
    CommitTerminal(Terminal),
    /// Merge a task's accepted result into the result store under `key` (CAS from absent:
    /// never overwrite); feed the stored result, if the key was taken, to
    /// [`PeerCore::handle_result_commit`].
    CommitResult {
        /// Node index.
        node: u32,
        /// Store key (`result/<run>/<node>`).
        key: String,
        /// The result.
        value: quorate_protocols::Payload,
    },
    /// CAS `plan/<run>` from absent to this new plan version; feed what the key holds
    /// afterwards (this record, or the one another peer wrote first) to
    /// [`PeerCore::handle_plan_version`].
    ProposePlan(PlanVersion),
    /// Read `plan/<run>` and feed what it holds to [`PeerCore::handle_plan_version`].
    ReadPlan,
    /// Send this envelope to every other peer.
    Broadcast(Box<Envelope<PeerMsg>>),
    /// Append to the run log and the trace.
    Record(Event),
    /// This peer is done: every task is terminal in its view.
    Done(StopReason),
}

/// The attempt a [`PeerEffect::RaiseFence`] raises a task's fence to: the first after both the
/// attempt the fence names now (`stored`, none before the task's first) and this peer's last
/// attempt of the task (`past`). So the fence only goes up, and a takeover runs a later attempt
/// than the lost peer's.
///
/// ```
/// use quorate_coordinator::peer::fence_after;
///
/// assert_eq!(fence_after(None, 0), 1, "a first claim");
/// assert_eq!(fence_after(Some(1), 0), 2, "a takeover of attempt 1");
/// assert_eq!(fence_after(Some(2), 3), 4, "this peer's own retry");
/// ```
#[must_use]
pub fn fence_after(stored: Option<u32>, past: u32) -> u32 {
    stored.unwrap_or(0).max(past) + 1
}

/// What a [`PeerEffect::RaiseFence`] makes of its CAS of a task's fence to `attempt` (from the
/// version read) that did not commit although the claim was still this peer's (the guard
/// checked in the same transaction held), the fence holding `stored` now: `true` (the task runs
/// as `attempt`) if `stored` is `attempt`, else `false` (read the fence again and raise it past
/// what it holds).
///
/// The fence holding `attempt` is this peer's own write: a try of the same CAS whose answer was
/// lost committed (an etcd leader lost mid-request: the outcome is unknown, and the survivors
/// committed it), and the retry found its own value. Nobody else wrote it: only the claim's
/// holder raises the fence, and this peer held the claim from before it read the fence until
/// the retry (the claim is under its lease; it claims nothing again meanwhile). So the task
/// runs as `attempt`. Reading again would raise the fence once more and run the task as
/// `attempt + 1` while `attempt` never ran: the report would count an attempt that was never
/// made.
///
/// ```
/// use quorate_coordinator::peer::fence_written;
///
/// assert!(fence_written(1, Some(1)), "its own write, whose answer was lost");
/// assert!(fence_written(3, Some(3)), "the same for a later attempt");
/// assert!(!fence_written(1, Some(2)), "raised past it: read it again");
/// assert!(!fence_written(1, None), "not there: read it again");
/// ```
#[must_use]
pub fn fence_written(attempt: u32, stored: Option<u32>) -> bool {
    stored == Some(attempt)
}

/// What one compare-and-swap on the shared root account came to (an allocation or a slice's
/// return). The shell tries once per effect; the core decides what follows.
#[derive(Clone, Debug, PartialEq)]
pub enum RootUpdate {
    /// The CAS committed.
    Done,
    /// The ledger refused the change on the account as read (e.g. a slice that does not fit).
    Refused(LedgerError),
    /// Another peer changed the account between the read and the CAS: a retry reads the fresh
    /// version.
    Contended,
    /// The root account is not in the store (the run's root was never opened).
    Missing,
}

/// What `state/<run>/<node>` held after this peer's [`PeerEffect::CommitTerminal`].
#[derive(Clone, Debug, PartialEq)]
pub enum TerminalCommit {
    /// This peer's record was written at `version`.
    Won {
        /// This peer's record.
        record: Terminal,
        /// The store version it was written at.
        version: u64,
    },
    /// Another peer's record was there first: adopted, never overwritten.
    Taken {
        /// The stored record.
        record: Terminal,
        /// Its store version.
        version: u64,
    },
    /// The CAS found the key taken, but no record was under it when read back: this peer's
    /// `record`, which the core may commit again.
    Vanished {
        /// This peer's record.
        record: Terminal,
    },
    /// Nothing was written: this peer claimed the task, but the claim is not its own any more
    /// (its lease lapsed, and another peer may run the task now), and the key holds no record.
    /// A shell whose claims outlive nothing (one process) never answers so.
    Unclaimed {
        /// This peer's record.
        record: Terminal,
    },
}

/// Why a peer gave a task up on the shared stores (the observation of the task's failure, or of a
/// `budget-refused` event for a slice that could not be returned).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharedStoreError {
    /// The run's root account is not in the budget store.
    #[error("the run's root account is missing from the budget store")]
    RootMissing,
    /// Other peers changed the root account before every one of this peer's CASes.
    #[error("the run's root account was changed by other peers {tries} times in a row")]
    RootContended {
        /// The CASes tried.
        tries: u32,
    },
    /// The task's terminal record key was taken, yet held no record, every time.
    #[error("the task's terminal record vanished from the state store {tries} times")]
    RecordVanished {
        /// The commits tried.
        tries: u32,
    },
}

/// CASes a peer tries on one shared key for one change before it gives the change up.
pub const SHARED_CAS_TRIES: u32 = 256;

/// Carries out one change of the root account under `key` ([`PeerEffect::Allocate`],
/// [`PeerEffect::CloseSlice`]): reads it, applies `change`, and CASes once from the version read.
pub fn update_root_once<T>(
    store: &MemoryStore<Account>,
    key: &str,
    change: impl FnOnce(&mut Account) -> Result<T, LedgerError>,
) -> RootUpdate {
    let Some(current) = store.get_now(key) else {
        return RootUpdate::Missing;
    };
    let mut account = current.value;
    if let Err(e) = change(&mut account) {
        return RootUpdate::Refused(e);
    }
    if store
        .cas_now(key, Some(current.version), account)
        .is_committed()
    {
        RootUpdate::Done
    } else {
        RootUpdate::Contended
    }
}

/// Carries out a [`PeerEffect::ProposePlan`]: CASes `record` under `key` from absent and
/// returns what the key holds afterwards (`None` only if it was taken yet reads empty).
pub fn propose_plan(
    store: &MemoryStore<PlanVersion>,
    key: &str,
    record: PlanVersion,
) -> Option<PlanVersion> {
    match store.cas_now(key, None, record.clone()) {
        CasOutcome::Committed(_) => Some(record),
        CasOutcome::Conflict { current } => current.map(|c| c.value),
    }
}

/// Carries out a [`PeerEffect::CommitTerminal`]: CASes `record` under `key` from absent.
pub fn commit_terminal(
    store: &MemoryStore<Terminal>,
    key: &str,
    record: Terminal,
) -> TerminalCommit {
    match store.cas_now(key, None, record.clone()) {
        CasOutcome::Committed(version) => TerminalCommit::Won {
            record,
            version: version.raw(),
        },
        CasOutcome::Conflict {
            current: Some(current),
        } => TerminalCommit::Taken {
            // The node as this peer numbers it (a peer on another plan version may number
            // the same task otherwise).
            record: Terminal {
                node: record.node,
                ..current.value
            },
            version: current.version.raw(),
        },
        CasOutcome::Conflict { current: None } => TerminalCommit::Vanished { record },
    }
}
