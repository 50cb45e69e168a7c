//! A worker's reply reaching the supervisor: judged by the reply rules ([`refuse`]), then
//! accepted (its outcome applied to the task), taken as the acknowledgement of a cancel or a
//! rejection, or counted as rejected.

use super::*;

impl SupervisorCore {
    /// A reply arrived from a worker (boxed or not: the batch messages carry boxes, so a reply
    /// is never copied whole on its way in).
    ///
    /// `Ok` if the reply was accepted, or taken as the plain acknowledgement (`cancelled`) of a
    /// cancel or a rejection; [`InputRefused::Reply`] names the rule that refused it (it was
    /// counted as rejected and recorded, and may still have acknowledged a cancel: an answer
    /// that crossed it); [`InputRefused::Finished`] once the final report was taken.
    pub fn handle_report(
        &mut self,
        now: u64,
        reply: impl Into<Box<Envelope<Report>>>,
    ) -> Result<(), InputRefused> {
        let mut reply: Box<Envelope<Report>> = reply.into();
        let handled = self.take_report(now, &mut reply);
        // Its box goes back to a worker for a later reply (see `pass_reply_boxes`), keeping
        // nothing the reply owned while it waits.
        release(&mut reply);
        self.boxes.replies.give(reply);
        handled
    }

    /// [`Self::handle_report`] of `reply`. An accepted reply's report, and an accepted
    /// answer's evidence, are taken out of it; a refused one is left as it came.
    fn take_report(&mut self, now: u64, reply: &mut Envelope<Report>) -> Result<(), InputRefused> {
        if self.finished() {
            return Err(InputRefused::Finished);
        }
        self.messages.delivered += 1;
        if reply.run != self.run {
            // Another run's reply (a replay of an earlier run's): refused before its task is
            // looked up, whose id this run may not know. It acknowledges nothing here.
            let why = ReplyRefusal::WrongRun {
                expected: self.run,
                found: reply.run,
            };
            let task = self.by_id.get(&reply.task);
            return self.close_unaccepted(now, task, reply, false, why);
        }
        let Some(i) = self.by_id.get(&reply.task) else {
            // A task a replan dropped may still acknowledge its cancel.
            let acknowledges = self.take_ack(reply);
            if acknowledges {
                self.add_actions(reply.payload.actions);
                self.acknowledge_retired(now, reply.task, reply.payload.spent);
            }
            let why = if self.retired.contains_key(&reply.task) {
                ReplyRefusal::Dropped
            } else {
                ReplyRefusal::UnknownTask
            };
            return self.close_unaccepted(now, None, reply, acknowledges, why);
        };
        let slot = &self.tasks[i as usize];
        let guard = ReplyGuard {
            run: self.run,
            state: slot.state,
            // A task whose result commit is out takes no more replies.
            settled: slot.state.is_terminal() || slot.committing,
            attempt: slot.attempt,
            version: Version::new(u64::from(slot.version)),
            assigned: slot.worker.map(|w| self.workers[w as usize].agent),
            seen: &slot.seen,
        };
        if let Err(why) = refuse(&guard, reply) {
            // The worker's final reply to a cancel or a rejected approval: the task is terminal,
            // as expected, so the reply is not a result, but it settles the task's charge and
            // its action counts are kept.
            let acknowledges =
                !self.tasks[i as usize].seen.contains(&reply.dedupe) && self.take_ack(reply);
            if acknowledges {
                self.tasks[i as usize].seen.insert(reply.dedupe);
                self.record_calls(now, i, std::mem::take(&mut reply.payload.calls));
                let spent = reply.payload.spent;
                self.add_actions(reply.payload.actions);
                self.acknowledge(now, i, spent);
            }
            return self.close_unaccepted(now, Some(i), reply, acknowledges, why);
        }
        self.steps += 1;
        self.tasks[i as usize].seen.insert(reply.dedupe);
        let mut report = reply.payload.take();
        let judged = self.judge_answer(i, reply.result_kind, &reply.evidence, &report);
        self.record_calls(now, i, std::mem::take(&mut report.calls));
        self.record(now, Some(i), EventKind::ReplyAccepted);
        self.tasks[i as usize].spent = report.spent;
        self.add_actions(report.actions);
        match report.outcome {
            Outcome::Answer { value, .. } => {
                let Some(judged) = judged else {
                    unreachable!("an answer is judged");
                };
                if let Some(reason) = judged.downgraded {
                    let reason = reason.to_string();
                    self.record(now, Some(i), EventKind::ConclusionDowngraded { reason });
                }
                match judged.verdict {
                    Ok(()) => self.complete(i, value, std::mem::take(&mut reply.evidence)),
                    Err(observation) => {
                        self.record(
                            now,
                            Some(i),
                            EventKind::AcceptanceFailed {
                                observation: observation.to_string(),
                            },
                        );
                        self.fail(now, i, format!("acceptance check: {observation}"));
                    }
                }
            }
            Outcome::ApprovalRequested { action, reason } => {
                self.transition(now, i, TaskEvent::ApprovalRequested);
                // A delegated sub-task's request: the task's other sub-tasks may still be
                // working, so the task is not idle until its worker says `Quiet` (which may
                // have come first).
                let sub_task = action.task != self.by_id.id(i);
                let _idle = self.tasks[i as usize].request_approval(action, sub_task);
                self.record(now, Some(i), EventKind::ApprovalRequested { reason });
                let node = self.plan.node(i).id.to_string();
                let decision = self.config.approvals.decide(&node);
                if let Some(approved) = decision {
                    self.decide_approval(now, i, approved);
                }
            }
            Outcome::Failed { observation } => self.fail(now, i, observation),
            Outcome::NoProgress { .. } => {
                let node = self.plan.node(i).id.to_string();
                self.stop_with(now, i, TaskEvent::Failed, StopReason::NoProgress { node });
            }
            Outcome::LimitReached { component, needed } => {
                if !self.ask_top_up(now, i, component, needed, report.spent) {
                    let reason = StopReason::StoppedLimit { component };
                    self.stop_with(now, i, TaskEvent::LimitReached, reason);
                }
            }
            Outcome::Cancelled => self.end_task(now, i, TaskEvent::Cancelled),
            Outcome::Quiet { action } => {
                // Read by the stop: a parked task no longer `not_alone` lets the run settle.
                let _idle = self.tasks[i as usize].quiet(action);
            }
        }
        self.after_input(now);
        Ok(())
    }

    /// Runs acceptance on an answer of task `i` (`None` for any other outcome, whose call
    /// outputs are kept for the attempt's answer to cite): its citations resolve against the
    /// call events of the attempt's replies and the task's dependencies.
    fn judge_answer(
        &mut self,
        i: u32,
        kind: Option<quorate_protocols::ResultKind>,
        evidence: &[quorate_protocols::EvidenceRef],
        report: &Report,
    ) -> Option<acceptance::Judged> {
        let slot = &self.tasks[i as usize];
        let Outcome::Answer { value, receipts } = &report.outcome else {
            if !report.calls.is_empty() {
                let attempt = slot.attempt;
                self.tasks[i as usize].note_recorded(attempt, &report.calls);
            }
            return None;
        };
        let record = acceptance::AttemptRecord {
            earlier: slot.recorded(slot.attempt),
            calls: &report.calls,
            plan: &self.plan,
            node: i,
        };
        let inherited = |d: u32| self.tasks[d as usize].evidence();
        Some(acceptance::check_answer(
            &self.plan.node(i).acceptance,
            kind,
            evidence,
            |e| record.holds(e, inherited),
            value,
            receipts,
        ))
    }

    /// A reply the transport refused before it could be read: its claimed sender is not the
    /// one its subject names (the sender's credentials fix the subject), or not an agent of the
    /// run. It never becomes an input of [`handle_report`](Self::handle_report); it is counted
    /// as delivered and rejected as unauthorized, and logged (`rejected-unauthorized`, naming
    /// no task), as a forged reply judged here is. [`InputRefused::Finished`] once the final
    /// report was taken.
    pub fn handle_unauthorized_delivery(&mut self, now: u64) -> Result<(), InputRefused> {
        if self.finished() {
            return Err(InputRefused::Finished);
        }
        self.messages.delivered += 1;
        self.reject(now, None, Rejection::Unauthorized);
        Ok(())
    }

    /// Replies that arrived together, in order; the refusals, in order (none: every reply was
    /// accepted or acknowledged). Once the run has stopped, the rest are not handled: they
    /// arrived after the stop, like replies of a later message would, and each is refused
    /// with [`InputRefused::Stopped`].
    pub fn handle_reports(
        &mut self,
        now: u64,
        replies: impl IntoIterator<Item = impl Into<Box<Envelope<Report>>>>,
    ) -> Vec<InputRefused> {
        let mut refused = Vec::new();
        for reply in replies {
            if let Some(reason) = self.phase.stopped() {
                refused.push(InputRefused::Stopped {
                    reason: reason.clone(),
                });
                continue;
            }
            if let Err(e) = self.handle_report(now, reply) {
                refused.push(e);
            }
        }
        refused
    }

    /// `true` (and no longer awaited) if `reply` acknowledges a cancel or a rejected approval sent
    /// for its task: a final reply of the attempt told, from the worker told. Usually it says
    /// cancelled; an attempt that ended just before the cancel reached its worker answered with
    /// its own final reply, and the worker has nothing more to say.
    fn take_ack(&mut self, reply: &Envelope<Report>) -> bool {
        let told = self
            .awaiting_ack
            .get(&reply.task)
            .is_some_and(|&(attempt, worker)| {
                reply.run == self.run
                    && reply.attempt == attempt
                    && reply.sender.agent == worker
                    && !matches!(
                        reply.payload.outcome,
                        Outcome::ApprovalRequested { .. } | Outcome::Quiet { .. }
                    )
            });
        if told {
            self.awaiting_ack.remove(&reply.task);
        }
        told
    }

    /// Counts a reply the reply rules did not accept (`why`), after it was taken as its
    /// task's acknowledgement or not: a plain acknowledgement (`Cancelled`) is counted as one;
    /// anything else is rejected (an answer that crossed a cancel is also a late reply) and
    /// refused. An acknowledgement may be the last thing a stopping run waited for.
    fn close_unaccepted(
        &mut self,
        now: u64,
        task: Option<u32>,
        reply: &Envelope<Report>,
        acknowledges: bool,
        why: ReplyRefusal,
    ) -> Result<(), InputRefused> {
        let plain_ack = acknowledges && reply.payload.outcome == Outcome::Cancelled;
        if plain_ack {
            self.messages.acknowledged += 1;
        } else {
            self.reject(now, task, why.rejection());
        }
        if acknowledges {
            self.settle_run(now);
        }
        if plain_ack {
            Ok(())
        } else {
            Err(InputRefused::Reply {
                task: reply.task,
                why,
            })
        }
    }

    fn reject(&mut self, now: u64, task: Option<u32>, reason: Rejection) {
        self.messages.count_rejection(reason);
        self.record(now, task, EventKind::rejected(reason));
    }
}

/// Frees what a read reply still owns (the report of a refused one, the evidence of one not
/// accepted, its scope's names), so that its box holds only ids and counts while it waits to
/// be reused. An accepted answer's parts were taken out already: nothing to do then. (Each
/// part is checked before it is replaced: replacing all three every time, empty or not, cost
/// `bench dag` about 100 instructions per task.)
fn release(reply: &mut Envelope<Report>) {
    if reply.evidence.capacity() != 0 {
        reply.evidence = Vec::new();
    }
    if !matches!(reply.payload.outcome, Outcome::Cancelled) || reply.payload.calls.capacity() != 0 {
        let _ = reply.payload.take();
    }
    if reply.scope.tenant.capacity() != 0 || reply.scope.principal.capacity() != 0 {
        reply.scope = quorate_protocols::Scope::default();
    }
}
