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
    pub(crate) seen: SeenKeys,
    pub(crate) result: Option<(serde_json::Value, Vec<EvidenceRef>)>,
    pub(crate) allocated: bool,
    pub(crate) granted: Budget,
    pub(crate) spent: Budget,
    pub(crate) pending_approval: Option<ActionId>,
    /// Evidence text handed to the task with its assignment (data only); it moves with the
    /// task across a replan.
    pub(crate) evidence_text: Vec<String>,
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
            seen: SeenKeys::default(),
            result: None,
            allocated: false,
            granted: Budget::ZERO,
            spent: Budget::ZERO,
            pending_approval: None,
            evidence_text: Vec::new(),
            checking: false,
        }
    }

    /// `true` once an accepted reply arrived for the task.
    pub(crate) fn reported(&self) -> bool {
        !self.seen.is_empty()
    }
}

/// The dedupe keys of the replies accepted for one task. Almost always one or two (an answer,
/// perhaps an approval request first), so the first is kept inline and the rest in a short list.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeenKeys {
    first: Option<DedupeKey>,
    rest: Vec<DedupeKey>,
}

impl SeenKeys {
    /// `true` if `key` was seen.
    pub(crate) fn contains(&self, key: &DedupeKey) -> bool {
        self.first.as_ref() == Some(key) || self.rest.contains(key)
    }

    /// Records `key`; `false` if it was seen before.
    pub(crate) fn insert(&mut self, key: DedupeKey) -> bool {
        if self.contains(&key) {
            return false;
        }
        match self.first {
            None => self.first = Some(key),
            Some(_) => self.rest.push(key),
        }
        true
    }

    /// `true` if no key was seen.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}
