use quorate_protocols::{ActionId, Budget, EvidenceRef, TaskId, TaskState};

use crate::rules::{Parked, SeenKeys};

use quorate_protocols::wire::SharedEvidence;

use ahash::AHashMap;

/// The supervisor's record of one task. A large run keeps one per task, so it holds only what
/// every task needs; what few tasks have (a parked approval, evidence text) sits in
/// [`SlotExtra`], behind one pointer. The task's id is not here: [`TaskIndex`] knows it.
#[derive(Debug)]
pub(crate) struct TaskSlot {
    pub(crate) seen: SeenKeys,
    /// The accepted result (its evidence is in `extra`).
    pub(crate) result: Option<quorate_protocols::Payload>,
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
    /// Its accepted result is being committed (running until the commit is answered).
    pub(crate) committing: bool,
    /// The evidence the accepted result rests on, shared with the assignments of the task's
    /// dependents.
    evidence: SharedEvidence,
    extra: Option<Box<SlotExtra>>,
}

/// What only some tasks have.
#[derive(Debug, Default)]
struct SlotExtra {
    /// The action parked for a human's decision, and its `Quiet` handshake.
    parked: Parked,
    /// The top-up the task asked for when its slice ran out, until it is answered.
    top_up: Option<super::TopUpRequest>,
    /// Evidence text handed to the task with its assignment (data only); it moves with the
    /// task across a replan.
    evidence_text: Vec<String>,
    /// The attempt whose earlier replies (an approval request, a quiet notice) put call
    /// outputs on record, and those calls: what a later answer of the attempt may cite.
    recorded: Option<(u32, Vec<ActionId>)>,
}

impl TaskSlot {
    pub(crate) fn new(deps: u32) -> Self {
        Self {
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
            committing: false,
            evidence: SharedEvidence::default(),
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
    pub(crate) fn set_result(
        &mut self,
        value: quorate_protocols::Payload,
        evidence: Vec<EvidenceRef>,
    ) {
        self.result = Some(value);
        self.evidence = SharedEvidence::from(evidence);
    }

    /// The evidence of the accepted result.
    pub(crate) fn evidence(&self) -> &[EvidenceRef] {
        &self.evidence
    }

    /// The evidence of the accepted result, shared.
    pub(crate) fn shared_evidence(&self) -> SharedEvidence {
        self.evidence.clone()
    }

    /// Keeps the call outputs that a non-final reply of `attempt` put on record (see
    /// [`quorate_protocols::wire::CallEvent::recorded_output`]), for the attempt's answer to
    /// cite. Those of an earlier attempt are dropped.
    pub(crate) fn note_recorded(
        &mut self,
        attempt: u32,
        calls: &[quorate_protocols::wire::CallEvent],
    ) {
        let mut outputs = calls.iter().filter_map(|c| c.recorded_output()).peekable();
        let kept = self.extra.as_ref().and_then(|e| e.recorded.as_ref());
        if outputs.peek().is_none() && kept.is_none_or(|(a, _)| *a == attempt) {
            return;
        }
        let recorded = &mut self.extra_mut().recorded;
        match recorded {
            Some((a, list)) if *a == attempt => list.extend(outputs),
            _ => *recorded = Some((attempt, outputs.collect())),
        }
    }

    /// The call outputs earlier replies of `attempt` put on record.
    pub(crate) fn recorded(&self, attempt: u32) -> &[ActionId] {
        match self.extra.as_ref().and_then(|e| e.recorded.as_ref()) {
            Some((a, list)) if *a == attempt => list,
            _ => &[],
        }
    }

    /// The worker asks a human about `action` (a delegated sub-task's when `sub_task`): it is
    /// parked ([`Parked::request`]). `true` if the task is idle now.
    pub(crate) fn request_approval(&mut self, action: ActionId, sub_task: bool) -> bool {
        self.extra_mut().parked.request(action, sub_task)
    }

    /// The worker says `Quiet` for `action` ([`Parked::quiet`]).
    pub(crate) fn quiet(&mut self, action: ActionId) -> bool {
        self.extra_mut().parked.quiet(action)
    }

    /// The parked action, which stops being parked.
    pub(crate) fn take_approval(&mut self) -> Option<ActionId> {
        self.extra.as_mut()?.parked.take()
    }

    /// Parks the task's top-up request for a person's answer.
    pub(crate) fn park_top_up(&mut self, request: super::TopUpRequest) {
        self.extra_mut().top_up = Some(request);
    }

    /// The top-up request waiting for an answer, if any.
    pub(crate) fn parked_top_up(&self) -> Option<&super::TopUpRequest> {
        self.extra.as_ref()?.top_up.as_ref()
    }

    /// The request, which stops waiting.
    pub(crate) fn take_top_up(&mut self) -> Option<super::TopUpRequest> {
        self.extra.as_mut()?.top_up.take()
    }

    /// Whether the task's parked action is a sub-task's while other sub-tasks may still work
    /// (meaningful while the task waits for approval; set anew by every request).
    pub(crate) fn not_alone(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.parked.not_alone())
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

/// How many tasks are in each state, kept as tasks move, so "is every task terminal" is a
/// look at four numbers instead of a pass over every task.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StateCounts([usize; TaskState::ALL.len()]);

impl StateCounts {
    /// The counts of `tasks`.
    pub(crate) fn of(tasks: &[TaskSlot]) -> Self {
        let mut c = Self::default();
        for t in tasks {
            c.0[state_index(t.state)] += 1;
        }
        c
    }

    /// One task moved from `from` to `to`.
    pub(crate) fn moved(&mut self, from: TaskState, to: TaskState) {
        self.0[state_index(from)] -= 1;
        self.0[state_index(to)] += 1;
    }

    /// Tasks in `state`.
    pub(crate) fn get(&self, state: TaskState) -> usize {
        self.0[state_index(state)]
    }

    /// How many tasks are in a live (non-terminal) state.
    pub(crate) fn live(&self) -> usize {
        [
            TaskState::Pending,
            TaskState::Ready,
            TaskState::Running,
            TaskState::WaitingApproval,
        ]
        .into_iter()
        .map(|s| self.get(s))
        .sum()
    }

    /// `true` if no task is in a live (non-terminal) state.
    pub(crate) fn all_terminal(&self) -> bool {
        [
            TaskState::Pending,
            TaskState::Ready,
            TaskState::Running,
            TaskState::WaitingApproval,
        ]
        .into_iter()
        .all(|s| self.get(s) == 0)
    }
}

/// A task state's number, 0 to 7, in the order of the state machine: the index of the
/// per-state counters and the code the packed log writes.
pub(crate) const fn state_index(state: TaskState) -> usize {
    match state {
        TaskState::Pending => 0,
        TaskState::Ready => 1,
        TaskState::Running => 2,
        TaskState::WaitingApproval => 3,
        TaskState::Completed => 4,
        TaskState::Failed => 5,
        TaskState::StoppedLimit => 6,
        TaskState::Cancelled => 7,
    }
}

/// The task ids of a run's slots, both ways. Ids the core mints carry the node index in their
/// low 32 bits under a prefix drawn per run from the core's id source (the 96 upper bits of a v4 id, about 90
/// of them random), so neither a slot nor a map holds them, and a reply leads to its slot
/// without a lookup (a million-task run would otherwise keep a million-entry map, cold in
/// cache). Ids that do not follow the pattern (restored by a resume, fresh for a node a replan
/// added, kept across a replan that moved their node) live in two small maps.
///
/// Knowing one task id of a run thus gives the others: task ids are names, not secrets. A reply
/// is accepted on its sender (the assigned worker's identity, stamped by the transport), never on
/// knowing an id.
#[derive(Debug)]
pub(crate) struct TaskIndex {
    prefix: u128,
    /// Slots `0..len` exist.
    len: u32,
    /// Ids other than the minted one of their slot: id to slot, and slot to id.
    slots: AHashMap<TaskId, u32>,
    ids: AHashMap<u32, TaskId>,
}

impl TaskIndex {
    /// `len` slots, each with its minted id under `prefix` (fresh per run, from the core's
    /// [`IdSource`](quorate_protocols::IdSource::task_prefix)).
    pub(crate) fn new(len: u32, prefix: u128) -> Self {
        Self {
            prefix,
            len,
            slots: AHashMap::new(),
            ids: AHashMap::new(),
        }
    }

    fn mint(&self, i: u32) -> TaskId {
        TaskId::minted(self.prefix, i)
    }

    /// The id of slot `i`.
    pub(crate) fn id(&self, i: u32) -> TaskId {
        // Almost always no id was restored or replanned: no hashing then.
        if self.ids.is_empty() {
            return self.mint(i);
        }
        self.ids.get(&i).copied().unwrap_or_else(|| self.mint(i))
    }

    /// The slot of task `id`.
    pub(crate) fn get(&self, id: &TaskId) -> Option<u32> {
        let i = id.index();
        let minted = self.ids.is_empty() || !self.ids.contains_key(&i);
        if id.prefix() == self.prefix && i < self.len && minted {
            return Some(i);
        }
        if self.slots.is_empty() {
            return None;
        }
        self.slots.get(id).copied()
    }

    /// Slot `i`'s task is `id` from now on; its earlier id leads nowhere.
    pub(crate) fn set(&mut self, i: u32, id: TaskId) {
        if let Some(old) = self.ids.remove(&i) {
            self.slots.remove(&old);
        }
        if id != self.mint(i) {
            self.ids.insert(i, id);
            self.slots.insert(id, i);
        }
    }

    /// After a replan: slot `j` holds the task `ids[j]`.
    pub(crate) fn rebuild(&mut self, ids: &[TaskId]) {
        self.slots.clear();
        self.ids.clear();
        self.len = ids.len() as u32;
        for (j, &id) in ids.iter().enumerate() {
            self.set(j as u32, id);
        }
    }

    /// No slot is left (the records were taken for the final report).
    pub(crate) fn clear(&mut self) {
        self.rebuild(&[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_need_no_map_and_others_go_both_ways() {
        let mut index = TaskIndex::new(3, quorate_protocols::IdSource::seeded(1).task_prefix());
        let ids: Vec<TaskId> = (0..3).map(|i| index.id(i)).collect();
        assert_eq!(index.get(&ids[2]), Some(2));
        assert!(
            index.slots.is_empty() && index.ids.is_empty(),
            "minted ids need no map"
        );
        // A restored id (not minted here) goes to the maps; the minted id it replaced is gone.
        let restored = TaskId::from_u128(77);
        index.set(1, restored);
        assert_eq!(index.id(1), restored);
        assert_eq!(index.get(&restored), Some(1));
        assert_eq!(index.get(&ids[1]), None, "slot 1 no longer holds it");
        // Replaced again: the restored id leads nowhere either.
        index.set(1, TaskId::from_u128(78));
        assert_eq!(index.get(&restored), None);
        assert_eq!(index.get(&index.id(1)), Some(1));
        assert_ne!(index.id(1), ids[1]);
        // Back to the minted id: the maps are empty again.
        index.set(1, ids[1]);
        assert!(index.slots.is_empty() && index.ids.is_empty());
        // An id with the right prefix but out of range, or another run's id: unknown.
        assert_eq!(index.get(&index.mint(3)), None);
        assert_eq!(index.get(&TaskId::from_u128(79)), None);
        // Slots reordered (a replan): every id still leads to its slot, even a minted id that
        // now sits in another slot.
        let moved = vec![ids[2], ids[0], TaskId::from_u128(80), ids[1]];
        index.rebuild(&moved);
        for (j, id) in moved.iter().enumerate() {
            assert_eq!(index.get(id), Some(j as u32));
            assert_eq!(index.id(j as u32), *id);
        }
        index.clear();
        assert_eq!(index.get(&ids[0]), None);
    }

    #[test]
    fn state_counts_follow_the_moves_and_tell_when_all_are_terminal() {
        let mut tasks: Vec<TaskSlot> = (0..3).map(|_| TaskSlot::new(0)).collect();
        tasks[2].state = TaskState::Completed;
        let mut c = StateCounts::of(&tasks);
        assert_eq!(
            (c.get(TaskState::Pending), c.get(TaskState::Completed)),
            (2, 1)
        );
        assert!(!c.all_terminal());
        c.moved(TaskState::Pending, TaskState::WaitingApproval);
        assert_eq!(c.get(TaskState::Pending), 1);
        assert!(!c.all_terminal(), "waiting for a human is not terminal");
        c.moved(TaskState::WaitingApproval, TaskState::Cancelled);
        c.moved(TaskState::Pending, TaskState::Failed);
        assert!(c.all_terminal());
    }

    #[test]
    fn a_task_record_stays_small() {
        // A million-task run keeps one per task. (160 since the evidence moved here from the
        // boxed extra: 8 more bytes in every slot, and no box for each task that cites any.)
        assert!(
            std::mem::size_of::<TaskSlot>() <= 160,
            "{}",
            std::mem::size_of::<TaskSlot>()
        );
    }
}
