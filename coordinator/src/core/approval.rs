//! Approval decisions and control messages to workers.

use super::*;
use crate::event::{EventKind, StopControl};
use crate::StopReason;

impl SupervisorCore {
    pub(super) fn decide_approval(&mut self, now: u64, i: u32, approved: bool) {
        self.record(now, Some(i), EventKind::ApprovalDecided { approved });
        let Some(action) = self.tasks[i as usize].take_approval() else {
            return;
        };
        if approved {
            self.transition(now, i, TaskEvent::Approved);
            // The attempt runs again: arm its timeout anew, so a lost approval or a lost final
            // reply still leads to a new attempt.
            let slot = &self.tasks[i as usize];
            self.timeouts.arm(
                now + self.config.attempt_timeout_ms,
                self.by_id.id(i),
                slot.attempt,
            );
            self.send_control(now, i, Control::Approve { action });
        } else {
            // Told (and logged) before the task ends: a log cut in between resumes with the
            // task still in flight, so it is dispatched again and asks again (a cut after
            // its end resumes with the reject awaited).
            self.send_control(now, i, Control::Reject { action });
            self.stop_with(now, i, TaskEvent::Cancelled, StopReason::Cancelled);
        }
    }

    /// Sends `control` to the worker of task `i`'s current attempt. A cancel or a rejection is
    /// logged (`control-sent`) and its acknowledgement awaited.
    pub(super) fn send_control(&mut self, now: u64, i: u32, control: Control) {
        let Some(worker) = self.tasks[i as usize].worker.map(|w| w as usize) else {
            return;
        };
        let stop = match control {
            Control::Cancel => Some(StopControl::Cancel),
            Control::Reject { .. } => Some(StopControl::Reject),
            Control::Approve { .. } => None,
        };
        if let Some(control) = stop {
            self.await_ack(i);
            self.record(now, Some(i), EventKind::ControlSent { control });
        }
        let slot = &self.tasks[i as usize];
        let task = self.by_id.id(i);
        let mut envelope = Envelope::new(self.run, task, self.me, control, &mut self.ids);
        envelope.attempt = slot.attempt;
        envelope.state_version = Version::new(u64::from(slot.version));
        self.messages.sent += 1;
        self.effects.push_back(SupervisorEffect::Control {
            worker,
            envelope: Box::new(envelope),
        });
    }

    /// The final reply of task `i`'s current attempt, from its worker, will acknowledge a
    /// cancel or a rejection (live, and when a replay meets `control-sent`).
    pub(super) fn await_ack(&mut self, i: u32) {
        let slot = &self.tasks[i as usize];
        if let Some(w) = slot.worker {
            let told = (slot.attempt, self.workers[w as usize].agent);
            self.awaiting_ack.insert(self.by_id.id(i), told);
        }
    }
}
