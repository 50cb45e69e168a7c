//! Attempt timeouts: an attempt with no accepted reply after `attempt_timeout_ms` is run again,
//! up to `max_attempts`, then its task fails. Both cores arm one when an attempt starts (and
//! again when an approval lets it run on), and let one fire only while that attempt still runs.

use std::collections::VecDeque;

/// What an attempt that timed out leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Run the task again, as a new attempt.
    Retry,
    /// The task fails with this observation: it had its attempts.
    GiveUp(String),
}

/// Attempt `attempt` of a task timed out; `max_attempts` are allowed.
pub(crate) fn on_timeout(attempt: u32, max_attempts: u32) -> Expiry {
    if attempt >= max_attempts {
        Expiry::GiveUp(format!("no reply after {attempt} attempts"))
    } else {
        Expiry::Retry
    }
}

/// Armed attempt timeouts, `(deadline, task, attempt)` in the order they were armed. Timeouts
/// are uniform, so the front is the earliest; entries of attempts that ended are dropped lazily.
#[derive(Debug)]
pub(crate) struct AttemptTimeouts<K> {
    queue: VecDeque<(u64, K, u32)>,
}

impl<K> Default for AttemptTimeouts<K> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
        }
    }
}

impl<K: Copy> AttemptTimeouts<K> {
    /// Attempt `attempt` of `task` times out at `at`.
    pub(crate) fn arm(&mut self, at: u64, task: K, attempt: u32) {
        self.queue.push_back((at, task, attempt));
    }

    /// Drops the front entries whose attempt no longer runs (`live` says which does).
    pub(crate) fn prune(&mut self, live: impl Fn(K, u32) -> bool) {
        while let Some(&(_, task, attempt)) = self.queue.front() {
            if live(task, attempt) {
                break;
            }
            self.queue.pop_front();
        }
    }

    /// Renames every armed task by `rename`, dropping those it maps to `None` (a replan
    /// renumbers tasks and drops some).
    pub(crate) fn rename(&mut self, rename: impl Fn(K) -> Option<K>) {
        self.queue = std::mem::take(&mut self.queue)
            .into_iter()
            .filter_map(|(at, task, attempt)| rename(task).map(|t| (at, t, attempt)))
            .collect();
    }

    /// The earliest deadline armed.
    pub(crate) fn next(&self) -> Option<u64> {
        self.queue.front().map(|&(at, _, _)| at)
    }

    /// The next attempt that is due at `now` and still runs (`live`), if any; it is disarmed.
    pub(crate) fn pop_due(&mut self, now: u64, live: impl Fn(K, u32) -> bool) -> Option<(K, u32)> {
        while let Some(&(at, task, attempt)) = self.queue.front() {
            if at > now {
                return None;
            }
            self.queue.pop_front();
            if live(task, attempt) {
                return Some((task, attempt));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_retried_until_the_last_one() {
        assert_eq!(on_timeout(1, 3), Expiry::Retry);
        assert_eq!(on_timeout(2, 3), Expiry::Retry);
        assert_eq!(
            on_timeout(3, 3),
            Expiry::GiveUp("no reply after 3 attempts".into())
        );
    }

    #[test]
    fn only_due_attempts_that_still_run_fire() {
        let mut t = AttemptTimeouts::default();
        t.arm(10, 'a', 1);
        t.arm(20, 'b', 1);
        t.arm(30, 'a', 2);
        assert_eq!(t.next(), Some(10));
        let live = |task: char, attempt: u32| !(task == 'a' && attempt == 1);
        assert_eq!(t.pop_due(5, live), None, "nothing due yet");
        assert_eq!(t.pop_due(25, live), Some(('b', 1)), "a/1 ended: skipped");
        assert_eq!(t.pop_due(25, live), None);
        t.prune(|_, _| false);
        assert_eq!(t.next(), None, "a/2 ended too");
    }
}
