//! How a peer takes the replies of its own worker: the star's reply rules, the acceptance
//! check, and the approval policy; each outcome becomes a proposed terminal record.

use quorate_protocols::wire::{Control, Outcome, Report, SharedEvidence};
use quorate_protocols::{Envelope, TaskEvent, TaskState};

use super::PeerCore;
use crate::event::{EventKind, Rejection};
use crate::peer::slot::judge_reply;
use crate::{acceptance, StopReason};

impl PeerCore {
    /// A reply from this peer's own worker.
    pub fn handle_worker_reply(&mut self, now: u64, mut reply: Envelope<Report>) {
        let Some(&i) = self.by_id.get(&reply.task) else {
            // A task a switch of plan version dropped answers late.
            let reason = if self.replan.retired(reply.task) {
                Rejection::Late
            } else {
                Rejection::Unauthorized
            };
            self.reject(now, None, reason);
            return;
        };
        if let Err(reason) = judge_reply(self.run, self.worker, &self.tasks[i as usize], &reply) {
            self.reject(now, Some(i), reason);
            return;
        }
        self.steps += 1;
        let judged = self.judge_answer(i, &reply);
        // What the worker did with its calls since its last reply, in its order, then the reply.
        for call in std::mem::take(&mut reply.payload.calls) {
            for kind in self.blobs.events(call) {
                self.record(now, Some(i), kind);
            }
        }
        self.record(now, Some(i), EventKind::ReplyAccepted);
        let t = &mut self.tasks[i as usize];
        t.seen.insert(reply.dedupe);
        t.spent = reply.payload.spent;
        self.actions += reply.payload.actions;
        let node = self.plan.node(i).id.to_string();
        if !matches!(
            reply.payload.outcome,
            Outcome::ApprovalRequested { .. } | Outcome::Quiet { .. }
        ) {
            self.tasks[i as usize].worker_live = false;
            self.busy = false;
        }
        match reply.payload.outcome {
            Outcome::Answer { value, .. } => {
                let Some(judged) = judged else {
                    unreachable!("an answer is judged");
                };
                if let Some(reason) = judged.downgraded {
                    let reason = reason.to_string();
                    self.record(now, Some(i), EventKind::ConclusionDowngraded { reason });
                }
                match judged.verdict {
                    Ok(()) => {
                        self.tasks[i as usize].result =
                            Some((value, SharedEvidence::from(reply.evidence)));
                        self.propose(i, TaskState::Completed, None);
                    }
                    Err(observation) => {
                        let kind = EventKind::AcceptanceFailed {
                            observation: observation.to_string(),
                        };
                        self.record(now, Some(i), kind);
                        self.fail(i, format!("acceptance check: {observation}"));
                    }
                }
            }
            Outcome::ApprovalRequested { action, reason } => {
                self.transition(now, i, TaskEvent::ApprovalRequested);
                self.record(now, Some(i), EventKind::ApprovalRequested { reason });
                let decision = self.config.approvals.decide(&node);
                match decision {
                    Some(approved) => {
                        self.record(now, Some(i), EventKind::ApprovalDecided { approved });
                        if approved {
                            self.transition(now, i, TaskEvent::Approved);
                            // The attempt runs again: its timeout is armed anew, as the star's.
                            let attempt = self.tasks[i as usize].attempt;
                            let at = now + self.config.attempt_timeout_ms;
                            self.timeouts.arm(at, i, attempt);
                            self.control(i, Control::Approve { action });
                        } else {
                            self.control(i, Control::Reject { action });
                            self.tasks[i as usize].worker_live = false;
                            self.busy = false;
                            let cause = Some(StopReason::Cancelled);
                            self.propose(i, TaskState::Cancelled, cause);
                        }
                    }
                    None => {
                        // Parked for a human: settled as waiting-approval, and the run stops.
                        // A delegated sub-task's request settles only once the task's other
                        // sub-tasks stopped working (its worker says `Quiet`, maybe first).
                        let t = &mut self.tasks[i as usize];
                        let sub_task = action.task != t.id;
                        if t.parked.request(action, sub_task) {
                            self.settle_waiting(i, node);
                        }
                    }
                }
            }
            Outcome::Failed { observation } => self.fail(i, observation),
            Outcome::NoProgress { .. } => {
                let cause = StopReason::NoProgress { node };
                self.propose(i, TaskState::Failed, Some(cause));
            }
            Outcome::LimitReached { component, .. } => {
                let cause = StopReason::StoppedLimit { component };
                self.propose(i, TaskState::StoppedLimit, Some(cause));
            }
            Outcome::Cancelled => {
                self.propose(i, TaskState::Cancelled, Some(StopReason::Cancelled));
            }
            Outcome::Quiet { action } => {
                // It may have overtaken its request (kept for it), or follow a decision (and
                // change nothing).
                if self.tasks[i as usize].parked.quiet(action) {
                    self.settle_waiting(i, node);
                }
            }
        }
        self.after_input(now);
    }

    /// Runs acceptance on an answer of task `i` (`None` for any other outcome, whose call
    /// outputs are kept for the attempt's answer to cite), as the star does: the citations
    /// resolve against the call events of the attempt's replies and the task's dependencies.
    fn judge_answer(&mut self, i: u32, reply: &Envelope<Report>) -> Option<acceptance::Judged> {
        let report = &reply.payload;
        let t = &mut self.tasks[i as usize];
        if t.recorded.0 != t.attempt {
            t.recorded = (t.attempt, Vec::new());
        }
        let Outcome::Answer { value, receipts } = &report.outcome else {
            let outputs = report.calls.iter().filter_map(|c| c.recorded_output());
            t.recorded.1.extend(outputs);
            return None;
        };
        let t = &self.tasks[i as usize];
        let record = acceptance::AttemptRecord {
            earlier: &t.recorded.1,
            calls: &report.calls,
            plan: &self.plan,
            node: i,
        };
        let inherited = |d: u32| {
            self.tasks[d as usize]
                .result
                .as_ref()
                .map_or(&[][..], |(_, e)| e.as_slice())
        };
        Some(acceptance::check_answer(
            &self.plan.node(i).acceptance,
            reply.result_kind,
            &reply.evidence,
            |e| record.holds(e, inherited),
            value,
            receipts,
        ))
    }

    /// Task `i`, parked for a human with nothing else of it working, settles as
    /// waiting-approval: the run stops.
    fn settle_waiting(&mut self, i: u32, node: String) {
        self.busy = false;
        let cause = Some(StopReason::WaitingApproval { node });
        self.propose(i, TaskState::WaitingApproval, cause);
    }
}
