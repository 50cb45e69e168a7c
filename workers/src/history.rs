//! What a worker remembers of tasks whose attempts ended (or were replaced): enough to refuse a
//! stale or duplicate assignment and to charge a new attempt what the earlier ones spent. A
//! worker keeps one entry per task it ever ran, so the entry is small: the last attempt number
//! and the spending; the rare non-zero counters sit in a map of their own.
//!
//! A supervisor mints the task ids of a run as one random prefix with the node index in the low
//! 32 bits. The history learns that prefix from the first assignment it is told about and keeps
//! those tasks in a vector by node index: no hash table (which a million-task run would leave
//! half empty, and cold in cache), no key stored. Any other id (a delegated sub-task, another
//! run, an index far beyond the tasks seen) goes to a map.

use quorate_protocols::{Budget, TaskId};

use quorate_protocols::wire::ActionCounts;

/// The last attempt of a task and what its attempts spent.
#[derive(Clone, Copy, Debug)]
struct Ended {
    attempt: u32,
    /// What all attempts so far spent or held reserved.
    spent: Budget,
}

/// Per task: the last ended (or replaced) attempt.
#[derive(Debug, Default)]
pub(crate) struct History {
    /// The id prefix of the run whose tasks live in `dense`.
    prefix: Option<u128>,
    /// Tasks under `prefix`, by node index.
    dense: Vec<Option<Ended>>,
    /// Every other task.
    ended: ahash::AHashMap<TaskId, Ended>,
    /// The counters of the last ended attempt, where any is non-zero.
    counts: ahash::AHashMap<TaskId, ActionCounts>,
}

impl History {
    /// Tasks of `task`'s run go by node index from now on (the first call decides).
    pub(crate) fn adopt_run_of(&mut self, task: TaskId) {
        if self.prefix.is_none() {
            self.prefix = Some(task.prefix());
        }
    }

    /// The node index of `task` if it is kept in `dense`. An index far beyond the tasks seen so
    /// far goes to the map instead, so no id can make the vector huge.
    fn index(&self, task: TaskId) -> Option<usize> {
        let i = task.index() as usize;
        let near = i <= self.dense.len().max(4096) * 2;
        (self.prefix == Some(task.prefix()) && near).then_some(i)
    }

    fn get(&self, task: TaskId) -> Option<&Ended> {
        match self.index(task) {
            Some(i) => self.dense.get(i)?.as_ref(),
            None => self.ended.get(&task),
        }
    }

    fn put(&mut self, task: TaskId, ended: Ended) {
        match self.index(task) {
            Some(i) => match self.dense.get_mut(i) {
                Some(slot) => *slot = Some(ended),
                None => {
                    // Tasks mostly end in the order their indices were minted: the next one
                    // is pushed; a gap is filled with no task.
                    if i > self.dense.len() {
                        self.dense.resize(i, None);
                    }
                    self.dense.push(Some(ended));
                }
            },
            None => {
                self.ended.insert(task, ended);
            }
        }
    }

    /// The last attempt number that ended for `task`, and what its attempts spent or held
    /// reserved ([`Self::attempt`] and [`Self::spent`] in one look-up).
    pub(crate) fn last(&self, task: TaskId) -> Option<(u32, Budget)> {
        self.get(task).map(|e| (e.attempt, e.spent))
    }

    /// The last attempt number that ended for `task`.
    pub(crate) fn attempt(&self, task: TaskId) -> Option<u32> {
        self.get(task).map(|e| e.attempt)
    }

    /// What earlier attempts of `task` spent or held reserved.
    pub(crate) fn spent(&self, task: TaskId) -> Budget {
        self.get(task).map_or(Budget::ZERO, |e| e.spent)
    }

    /// The counters of the last ended attempt of `task`, if one ended.
    pub(crate) fn counts(&self, task: TaskId) -> Option<ActionCounts> {
        self.get(task)
            .map(|_| self.counts.get(&task).copied().unwrap_or_default())
    }

    /// Attempt `attempt` of `task` ended having spent `spent` in all (earlier attempts
    /// included), with `counts`.
    pub(crate) fn ended(
        &mut self,
        task: TaskId,
        attempt: u32,
        spent: Budget,
        counts: ActionCounts,
    ) {
        self.put(task, Ended { attempt, spent });
        self.set_counts(task, counts);
    }

    /// A newer attempt of `task` replaces one (attempt `attempt`) that had spent `spent` in all.
    /// The last ended attempt number, if one is known, stays.
    pub(crate) fn replaced(&mut self, task: TaskId, attempt: u32, spent: Budget) {
        let attempt = self.get(task).map_or(attempt, |e| e.attempt);
        self.put(task, Ended { attempt, spent });
    }

    /// Attempt `attempt` of `task` could not start: it counts as ended, spending nothing more.
    pub(crate) fn unstarted(&mut self, task: TaskId, attempt: u32) {
        let spent = self.spent(task);
        self.ended(task, attempt, spent, ActionCounts::default());
    }

    /// An effect of an ended attempt of `task` happened a second time.
    pub(crate) fn duplicate_effect(&mut self, task: TaskId) {
        if let Some(mut counts) = self.counts(task) {
            counts.duplicate_effects += 1;
            self.set_counts(task, counts);
        }
    }

    fn set_counts(&mut self, task: TaskId, counts: ActionCounts) {
        if counts == ActionCounts::default() {
            // Almost always nothing to remove: no hashing then.
            if !self.counts.is_empty() {
                self.counts.remove(&task);
            }
        } else {
            self.counts.insert(task, counts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_attempt_its_spending_and_rare_counters() {
        let mut h = History::default();
        let t = TaskId::from_u128(1);
        assert_eq!(
            (h.attempt(t), h.spent(t), h.counts(t)),
            (None, Budget::ZERO, None)
        );
        h.replaced(t, 1, Budget::steps(2));
        assert_eq!((h.attempt(t), h.spent(t)), (Some(1), Budget::steps(2)));
        let counts = ActionCounts {
            executed: 1,
            ..ActionCounts::default()
        };
        h.ended(t, 2, Budget::steps(3), counts);
        assert_eq!(
            (h.attempt(t), h.spent(t), h.counts(t)),
            (Some(2), Budget::steps(3), Some(counts))
        );
        assert_eq!(h.last(t), Some((2, Budget::steps(3))));
        h.duplicate_effect(t);
        assert_eq!(h.counts(t).map(|c| c.duplicate_effects), Some(1));
        h.unstarted(t, 3);
        assert_eq!((h.attempt(t), h.spent(t)), (Some(3), Budget::steps(3)));
        assert_eq!(h.counts(t), Some(ActionCounts::default()));
        assert!(h.counts.is_empty(), "zero counters take no entry");
    }

    #[test]
    fn a_runs_minted_ids_go_by_index_and_every_other_id_by_map() {
        let prefix: u128 = 0xabcd << 112;
        let minted = |i: u32| TaskId::minted(prefix, i);
        let mut h = History::default();
        h.adopt_run_of(minted(0));
        h.adopt_run_of(TaskId::from_u128(5)); // the first call decides
        for i in [0u32, 7, 3] {
            let spent = Budget::steps(u64::from(i));
            h.ended(minted(i), 1, spent, ActionCounts::default());
        }
        // Another run's task with the same index, and a far index of this run: the map.
        let other_run = TaskId::from_u128((0x1234 << 112) | 7);
        let far = minted(u32::MAX);
        h.ended(other_run, 2, Budget::steps(9), ActionCounts::default());
        h.ended(far, 3, Budget::steps(8), ActionCounts::default());
        assert_eq!(h.dense.len(), 8, "indices 0..=7");
        assert_eq!(
            (
                h.dense[0].is_some(),
                h.dense[1].is_some(),
                h.dense[3].is_some()
            ),
            (true, false, true),
            "a gap before an index is filled with no task"
        );
        assert_eq!(h.ended.len(), 2);
        assert_eq!(
            (h.attempt(minted(7)), h.spent(minted(7))),
            (Some(1), Budget::steps(7))
        );
        assert_eq!(h.attempt(minted(5)), None, "a gap in the vector is no task");
        assert_eq!(
            (h.attempt(other_run), h.spent(other_run)),
            (Some(2), Budget::steps(9))
        );
        assert_eq!((h.attempt(far), h.spent(far)), (Some(3), Budget::steps(8)));
        h.replaced(minted(3), 2, Budget::steps(4));
        assert_eq!(
            (h.attempt(minted(3)), h.spent(minted(3))),
            (Some(1), Budget::steps(4)),
            "a replacement keeps the last ended attempt number"
        );
        h.replaced(minted(4), 6, Budget::steps(1));
        assert_eq!(h.attempt(minted(4)), Some(6), "or takes the replaced one's");
    }
}
