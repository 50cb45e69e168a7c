//! Decisions about a running attempt (cancel, approve, reject), and cancelling a task with
//! every sub-task below it.

use quorate_protocols::wire::{Control, Outcome};
use quorate_protocols::{Envelope, Millis, TaskId};

use super::{InputError, WorkerCore};

impl WorkerCore {
    /// A decision about a running attempt: cancel, approve or reject.
    pub fn handle_control(
        &mut self,
        now: Millis,
        envelope: Envelope<Control>,
    ) -> Result<(), InputError> {
        let task = envelope.task;
        let got = envelope.attempt;
        let latest = self.latest_attempt(task);
        if matches!(envelope.payload, Control::Cancel) && latest.is_none_or(|n| n < got) {
            // The cancel overtook its assignment (the transport may reorder). Nothing of that
            // attempt ran, so it ends here, unstarted: the cancel is acknowledged at once, and
            // the assignment, when it comes, is refused as a duplicate instead of running after
            // it. An older attempt still running is stale (the supervisor moved on): it is
            // cancelled too, and what it spent stays charged to the task.
            self.cancel_tree(now, task);
            // Still there only if it could not end yet (a sub-task still open): the newer
            // attempt replaces it, as an assignment would.
            self.keep_spending_of_replaced(task);
            // The stale attempt's own final reply is late for the supervisor (it names the older
            // attempt), so the acknowledgement carries what it did.
            let carried = self.history.counts(task).unwrap_or_default();
            self.history.adopt_run_of(task);
            self.end_unstarted(task, got);
            self.reply_unstarted(&envelope, Outcome::Cancelled, carried);
            return Ok(());
        }
        let mut cancel_tree = false;
        let below = self.descendants(task);
        // A decision about a call a sub-task parked names the sub-task in its action. An
        // approval goes down to that sub-task (and the task may pass up its next request); a
        // rejection is recorded in the sub-task's book, then cancels the whole task from the top
        // down, as it would had the task parked the call itself: no sub-task goes on after it.
        let sub_task_decision = match &envelope.payload {
            Control::Approve { action } | Control::Reject { action } => {
                (action.task != task).then_some(*action)
            }
            Control::Cancel => None,
        };
        let result = self.with_attempt(now, task, |attempt, deps| {
            if attempt.number() != got {
                return Err(InputError::StaleAttempt {
                    task,
                    current: attempt.number(),
                    got,
                });
            }
            match envelope.payload {
                // Decided below, after this check that the decision is for this attempt.
                Control::Approve { .. } | Control::Reject { .. } if sub_task_decision.is_some() => {
                    Ok(())
                }
                Control::Cancel => {
                    cancel_tree = true;
                    attempt.on_cancel(deps)
                }
                Control::Approve { action } => attempt.on_approval(deps, action, true),
                Control::Reject { action } => attempt.on_approval(deps, action, false),
            }
        });
        if let (Some(action), Ok(())) = (sub_task_decision, &result) {
            let live = below.contains(&action.task);
            if matches!(envelope.payload, Control::Approve { .. }) {
                if !live {
                    return Err(InputError::NotParked { action });
                }
                let resumed =
                    self.with_attempt(now, action.task, |a, d| a.on_approval(d, action, true));
                // Only now may the task pass up its next request: the approved sub-task is
                // working again, so no `Quiet` follows that request yet.
                let _ = self.with_attempt(now, task, |a, d| {
                    a.approval_decided(d, action);
                    Ok(())
                });
                return resumed;
            }
            if live {
                let _ = self.with_attempt(now, action.task, |a, d| a.reject_parked(d, action));
            }
            self.cancel_tree(now, task);
        }
        if cancel_tree {
            // A cancel reaches every sub-task below the task; nothing starts after it.
            self.cancel_all(now, below);
        }
        result
    }

    /// Cancels `task` and every sub-task below it, the task first.
    pub(super) fn cancel_tree(&mut self, now: Millis, task: TaskId) {
        let below = self.descendants(task);
        self.cancel_all(now, std::iter::once(task).chain(below));
    }

    /// Cancels the running attempt of each of `tasks`, in order (a task before its sub-tasks,
    /// so none goes on after its parent stopped); tasks already ended are skipped.
    fn cancel_all(&mut self, now: Millis, tasks: impl IntoIterator<Item = TaskId>) {
        for t in tasks {
            let _ = self.with_attempt(now, t, |a, d| a.on_cancel(d));
        }
    }
}
