//! Making tasks ready and dispatching them: preconditions, budget slices, assignments.

use quorate_state::AccountId;

use super::*;
use crate::event::EventKind;
use crate::StopReason;

impl SupervisorCore {
    pub(super) fn make_ready(&mut self, now: u64, i: u32) {
        let tasks = &self.tasks;
        let inputs =
            crate::acceptance::check_inputs(&self.plan, i, |d| tasks[d as usize].result.as_deref());
        if let Err(failure) = inputs {
            self.fail(now, i, format!("precondition does not hold: {failure}"));
            return;
        }
        let checks = crate::acceptance::store_checks(&self.plan, i);
        if !checks.is_empty() {
            self.tasks[i as usize].checking = true;
            self.effects
                .push_back(SupervisorEffect::CheckPreconditions {
                    ticket: CheckTicket {
                        node: i,
                        plan_version: self.plan_version,
                    },
                    checks,
                });
            return;
        }
        if self.transition(now, i, TaskEvent::DependenciesMet) {
            self.ready.push_back(i);
        }
    }

    pub(super) fn dispatch_ready(&mut self, now: u64) {
        if !self.phase.dispatches() {
            return;
        }
        // Tasks no live worker serving their role can take: back at the front afterwards.
        let mut waiting = Vec::new();
        while let Some(i) = self.ready.pop_front() {
            if self.tasks[i as usize].state != TaskState::Ready {
                continue;
            }
            let slice = self.plan.node(i).budget;
            let id = self.by_id.id(i);
            if !self.tasks[i as usize].allocated {
                match self
                    .root
                    .allocate(AccountId::Root, AccountId::Task(id), slice)
                {
                    Ok(_) => {
                        self.tasks[i as usize].allocated = true;
                        self.tasks[i as usize].granted = slice;
                        self.granted_total = self.granted_total.saturating_add(&slice);
                    }
                    Err(e) => {
                        let detail = e.to_string();
                        self.record(now, Some(i), EventKind::BudgetRefused { detail });
                        let reason = StopReason::refused(&e);
                        self.stop_with(now, i, TaskEvent::LimitReached, reason);
                        self.requeue_front(waiting);
                        return;
                    }
                }
            }
            // A new attempt goes to the worker that had the task while it is live, so its
            // record of the task's actions (idempotency) is at hand; else to another live one,
            // which imports the task's book from the store (see `liveness`). With no live
            // worker serving its role, the task waits for one to renew; the tasks behind it
            // are dispatched meanwhile.
            let Some(worker) = self.pick_worker(i) else {
                waiting.push(i);
                continue;
            };
            let tasks = &self.tasks;
            // The slice as granted: the node's, grown by any top-up.
            let assignment = crate::assign::assignment(
                &self.plan,
                i,
                tasks[i as usize].granted,
                |d| {
                    let t = &tasks[d as usize];
                    Some((t.result.as_ref()?, t.shared_evidence()))
                },
                tasks[i as usize].evidence_text().to_vec(),
            );
            let slot = &mut self.tasks[i as usize];
            slot.attempt += 1;
            slot.version += 1;
            slot.worker = Some(worker as u32);
            let (run, me) = (self.run, self.me);
            let mut envelope = Envelope::new(run, id, me, assignment, &mut self.ids);
            envelope.attempt = slot.attempt;
            envelope.state_version = Version::new(u64::from(slot.version));
            let attempt = slot.attempt;
            self.timeouts
                .arm(now + self.config.attempt_timeout_ms, id, attempt);
            self.transition(now, i, TaskEvent::Dispatched);
            let (task_id, granted) = (id, self.tasks[i as usize].granted);
            self.record(
                now,
                Some(i),
                EventKind::Dispatched {
                    attempt,
                    worker,
                    task_id,
                    granted,
                },
            );
            self.messages.sent += 1;
            self.steps += 1;
            self.effects.push_back(SupervisorEffect::Dispatch {
                worker,
                envelope: self.boxes.assignments.boxed(envelope),
            });
        }
        self.requeue_front(waiting);
    }

    /// Puts `waiting` (in order) back at the front of the ready queue.
    fn requeue_front(&mut self, waiting: Vec<u32>) {
        for i in waiting.into_iter().rev() {
            self.ready.push_front(i);
        }
    }
}
