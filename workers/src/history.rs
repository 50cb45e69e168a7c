//! What a worker remembers of tasks whose attempts ended (or were replaced): enough to refuse a
//! stale or duplicate assignment and to charge a new attempt what the earlier ones spent. A
//! worker keeps one entry per task it ever ran, so the entry is small: the last attempt number
//! and the spending; the rare non-zero counters sit in a map of their own.

use quorate_protocols::{Budget, TaskId};

use crate::messages::ActionCounts;

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
    ended: ahash::AHashMap<TaskId, Ended>,
    /// The counters of the last ended attempt, where any is non-zero.
    counts: ahash::AHashMap<TaskId, ActionCounts>,
}

impl History {
    /// The last attempt number that ended for `task`.
    pub(crate) fn attempt(&self, task: TaskId) -> Option<u32> {
        self.ended.get(&task).map(|e| e.attempt)
    }

    /// What earlier attempts of `task` spent or held reserved.
    pub(crate) fn spent(&self, task: TaskId) -> Budget {
        self.ended.get(&task).map_or(Budget::ZERO, |e| e.spent)
    }

    /// The counters of the last ended attempt of `task`, if one ended.
    pub(crate) fn counts(&self, task: TaskId) -> Option<ActionCounts> {
        self.ended
            .contains_key(&task)
            .then(|| self.counts.get(&task).copied().unwrap_or_default())
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
        self.ended.insert(task, Ended { attempt, spent });
        self.set_counts(task, counts);
    }

    /// A newer attempt of `task` replaces one (attempt `attempt`) that had spent `spent` in all.
    pub(crate) fn replaced(&mut self, task: TaskId, attempt: u32, spent: Budget) {
        self.ended
            .entry(task)
            .or_insert(Ended {
                attempt,
                spent: Budget::ZERO,
            })
            .spent = spent;
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
            self.counts.remove(&task);
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
        h.duplicate_effect(t);
        assert_eq!(h.counts(t).map(|c| c.duplicate_effects), Some(1));
        h.unstarted(t, 3);
        assert_eq!((h.attempt(t), h.spent(t)), (Some(3), Budget::steps(3)));
        assert_eq!(h.counts(t), Some(ActionCounts::default()));
        assert!(h.counts.is_empty(), "zero counters take no entry");
    }
}
