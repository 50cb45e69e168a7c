//! Ending tasks and the run: completion, failure, cancellation of live tasks, the single stop reason.

use quorate_state::AccountId;

use super::*;
use crate::event::EventKind;
use crate::StopReason;

impl SupervisorCore {
    /// Task `i`'s reply was accepted with `value`: the result is kept and its commit asked
    /// for ([`SupervisorEffect::CommitResult`]), and the task waits for the answer
    /// ([`handle_result_commit`](Self::handle_result_commit)) before it is logged completed
    /// and its dependents are released. Nothing emitted is changed afterwards.
    pub(super) fn complete(
        &mut self,
        i: u32,
        value: quorate_protocols::Payload,
        evidence: Vec<quorate_protocols::EvidenceRef>,
    ) {
        let key = self.result_key(i);
        self.effects.push_back(SupervisorEffect::CommitResult {
            ticket: CommitTicket {
                task: self.by_id.id(i),
            },
            key,
            value: value.clone(),
        });
        let slot = &mut self.tasks[i as usize];
        slot.set_result(value, evidence);
        slot.committing = true;
        self.committing += 1;
    }

    /// The shell's answer to a [`SupervisorEffect::CommitResult`] (its `ticket`): the result
    /// was written ([`CommitOutcome::Committed`], logged `result-committed`), or the key was
    /// taken (a result committed before, e.g. by this run before a crash between the commit and
    /// its log entry) and the store's value is kept, never overwritten
    /// ([`CommitOutcome::Kept`], logged `result-kept`): it becomes the task's result, which its
    /// dependents get. Only then is the task completed and its dependents released.
    ///
    /// A ticket of a task a replan dropped is refused ([`InputRefused::UnknownTask`]), as is
    /// one no commit awaits ([`InputRefused::NotCommitting`]: answered already).
    pub fn handle_result_commit(
        &mut self,
        now: u64,
        ticket: CommitTicket,
        outcome: CommitOutcome,
    ) -> Result<(), InputRefused> {
        if self.finished() {
            return Err(InputRefused::Finished);
        }
        let Some(i) = self.by_id.get(&ticket.task) else {
            return Err(InputRefused::UnknownTask { task: ticket.task });
        };
        let slot = &mut self.tasks[i as usize];
        if !slot.committing {
            return Err(InputRefused::NotCommitting { task: ticket.task });
        }
        slot.committing = false;
        self.committing -= 1;
        let kind = match outcome {
            CommitOutcome::Committed => EventKind::ResultCommitted {
                result: slot.result.clone().unwrap_or_default(),
            },
            CommitOutcome::Kept { value, version } => {
                let same = slot.result.as_ref() == Some(&value);
                slot.result = Some(value.clone());
                EventKind::ResultKept {
                    version: version.raw(),
                    same,
                    result: value,
                }
            }
        };
        self.record(now, Some(i), kind);
        self.end_task(now, i, TaskEvent::AcceptancePassed);
        for k in 0..self.plan.dependents(i).len() {
            let d = self.plan.dependents(i)[k];
            let slot = &mut self.tasks[d as usize];
            slot.deps_left -= 1;
            if slot.deps_left == 0 && self.phase.stopping().is_none() {
                self.make_ready(now, d);
            }
        }
        self.after_input(now);
        Ok(())
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
        // Logged so that a supervisor resumed from the log finishes the same stop.
        if self.phase.request_stop(reason.clone()) {
            self.record(now, None, EventKind::StopRequested { reason });
        }
    }

    /// Moves task `i` to a terminal state and returns its unused budget to the root.
    pub(super) fn end_task(&mut self, now: u64, i: u32, event: TaskEvent) {
        if !self.transition(now, i, event) {
            return;
        }
        let id = self.by_id.id(i);
        // Told to stop, the attempt may still spend until its worker acknowledges.
        let still_out = !self.awaiting_ack.is_empty() && self.awaiting_ack.contains_key(&id);
        let slot = &mut self.tasks[i as usize];
        if slot.allocated {
            // Charged its whole slice unless its last report is final: a task that never
            // reported, or whose attempt is still out, may have spent it all. The
            // acknowledgement settles the charge (downwards only: what the close returned may
            // be delegated again at once).
            // A task waiting for a top-up reported what its ended attempt spent (also when a
            // resume replayed its request).
            let known = slot.reported() || slot.parked_top_up().is_some();
            let spent = if known && !still_out {
                slot.spent.min(&slot.granted)
            } else {
                slot.granted
            };
            slot.spent = spent;
            let closed = self.root.child_closed(AccountId::Task(id), spent);
            self.record(now, Some(i), EventKind::TaskClosed { spent });
            if let Err(e) = closed {
                // The root could not take the slice back (its books do not match the task's):
                // the slice stays out, and the trace says why.
                let detail = format!("closing the task's slice: {e}");
                self.record(now, Some(i), EventKind::BudgetRefused { detail });
            }
        }
    }

    /// The worker of task `i`, told to stop, acknowledged with what the attempt spent
    /// (`control-acknowledged`): the task's charge becomes that, within its slice
    /// (`task-settled`, if it changes).
    pub(super) fn acknowledge(&mut self, now: u64, i: u32, reported: Budget) {
        let settled = self.settle(i, reported);
        self.log_acknowledgement(now, RecordTask::Node(i), reported, settled);
    }

    /// [`acknowledge`](Self::acknowledge), for task `id`, which a replan dropped: the events
    /// name it, as it is no longer in the plan.
    pub(super) fn acknowledge_retired(&mut self, now: u64, id: TaskId, reported: Budget) {
        let Some(r) = self.retired.get_mut(&id) else {
            return;
        };
        let name = r.name.clone();
        let settled = r
            .allocated
            .then(|| settle_charge(&mut self.root, &mut r.charged, &r.granted, reported))
            .flatten();
        self.log_acknowledgement(now, RecordTask::Named(name), reported, settled);
    }

    /// Logs an acknowledgement reporting `reported`, and the charge it settled, if it changed.
    fn log_acknowledgement(
        &mut self,
        now: u64,
        task: RecordTask,
        reported: Budget,
        settled: Option<Budget>,
    ) {
        let kind = EventKind::ControlAcknowledged { spent: reported };
        self.record_as(now, task.clone(), kind);
        if let Some(spent) = settled {
            self.record_as(now, task, EventKind::TaskSettled { spent });
        }
    }

    /// Task `i`'s charge becomes `reported` within its slice if it is closed; the new charge
    /// if it changed (live, and when a replay meets `control-acknowledged` or `task-settled`).
    pub(super) fn settle(&mut self, i: u32, reported: Budget) -> Option<Budget> {
        let slot = &mut self.tasks[i as usize];
        if !slot.allocated || !slot.state.is_terminal() {
            return None;
        }
        settle_charge(&mut self.root, &mut slot.spent, &slot.granted, reported)
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
            // A task whose result commit is out ends when it is answered.
            if state.is_terminal() || self.tasks[i as usize].committing {
                continue;
            }
            // A task waiting for a top-up has no attempt out (the one that ran out ended).
            let out = state == TaskState::Running
                || (state == TaskState::WaitingApproval
                    && self.tasks[i as usize].parked_top_up().is_none());
            if out {
                self.send_control(now, i, Control::Cancel);
            }
            self.end_task(now, i, TaskEvent::Cancelled);
        }
    }

    /// Ends the run once every task is terminal, or nothing can proceed without a human.
    pub(super) fn settle_run(&mut self, now: u64) {
        if self.phase.stopped().is_some() {
            return;
        }
        let all_terminal = self.counts.all_terminal();
        let live = |s: TaskState| self.counts.get(s);
        // Wait for the workers to acknowledge a cancel (bounded); once every acknowledgement is
        // in, stop at the next tick, after the replies already on their way (a late answer
        // right behind an acknowledgement) are counted.
        let owed = !self.awaiting_ack.is_empty();
        let timeout = self.config.attempt_timeout_ms;
        if all_terminal && self.phase.hold_for_acks(now, timeout, owed) {
            return;
        }
        let reason = if all_terminal {
            Some(
                self.phase
                    .stopping()
                    .cloned()
                    .unwrap_or(StopReason::Completed),
            )
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
            self.finish_run(now, reason);
        }
    }

    /// The run stops for `reason`: recorded, and the shell told.
    pub(super) fn finish_run(&mut self, now: u64, reason: StopReason) {
        self.record(
            now,
            None,
            EventKind::RunStopped {
                stop_reason: reason.name().to_string(),
            },
        );
        self.phase.finish(reason.clone());
        self.effects.push_back(SupervisorEffect::Stop(reason));
    }
}

/// A closed task's charge `charged` (of slice `granted`) becomes what its worker reported,
/// within the slice; the new charge if it changed. Shared by the tasks of the plan and those a
/// replan dropped, live and on replay.
pub(super) fn settle_charge(
    root: &mut Account,
    charged: &mut Budget,
    granted: &Budget,
    reported: Budget,
) -> Option<Budget> {
    let actual = reported.min(granted);
    if actual == *charged {
        return None;
    }
    root.child_recharged(AccountId::Root, *charged, actual)
        .ok()?;
    *charged = actual;
    Some(actual)
}

#[cfg(test)]
mod tests {
    use quorate_protocols::{Budget, NodeSpec, PlanSpec};

    use super::*;

    /// The root's books and a task's record no longer agree (here: the record says its slice
    /// is larger than what the root delegated): closing the task cannot take the slice back,
    /// and the trace says so instead of the error being dropped.
    #[test]
    fn a_slice_the_root_cannot_take_back_is_recorded() {
        let spec = PlanSpec {
            budget: Budget::new(100, 10, 100, 100),
            nodes: vec![NodeSpec::named("a")],
            ..PlanSpec::default()
        };
        let mut core = crate::core::test_core(spec);
        core.start(0);
        assert_eq!(core.task_state(0), TaskState::Running);
        while core.poll_effect().is_some() {}
        core.tasks[0].granted = Budget::steps(u64::MAX);
        core.end_task(1, 0, TaskEvent::Cancelled);
        let kinds: Vec<EventKind> = std::iter::from_fn(|| core.poll_effect())
            .filter_map(|e| match e {
                SupervisorEffect::Record(r) => Some(r.kind),
                _ => None,
            })
            .collect();
        assert!(
            kinds.iter().any(|k| matches!(
                k,
                EventKind::BudgetRefused { detail } if detail.starts_with("closing the task's slice")
            )),
            "{kinds:?}"
        );
    }
}
