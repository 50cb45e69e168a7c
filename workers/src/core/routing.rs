//! Delegated sub-tasks inside a worker: starting them, routing each sub-task's final reply to
//! the task that delegated it (at any depth), and finding every sub-task below a task.

use quorate_protocols::{Envelope, Millis, TaskId};

use super::{InputError, WorkerCore};
use crate::attempt::{Attempt, Deps};
use quorate_protocols::wire::{Assignment, Outcome};

impl WorkerCore {
    /// Starts delegated sub-tasks and hands every sub-task's final reply to its parent (which
    /// may delegate again, at any depth), until nothing is left to route.
    pub(super) fn settle_delegations(&mut self, now: Millis, mut spawn: Vec<Envelope<Assignment>>) {
        loop {
            for child in std::mem::take(&mut spawn) {
                let task = child.task;
                if let Some(parent) = child.parent {
                    self.parents.insert(task, parent);
                }
                let agent = match self.agents.create(&child.payload) {
                    Ok(agent) => agent,
                    Err(e) => {
                        self.fail_assignment(&child, e.to_string());
                        continue;
                    }
                };
                // A sub-task runs here for the first time: nothing earlier to charge.
                let attempt = Attempt::new(self.assignment_boxes.boxed(child), agent, &self.config);
                // Running it sees only its deps, so it may enter `attempts` first.
                self.attempts.insert(task, attempt);
                let started = self.with_attempt_spawning(now, task, &mut spawn, |a, d| {
                    a.run(d);
                    Ok(())
                });
                debug_assert!(started.is_ok(), "the attempt was just inserted");
            }
            // Sub-task replies go to their parents (they never leave the worker).
            let Some(mut reply) = self.routed.pop_front() else {
                if spawn.is_empty() {
                    break;
                }
                continue;
            };
            let child = reply.task;
            let parent = self.parents[&child];
            if let Outcome::ApprovalRequested { action, reason } = reply.payload.outcome {
                // The sub-task parked a call for a human: the request goes to the task the
                // supervisor knows (the top of the delegation chain), which passes it up; the
                // decision comes back to that task and is routed down by the action's task.
                let mut top = parent;
                while let Some(&up) = self.parents.get(&top) {
                    top = up;
                }
                // What the sub-task did with its calls goes up with the request.
                let calls = std::mem::take(&mut reply.payload.calls);
                let _ = self.with_attempt_spawning(now, top, &mut spawn, |a, d| {
                    a.relay_approval(d, action, reason, calls)
                });
                if !self.relaying.contains(&top) {
                    self.relaying.push(top);
                }
                continue;
            }
            let evidence = std::mem::take(&mut reply.evidence);
            let _ = self.with_attempt_spawning(now, parent, &mut spawn, |a, d| {
                a.on_child_done(d, child, reply.payload, evidence)
            });
            self.reap(child);
            self.reap(parent);
        }
        self.report_quiet(now);
    }

    /// Tells the supervisor, for each task that passed up a sub-task's approval request, once
    /// nothing below it works any more ([`Outcome::Quiet`]): until then the task is not idle,
    /// however it waits.
    fn report_quiet(&mut self, now: Millis) {
        // `relaying` is kept by hand beside the attempts: every request out must be in it, or
        // its task would never say `Quiet` (and the supervisor never see it idle).
        debug_assert!(
            self.attempts
                .iter()
                .all(|(t, a)| !a.relays_request() || self.relaying.contains(t)),
            "a task passing up a request is not tracked for Quiet"
        );
        let mut i = 0;
        while i < self.relaying.len() {
            let top = self.relaying[i];
            let (out, unquiet) = self.attempts.get(&top).map_or((false, false), |a| {
                (a.relays_request(), a.unquiet_request().is_some())
            });
            if !out {
                self.relaying.swap_remove(i);
                continue;
            }
            if !unquiet {
                i += 1;
                continue;
            }
            let working = self
                .descendants(top)
                .iter()
                .any(|t| self.attempts.get(t).is_some_and(Attempt::is_working));
            if working {
                i += 1;
                continue;
            }
            let mut spawn = Vec::new();
            let _ = self.with_attempt_spawning(now, top, &mut spawn, |a, d| {
                a.report_quiet(d);
                Ok(())
            });
            debug_assert!(spawn.is_empty(), "reporting spawns nothing");
            i += 1;
        }
    }

    pub(super) fn with_attempt_spawning(
        &mut self,
        now: Millis,
        task: TaskId,
        spawn: &mut Vec<Envelope<Assignment>>,
        f: impl FnOnce(&mut Attempt, &mut Deps<'_>) -> Result<(), InputError>,
    ) -> Result<(), InputError> {
        let finished = self.history.attempt(task);
        let attempt = self.attempts.get_mut(&task).ok_or(match finished {
            Some(attempt) => InputError::AttemptEnded { task, attempt },
            None => InputError::UnknownTask { task },
        })?;
        let mut deps = Deps {
            now,
            me: self.me,
            config: &self.config,
            tools: &self.tools,
            store: self.store,
            book: self.books.entry(task).or_default(),
            out: &mut self.effects,
            parents: &self.parents,
            routed: &mut self.routed,
            spawn,
            calls: &mut self.calls,
            ids: &mut self.ids,
            reply_boxes: &mut self.reply_boxes,
        };
        f(attempt, &mut deps)
    }

    /// Every sub-task below `task`, deepest last.
    pub(super) fn descendants(&self, task: TaskId) -> Vec<TaskId> {
        let mut out = Vec::new();
        let mut frontier = vec![task];
        while let Some(t) = frontier.pop() {
            if let Some(a) = self.attempts.get(&t) {
                for c in a.open_children() {
                    out.push(c);
                    frontier.push(c);
                }
            }
        }
        out
    }
}
