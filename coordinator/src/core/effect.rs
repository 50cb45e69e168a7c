//! What the supervisor core asks its shell to do ([`SupervisorEffect`]), and the message
//! counters it keeps.

use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Envelope, Precondition};
use serde::{Deserialize, Serialize};

use crate::event::{Record, Rejection};
use crate::StopReason;

/// What the shell must do.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum SupervisorEffect {
    /// Send an assignment to worker `worker`.
    Dispatch {
        /// Worker index.
        worker: usize,
        /// The assignment.
        envelope: Box<Envelope<Assignment>>,
    },
    /// Send a control message to worker `worker`.
    Control {
        /// Worker index.
        worker: usize,
        /// The message.
        envelope: Box<Envelope<Control>>,
    },
    /// Merge an accepted result into the store under `key` (CAS; never overwrite), and answer
    /// with [`handle_result_commit`](crate::SupervisorCore::handle_result_commit), handing
    /// `ticket` back: [`CommitOutcome::Committed`], or [`CommitOutcome::Kept`] with what the
    /// store holds if the key is taken. The task completes, and its dependents are released,
    /// only then.
    CommitResult {
        /// Names the task.
        ticket: CommitTicket,
        /// Store key.
        key: String,
        /// The result (shared with the task, its dependents and the log).
        value: quorate_protocols::Payload,
    },
    /// Check the store preconditions of node `ticket.node()` and answer with
    /// [`handle_preconditions`](crate::SupervisorCore::handle_preconditions), handing `ticket`
    /// back.
    CheckPreconditions {
        /// What the answer hands back: the node and the plan version that asked (an answer to
        /// an older version's checks is ignored: a replan renumbers nodes, and asks again).
        ticket: CheckTicket,
        /// What must hold.
        checks: Vec<Precondition>,
    },
    /// Append to the run log and the trace ([`crate::SupervisorCore::event`] makes the
    /// [`crate::Event`]).
    Record(Record),
    /// The run is over.
    Stop(StopReason),
}

/// Names a store-precondition check the core asked for (see
/// [`SupervisorEffect::CheckPreconditions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckTicket {
    pub(super) node: u32,
    pub(super) plan_version: u32,
}

impl CheckTicket {
    /// The node whose preconditions are to be checked (an index of the plan version that
    /// asked).
    #[must_use]
    pub fn node(&self) -> u32 {
        self.node
    }
}

/// Names the task of a [`SupervisorEffect::CommitResult`] by its id, which a task keeps across
/// replans and resumes (a task a replan dropped is no longer found).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitTicket {
    pub(super) task: quorate_protocols::TaskId,
}

/// What became of a [`SupervisorEffect::CommitResult`] (see
/// [`handle_result_commit`](crate::SupervisorCore::handle_result_commit)).
#[derive(Clone, Debug, PartialEq)]
pub enum CommitOutcome {
    /// The result was written under its key.
    Committed,
    /// The key was taken: the store keeps the value it holds (never overwritten).
    Kept {
        /// The stored value.
        value: quorate_protocols::Payload,
        /// Its version.
        version: quorate_protocols::Version,
    },
}

impl CommitOutcome {
    /// The answer a result store gives with the outcome of the commit's create
    /// ([`MemoryStore::create_now`](quorate_state::MemoryStore::create_now) or
    /// [`create_many_now`](quorate_state::MemoryStore::create_many_now)): written, or refused
    /// for a key that holds a value, which is kept.
    ///
    /// ```
    /// use quorate_coordinator::CommitOutcome;
    /// use quorate_protocols::Payload;
    /// use quorate_state::MemoryStore;
    ///
    /// let store = MemoryStore::new();
    /// let first = store.create_now("k", Payload::from(serde_json::json!(1)));
    /// assert_eq!(CommitOutcome::of_create(first), CommitOutcome::Committed);
    /// let second = store.create_now("k", Payload::from(serde_json::json!(2)));
    /// let CommitOutcome::Kept { value, .. } = CommitOutcome::of_create(second) else { panic!() };
    /// assert_eq!(value, Payload::from(serde_json::json!(1)));
    /// ```
    ///
    /// # Panics
    ///
    /// On a create refused for a key the store says holds nothing (no store does that).
    #[must_use]
    pub fn of_create(outcome: quorate_state::CasOutcome<quorate_protocols::Payload>) -> Self {
        match outcome {
            quorate_state::CasOutcome::Committed(_) => Self::Committed,
            quorate_state::CasOutcome::Conflict { current } => {
                let held = current.expect("a create is refused only for a key that holds a value");
                Self::Kept {
                    value: held.value,
                    version: held.version,
                }
            }
        }
    }
}

/// Message counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageCounts {
    /// Envelopes the supervisor sent.
    pub sent: u64,
    /// Replies that reached the supervisor.
    pub delivered: u64,
    /// Rejected: dedupe key seen before.
    pub rejected_duplicate: u64,
    /// Rejected: task terminal or attempt over.
    pub rejected_late: u64,
    /// Rejected: state version not current.
    pub rejected_stale: u64,
    /// Rejected: wrong sender, role, run or task.
    pub rejected_unauthorized: u64,
    /// Plain acknowledgements of a cancel or a rejection (the attempt's final reply, `cancelled`,
    /// logged as `control-acknowledged`): they reach a task that already ended, as expected,
    /// and settle what it is charged; not counted as rejected. A final reply that is an answer
    /// crossed the control: it acknowledges it too, but is counted in `rejected_late`.
    #[serde(default)]
    pub acknowledged: u64,
}

impl MessageCounts {
    /// Counts one reply rejected for `reason`.
    pub fn count_rejection(&mut self, reason: Rejection) {
        match reason {
            Rejection::Duplicate => self.rejected_duplicate += 1,
            Rejection::Late => self.rejected_late += 1,
            Rejection::Stale => self.rejected_stale += 1,
            Rejection::Unauthorized => self.rejected_unauthorized += 1,
        }
    }
}

impl std::ops::AddAssign for MessageCounts {
    fn add_assign(&mut self, m: MessageCounts) {
        self.sent += m.sent;
        self.delivered += m.delivered;
        self.rejected_duplicate += m.rejected_duplicate;
        self.rejected_late += m.rejected_late;
        self.rejected_stale += m.rejected_stale;
        self.rejected_unauthorized += m.rejected_unauthorized;
        self.acknowledged += m.acknowledged;
    }
}
