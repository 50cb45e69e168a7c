use std::collections::HashSet;

use quorate_protocols::{ActionId, Budget, DedupeKey, EvidenceRef, TaskId, TaskState};

/// The supervisor's record of one task.
#[derive(Debug)]
pub(crate) struct TaskSlot {
    pub(crate) id: TaskId,
    pub(crate) state: TaskState,
    /// Bumped on every dispatch; replies must name it.
    pub(crate) version: u64,
    pub(crate) attempt: u32,
    pub(crate) worker: Option<usize>,
    pub(crate) deps_left: usize,
    pub(crate) seen: HashSet<DedupeKey>,
    pub(crate) result: Option<(serde_json::Value, Vec<EvidenceRef>)>,
    pub(crate) allocated: bool,
    pub(crate) granted: Budget,
    pub(crate) spent: Budget,
    pub(crate) dispatched_at: u64,
    pub(crate) pending_approval: Option<ActionId>,
    /// Waiting for the shell to check store preconditions.
    pub(crate) checking: bool,
}

impl TaskSlot {
    pub(crate) fn new(id: TaskId, deps: usize) -> Self {
        Self {
            id,
            state: TaskState::Pending,
            version: 0,
            attempt: 0,
            worker: None,
            deps_left: deps,
            seen: HashSet::new(),
            result: None,
            allocated: false,
            granted: Budget::ZERO,
            spent: Budget::ZERO,
            dispatched_at: 0,
            pending_approval: None,
            checking: false,
        }
    }

    /// `true` once an accepted reply arrived for the task.
    pub(crate) fn reported(&self) -> bool {
        !self.seen.is_empty()
    }
}
