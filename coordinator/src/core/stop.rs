//! Ending tasks and the run: completion, failure, cancellation of live tasks, the single stop reason.

use quorate_state::AccountId;

use super::*;
use crate::event::EventKind;
use crate::StopReason;

impl SupervisorCore {
    pub(super) fn complete(
        &mut self,
        now: u64,
        i: u32,
        value: serde_json::Value,
        evidence: Vec<quorate_protocols::EvidenceRef>,
    ) {
        let key = self.result_key(i);
        self.effects.push_back(Effect::CommitResult {
            key,
            value: value.clone(),
        });
        self.record(now, Some(i), EventKind::ResultCommitted);
        self.tasks[i as usize].set_result(value, evidence);
        self.end_task(now, i, TaskEvent::AcceptancePassed);
        for k in 0..self.plan.dependents(i).len() {
            let d = self.plan.dependents(i)[k];
            let slot = &mut self.tasks[d as usize];
            slot.deps_left -= 1;
            if slot.deps_left == 0 && self.pending_stop.is_none() {
                self.make_ready(now, d);
            }
        }
    }

    pub(super) fn fail(&mut self, now: u64, i: u32, observation: String) {
        let node = self.plan.node(i).id.to_string();
        self.stop_with(
            now,
            i,
            TaskEvent::Failed,
            StopReason::Failed { node, observation },
        );
    }

    /// Task `i` ends with `event`, which stops the run for `reason`. The stop is logged
    /// *before* the task's terminal transition, so a supervisor resumed from a log cut anywhere
    /// in between still knows the run is stopping, and why.
    pub(super) fn stop_with(&mut self, now: u64, i: u32, event: TaskEvent, reason: StopReason) {
        self.note_stop(now, reason);
        self.end_task(now, i, event);
        self.cancel_live(now);
    }

    /// Records the first stop cause (later ones are ignored).
    fn note_stop(&mut self, now: u64, reason: StopReason) {
        if self.pending_stop.is_none() {
            // Logged so that a supervisor resumed from the log finishes the same stop.
            self.record(
                now,
                None,
                EventKind::StopRequested {
                    reason: reason.clone(),
                },
            );
            self.pending_stop = Some(reason);
        }
    }

    /// Moves task `i` to a terminal state and returns its unused budget to the root.
    pub(super) fn end_task(&mut self, now: u64, i: u32, event: TaskEvent) {
        if !self.transition(now, i, event) {
            return;
        }
        let slot = &mut self.tasks[i as usize];
        if slot.allocated {
            // A task that never reported is charged its whole slice: its calls may have spent it.
            let spent = if slot.reported() {
                slot.spent.min(&slot.granted)
            } else {
                slot.granted
            };
            slot.spent = spent;
            let _ = self
                .root
                .child_closed(AccountId::Task(self.by_id.id(i)), spent);
            self.record(now, Some(i), EventKind::TaskClosed { spent });
        }
    }

    /// The worker of task `i`, closed while its attempt was out, acknowledged with what the
    /// attempt spent: the charge made at the close (the whole slice if the task had not
    /// reported, else its last report's figure) becomes that, within the slice.
    pub(super) fn settle_acknowledged(&mut self, now: u64, i: u32, reported: Budget) {
        if let Some(actual) = self.acknowledged_charge(i, reported) {
            self.recharge(i, actual);
            self.record(now, Some(i), EventKind::TaskSettled { spent: actual });
        }
    }

    /// What task `i` is to be charged now that its worker acknowledged with `reported`, if that
    /// changes its charge: `reported` within the slice, for a closed task (live and on replay).
    pub(super) fn acknowledged_charge(&self, i: u32, reported: Budget) -> Option<Budget> {
        let slot = &self.tasks[i as usize];
        if !slot.allocated || !slot.state.is_terminal() {
            return None;
        }
        let actual = reported.min(&slot.granted);
        (actual != slot.spent).then_some(actual)
    }

    /// The worker of task `id`, which a replan dropped (cancelling it), acknowledged with what
    /// the attempt spent: as [`settle_acknowledged`](Self::settle_acknowledged), for a task
    /// that is no longer in the plan (the event names it).
    pub(super) fn settle_retired(&mut self, now: u64, id: TaskId, reported: Budget) {
        let Some(r) = self.retired.get_mut(&id) else {
            return;
        };
        let actual = reported.min(&r.granted);
        if !r.allocated || actual == r.charged {
            return;
        }
        let charged = std::mem::replace(&mut r.charged, actual);
        let _ = self.root.child_recharged(charged, actual);
        let task = RecordTask::Named(r.name.clone());
        self.record_as(now, task, EventKind::TaskSettled { spent: actual });
    }

    /// Task `i`, closed, is charged `actual` instead of what it was charged (live and on replay).
    pub(super) fn recharge(&mut self, i: u32, actual: Budget) {
        let charged = std::mem::replace(&mut self.tasks[i as usize].spent, actual);
        let _ = self.root.child_recharged(charged, actual);
    }

    /// Records the first stop cause and cancels every live task.
    pub(super) fn begin_stop(&mut self, now: u64, reason: StopReason) {
        self.note_stop(now, reason);
        self.cancel_live(now);
    }

    /// Cancels every live task, telling the workers of running ones.
    fn cancel_live(&mut self, now: u64) {
        for i in 0..self.tasks.len() as u32 {
            let state = self.tasks[i as usize].state;
            if state.is_terminal() {
                continue;
            }
            if matches!(state, TaskState::Running | TaskState::WaitingApproval) {
                self.send_control(now, i, Control::Cancel);
            }
            self.end_task(now, i, TaskEvent::Cancelled);
        }
    }

    /// Ends the run once every task is terminal, or nothing can proceed without a human.
    pub(super) fn settle_run(&mut self, now: u64) {
        if self.stop.is_some() {
            return;
        }
        let all_terminal = self.counts.all_terminal();
        let live = |s: TaskState| self.counts.get(s);
        if all_terminal && !self.drained {
            if !self.awaiting_ack.is_empty() {
                // Wait for the workers to acknowledge the cancel (bounded).
                self.drain_until
                    .get_or_insert(now + self.config.attempt_timeout_ms);
                return;
            }
            if self.drain_until.is_some() {
                // Every acknowledgement is in; stop at the next tick, after the replies already
                // on their way (a late answer right behind an acknowledgement) are counted.
                self.drain_until = Some(now);
                return;
            }
        }
        let reason = if all_terminal {
            Some(self.pending_stop.clone().unwrap_or(StopReason::Completed))
        } else {
            let busy = live(TaskState::Running) + live(TaskState::Ready) > 0;
            let waiting = |t: &TaskSlot| t.state == TaskState::WaitingApproval;
            // A task waiting for a sub-task's approval while its other sub-tasks may still work
            // is not idle either.
            let idle = live(TaskState::WaitingApproval) > 0
                && !busy
                && !self.tasks.iter().any(|t| waiting(t) && t.not_alone());
            idle.then(|| self.tasks.iter().position(waiting))
                .flatten()
                .map(|w| StopReason::WaitingApproval {
                    node: self.plan.node(w as u32).id.to_string(),
                })
        };
        if let Some(reason) = reason {
            self.record(
                now,
                None,
                EventKind::RunStopped {
                    stop_reason: reason.name().to_string(),
                },
            );
            self.stop = Some(reason.clone());
            self.effects.push_back(Effect::Stop(reason));
        }
    }
}
