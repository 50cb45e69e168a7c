//! The supervisor side of a schedule: carrying out the core's effects (a crash may cut them
//! short), and rebuilding the core from its log after a crash.

use quorate_coordinator::{
    ApprovalPolicy, CommitOutcome, EventKind, ResumeError, SupervisorCore,
    SupervisorEffect as SupEffect,
};
use quorate_state::CasOutcome;
use rand::Rng;

use super::{Msg, Sim};
use crate::check::Invariant;
use crate::fault::Fault;

impl Sim {
    /// Carries out the core's effects one at a time, as the actor does: a result commit is
    /// answered at once, and the effects that answer brings are queued behind the others. A
    /// crash cuts the effects queued when the drain began.
    pub(super) fn drain_supervisor(&mut self) {
        let crash = std::mem::take(&mut self.crash_armed) && !self.stopped && !self.healed();
        let keep = if crash {
            self.rng.gen_range(0..=self.core.pending_effects())
        } else {
            usize::MAX
        };
        let mut done = 0;
        while done < keep {
            let Some(effect) = self.core.poll_effect() else {
                break;
            };
            self.carry_out(effect);
            done += 1;
        }
        if crash && !self.stopped {
            self.resume();
        }
    }

    fn carry_out(&mut self, effect: SupEffect) {
        match effect {
            SupEffect::Dispatch { worker, envelope } => {
                self.send(Msg::Assign(worker, envelope));
            }
            SupEffect::Control { worker, envelope } => {
                self.send(Msg::Control(worker, envelope));
            }
            SupEffect::CommitResult { ticket, key, value } => {
                // The store call the actor's commit makes (create only; a taken key answers
                // with what it holds), answered at once.
                let outcome = match self.results.create_now(key.clone(), value.into_value()) {
                    CasOutcome::Conflict {
                        current: Some(current),
                    } => CommitOutcome::Kept {
                        value: current.value.into(),
                        version: current.version,
                    },
                    _ => CommitOutcome::Committed,
                };
                let kept = match &outcome {
                    CommitOutcome::Kept { value, .. } => Some(value.clone()),
                    CommitOutcome::Committed => None,
                };
                let now = self.now;
                // A task a replan dropped is refused: its result is kept in the store only.
                let _refused = self.core.handle_result_commit(now, ticket, outcome);
                if let Some(stored) = kept {
                    // The store keeps its result; the core must now hold that one too.
                    let node = (0..self.core.plan().len() as u32)
                        .find(|&i| self.core.result_key(i) == key);
                    let held = node.and_then(|i| self.core.task_result(i));
                    if held.is_some_and(|h| stored != *h) {
                        let detail = format!("result {key}: the core kept another value");
                        self.fail(Invariant::ResultLost, detail);
                    }
                }
            }
            // Checked at once against the run's store, as the actor shell does.
            SupEffect::CheckPreconditions { ticket, checks } => {
                let outcome = quorate_state::check_preconditions(&self.results, &checks);
                let now = self.now;
                // Answered at once: a refusal (a task that ended meanwhile) changes nothing.
                let _refused = self.core.handle_preconditions(now, ticket, outcome);
            }
            SupEffect::Record(record) => {
                let event = self.core.event(record);
                self.trace.event(self.now, &event);
                self.checker.on_event(self.now, &event);
                if let EventKind::ApprovalRequested { .. } = event.kind {
                    if self.config.approvals == ApprovalPolicy::Ask {
                        let node = *self
                            .checker
                            .approvals_requested
                            .last()
                            .expect("just pushed");
                        let at = self.now + self.rng.gen_range(10..500);
                        let approved = self.rng.gen_bool(0.7);
                        self.schedule(at, Msg::Approval(node as u32, approved));
                    }
                }
                if matches!(event.kind, EventKind::Replanned { .. }) {
                    self.counts.bump(Fault::Replan);
                }
                if matches!(event.kind, EventKind::RunStopped { .. }) {
                    self.stopped = true;
                }
                self.log.push(event);
            }
            SupEffect::Stop(_) => self.stopped = true,
        }
    }

    /// The coordinator crashed: rebuild it from the log and the result store.
    fn resume(&mut self) {
        self.counts.bump(Fault::CoordinatorCrash);
        let events = self.log.len();
        self.trace.note(
            self.now,
            format_args!("coordinator crash, resume from {events} events"),
        );
        let results = &self.results;
        // A fresh core on the first plan, given the same fallback: replaying a `replanned`
        // event switches to it, as the shell's resume does.
        let mut core = SupervisorCore::new(
            self.run,
            self.plan.clone(),
            self.config.clone(),
            self.me,
            self.senders.clone(),
            self.ids.fork(),
        );
        if let Some(fallback) = &self.fallback {
            core.set_fallback_plan(fallback.clone());
        }
        let resumed = core
            .replay(&self.log, |key| results.get_now(key).map(|v| v.value))
            .map(|()| core);
        match resumed {
            Ok(core) => {
                self.core = core;
                self.core.start_resumed(self.now);
                self.report_lost_workers();
                self.drain_supervisor();
            }
            Err(ResumeError::AlreadyStopped { .. }) => self.stopped = true,
            Err(e) => self.fail(Invariant::Resume, e.to_string()),
        }
    }
}
