use quorate_protocols::{ActionId, Budget, DedupeKey, EvidenceRef, TaskId, TaskState};

/// The supervisor's record of one task. A large run keeps one per task, so it holds only what
/// every task needs; what few tasks have (evidence, a parked approval, evidence text) sits in
/// [`SlotExtra`], behind one pointer.
#[derive(Debug)]
pub(crate) struct TaskSlot {
    pub(crate) id: TaskId,
    pub(crate) seen: SeenKeys,
    /// The accepted result (its evidence is in `extra`).
    pub(crate) result: Option<serde_json::Value>,
    pub(crate) granted: Budget,
    pub(crate) spent: Budget,
    /// Bumped on every dispatch; replies must name it.
    pub(crate) version: u32,
    pub(crate) attempt: u32,
    /// Index of the worker the task went to.
    pub(crate) worker: Option<u32>,
    pub(crate) deps_left: u32,
    pub(crate) state: TaskState,
    pub(crate) allocated: bool,
    /// Waiting for the shell to check store preconditions.
    pub(crate) checking: bool,
    extra: Option<Box<SlotExtra>>,
}

/// What only some tasks have.
#[derive(Debug, Default)]
struct SlotExtra {
    /// The evidence the accepted result rests on.
    evidence: Vec<EvidenceRef>,
    /// The action parked for a human's decision.
    pending_approval: Option<ActionId>,
    /// Evidence text handed to the task with its assignment (data only); it moves with the
    /// task across a replan.
    evidence_text: Vec<String>,
}

impl TaskSlot {
    pub(crate) fn new(id: TaskId, deps: u32) -> Self {
        Self {
            id,
            seen: SeenKeys::default(),
            result: None,
            granted: Budget::ZERO,
            spent: Budget::ZERO,
            version: 0,
            attempt: 0,
            worker: None,
            deps_left: deps,
            state: TaskState::Pending,
            allocated: false,
            checking: false,
            extra: None,
        }
    }

    /// `true` once an accepted reply arrived for the task.
    pub(crate) fn reported(&self) -> bool {
        !self.seen.is_empty()
    }

    fn extra_mut(&mut self) -> &mut SlotExtra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// Keeps the accepted result and its evidence.
    pub(crate) fn set_result(&mut self, value: serde_json::Value, evidence: Vec<EvidenceRef>) {
        self.result = Some(value);
        if !evidence.is_empty() || self.extra.is_some() {
            self.extra_mut().evidence = evidence;
        }
    }

    /// The evidence of the accepted result.
    pub(crate) fn evidence(&self) -> &[EvidenceRef] {
        self.extra.as_ref().map_or(&[], |e| &e.evidence)
    }

    /// Parks `action` for a human's decision.
    pub(crate) fn park_approval(&mut self, action: ActionId) {
        self.extra_mut().pending_approval = Some(action);
    }

    /// The parked action, which stops being parked.
    pub(crate) fn take_approval(&mut self) -> Option<ActionId> {
        self.extra.as_mut()?.pending_approval.take()
    }

    /// The evidence text handed to the task.
    pub(crate) fn evidence_text(&self) -> &[String] {
        self.extra.as_ref().map_or(&[], |e| &e.evidence_text)
    }

    /// Sets the evidence text handed to the task.
    pub(crate) fn set_evidence_text(&mut self, texts: Vec<String>) {
        if !texts.is_empty() || self.extra.is_some() {
            self.extra_mut().evidence_text = texts;
        }
    }
}

/// The dedupe keys of the replies accepted for one task. Almost always one or two (an answer,
/// perhaps an approval request first), so the first is kept inline and the rest in a short list.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeenKeys {
    first: Option<DedupeKey>,
    /// Boxed slice: one pointer in every task, grown by copying in the rare task that needs it.
    rest: Option<Box<[DedupeKey]>>,
}

impl SeenKeys {
    /// `true` if `key` was seen.
    pub(crate) fn contains(&self, key: &DedupeKey) -> bool {
        self.first.as_ref() == Some(key) || self.rest.as_ref().is_some_and(|r| r.contains(key))
    }

    /// Records `key`; `false` if it was seen before.
    pub(crate) fn insert(&mut self, key: DedupeKey) -> bool {
        if self.contains(&key) {
            return false;
        }
        match self.first {
            None => self.first = Some(key),
            Some(_) => {
                let mut rest = self.rest.take().map(Vec::from).unwrap_or_default();
                rest.push(key);
                self.rest = Some(rest.into_boxed_slice());
            }
        }
        true
    }

    /// `true` if no key was seen.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

/// Finds a task's slot from its id. Ids the core mints carry the node index in their low 32
/// bits under a prefix drawn at random per run (the 96 upper bits of a v4 id, about 90 of them
/// random), so a reply leads to its slot without a map lookup (a million-task run would
/// otherwise keep a million-entry map, cold in cache). Ids that do not follow the pattern
/// (restored by a resume, kept across a replan that moved their node) live in a small map.
///
/// Knowing one task id of a run thus gives the others: task ids are names, not secrets. A reply
/// is accepted on its sender (the assigned worker's identity, stamped by the transport), never on
/// knowing an id.
#[derive(Debug)]
pub(crate) struct TaskIndex {
    prefix: u128,
    others: ahash::AHashMap<TaskId, u32>,
}

const INDEX_BITS: u128 = 0xffff_ffff;

impl TaskIndex {
    /// An index with a fresh random prefix.
    pub(crate) fn new() -> Self {
        Self {
            prefix: TaskId::new().as_uuid().as_u128() & !INDEX_BITS,
            others: ahash::AHashMap::new(),
        }
    }

    /// A fresh id for node `i`.
    pub(crate) fn mint(&self, i: u32) -> TaskId {
        TaskId::from_u128(self.prefix | u128::from(i))
    }

    fn encoded(&self, id: &TaskId) -> Option<u32> {
        let v = id.as_uuid().as_u128();
        (v & !INDEX_BITS == self.prefix).then_some(v as u32)
    }

    /// The node index of task `id` among `tasks`.
    pub(crate) fn get(&self, id: &TaskId, tasks: &[TaskSlot]) -> Option<u32> {
        if let Some(i) = self.encoded(id) {
            if tasks.get(i as usize).is_some_and(|t| t.id == *id) {
                return Some(i);
            }
        }
        self.others.get(id).copied()
    }

    /// Task `id` is at node `i` now.
    pub(crate) fn insert(&mut self, id: TaskId, i: u32) {
        if self.encoded(&id) == Some(i) {
            self.others.remove(&id);
        } else {
            self.others.insert(id, i);
        }
    }

    /// Task `id` is gone.
    pub(crate) fn remove(&mut self, id: &TaskId) {
        self.others.remove(id);
    }

    /// Forgets every id and indexes `tasks` afresh (after a replan).
    pub(crate) fn rebuild(&mut self, tasks: &[TaskSlot]) {
        self.others.clear();
        for (i, t) in tasks.iter().enumerate() {
            self.insert(t.id, i as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_find_their_slot_and_others_use_the_map() {
        let mut index = TaskIndex::new();
        let mut tasks: Vec<TaskSlot> = (0..3).map(|i| TaskSlot::new(index.mint(i), 0)).collect();
        assert_eq!(index.get(&tasks[2].id, &tasks), Some(2));
        assert!(index.others.is_empty(), "minted ids need no map entry");
        // A restored id (not minted here) goes to the map; the minted id it replaced is gone.
        let minted = tasks[1].id;
        let restored = TaskId::from_u128(77);
        index.remove(&minted);
        index.insert(restored, 1);
        tasks[1].id = restored;
        assert_eq!(index.get(&restored, &tasks), Some(1));
        assert_eq!(
            index.get(&minted, &tasks),
            None,
            "the slot no longer holds it"
        );
        // An id with the right prefix but an index out of range, or another run's id: unknown.
        assert_eq!(index.get(&index.mint(9), &tasks), None);
        assert_eq!(index.get(&TaskId::new(), &tasks), None);
        // Slots reordered (a replan): rebuilt, every id still leads to its slot.
        tasks.swap(0, 2);
        index.rebuild(&tasks);
        for (i, t) in tasks.iter().enumerate() {
            assert_eq!(index.get(&t.id, &tasks), Some(i as u32));
        }
    }
}
