//! Resuming a run from its log after the supervisor crashed.
//!
//! The run log holds every decision ([`Event`]): which task was dispatched with which id, slice
//! and attempt, every state change, every closed budget account. [`SupervisorCore::resume`]
//! replays it into a fresh core; results of completed tasks are read back from the result store.
//! [`SupervisorCore::start_resumed`] then continues: completed tasks are never run again, attempts
//! that were in flight at the crash are dispatched again as new attempts to the same worker and
//! with the same task id, so the worker's action records (idempotency by `ActionId`) see the same
//! actions and no effect repeats. Message counters start again from zero (they count this
//! incarnation's traffic); `seq` continues, so the trace stays strictly increasing.

use quorate_protocols::{Plan, RunId, Sender, TaskId, TaskState};
use quorate_state::AccountId;

use super::SupervisorCore;
use crate::event::{Event, EventKind};
use crate::SupervisorConfig;

/// The log could not be replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// An event names a task that is not in the plan.
    #[error("event {seq} names task {task:?}, which is not in the plan")]
    UnknownTask {
        /// The event.
        seq: u64,
        /// The task name.
        task: String,
    },
    /// An event belongs to another run.
    #[error("event {seq} belongs to run {found}, not {expected}")]
    WrongRun {
        /// The event.
        seq: u64,
        /// The run being resumed.
        expected: RunId,
        /// The event's run.
        found: RunId,
    },
    /// The run was replanned, and no fallback plan was given to replay it with (the log holds
    /// the switch, not the plan).
    #[error("the run was replanned (event {seq}) and no fallback plan was given to resume it")]
    Replanned {
        /// The event.
        seq: u64,
    },
    /// The fallback plan given to replay a replan is not one the run could have switched to
    /// (invalid, wider, changing a completed task).
    #[error("event {seq}: the fallback plan is refused: {error}")]
    BadFallback {
        /// The `replanned` event.
        seq: u64,
        /// Why it is refused.
        error: super::ReplanError,
    },
    /// The fallback plan given to replay a replan has another number of tasks than the plan the
    /// log switched to (the log records the count only: a fallback of the same size is taken).
    #[error("event {seq}: the run switched to a plan of {logged} tasks; the fallback has {given}")]
    FallbackMismatch {
        /// The `replanned` event.
        seq: u64,
        /// Tasks of the plan the log switched to.
        logged: usize,
        /// Tasks of the fallback given.
        given: usize,
    },
    /// A completed task's result is missing from the store.
    #[error("task {task} completed but its result {key} is not in the store")]
    MissingResult {
        /// The task.
        task: String,
        /// The store key.
        key: String,
    },
    /// The run had already stopped.
    #[error("the run already stopped (event {seq})")]
    AlreadyStopped {
        /// The event.
        seq: u64,
    },
    /// The budget ledger refused what an event did (a slice larger than the run's budget, a
    /// task closed at more than its slice): the log does not match the plan's budget.
    #[error("event {seq}: the budget ledger refused it: {error}")]
    Ledger {
        /// The event.
        seq: u64,
        /// What the ledger said.
        error: quorate_state::LedgerError,
    },
    /// A task was dispatched to a worker this supervisor does not have (it was rebuilt with
    /// fewer workers than the run had).
    #[error("event {seq} dispatched a task to worker {worker}; this supervisor has {workers}")]
    UnknownWorker {
        /// The `dispatched` event.
        seq: u64,
        /// The worker index it names.
        worker: usize,
        /// Workers of the rebuilt supervisor.
        workers: usize,
    },
}

impl SupervisorCore {
    /// Rebuilds a core for `run` from its log `events` (in order) and `result(key)` lookups of
    /// the result store: [`new`](Self::new), then [`replay`](Self::replay). A run that was
    /// replanned needs the plan it switched to: build the core with `new`, give it with
    /// [`set_fallback_plan`](Self::set_fallback_plan), then `replay`.
    /// [`start`](Self::start) (or [`start_resumed`](Self::start_resumed)) then continues the run.
    /// The rebuilt core draws fresh ids from `ids` (a task keeps the id its log gives it).
    #[allow(clippy::too_many_arguments)]
    pub fn resume(
        run: RunId,
        plan: Plan,
        config: SupervisorConfig,
        me: Sender,
        workers: Vec<Sender>,
        ids: quorate_protocols::IdSource,
        events: &[Event],
        result: impl Fn(&str) -> Option<quorate_protocols::Payload>,
    ) -> Result<Self, ResumeError> {
        let mut core = SupervisorCore::new(run, plan, config, me, workers, ids);
        core.replay(events, result)?;
        Ok(core)
    }

    /// Replays the log `events` (in order) of this core's run into this fresh core, reading the
    /// results of completed tasks with `result(key)`. A `replanned` event switches to the
    /// fallback plan set with [`set_fallback_plan`](Self::set_fallback_plan) (a run replans at
    /// most once, to its fallback); without one the log cannot be replayed. A fallback the log
    /// did not use stays set for the rest of the run.
    pub fn replay(
        &mut self,
        events: &[Event],
        result: impl Fn(&str) -> Option<quorate_protocols::Payload>,
    ) -> Result<(), ResumeError> {
        let run = self.run;
        let core = self;
        core.phase.replayed();
        for e in events {
            if e.run_id != run {
                return Err(ResumeError::WrongRun {
                    seq: e.seq,
                    expected: run,
                    found: e.run_id,
                });
            }
            core.seq = core.seq.max(e.seq + 1);
            let node = match &e.task {
                Some(name) => match core.index_of_name(name) {
                    Some(i) => Some(i),
                    // A task the replan dropped, named after the switch (its cancel's
                    // acknowledgement and settlement).
                    None if core.replay_retired(name, &e.kind) => continue,
                    None => {
                        return Err(ResumeError::UnknownTask {
                            seq: e.seq,
                            task: name.to_string(),
                        })
                    }
                },
                None => None,
            };
            match (&e.kind, node) {
                (EventKind::Replanned { tasks, .. }, _) => {
                    let Some(spec) = core.fallback.take() else {
                        return Err(ResumeError::Replanned { seq: e.seq });
                    };
                    let plan = core
                        .check_replan(spec)
                        .map_err(|error| ResumeError::BadFallback { seq: e.seq, error })?;
                    if plan.len() != *tasks {
                        return Err(ResumeError::FallbackMismatch {
                            seq: e.seq,
                            logged: *tasks,
                            given: plan.len(),
                        });
                    }
                    core.adopt_plan(plan);
                    core.phase.replan_over();
                }
                (EventKind::RunStopped { .. }, _) => {
                    return Err(ResumeError::AlreadyStopped { seq: e.seq })
                }
                (
                    EventKind::Dispatched {
                        attempt,
                        worker,
                        task_id,
                        granted,
                    },
                    Some(i),
                ) => {
                    if *worker >= core.workers.len() {
                        return Err(ResumeError::UnknownWorker {
                            seq: e.seq,
                            worker: *worker,
                            workers: core.workers.len(),
                        });
                    }
                    core.by_id.set(i, *task_id);
                    let slot = &mut core.tasks[i as usize];
                    slot.attempt = *attempt;
                    slot.version += 1;
                    slot.worker = Some(*worker as u32);
                    if !slot.allocated {
                        slot.allocated = true;
                        slot.granted = *granted;
                        core.root
                            .allocate(AccountId::Root, AccountId::Task(*task_id), *granted)
                            .map_err(|error| ResumeError::Ledger { seq: e.seq, error })?;
                        core.granted_total = core.granted_total.saturating_add(granted);
                    }
                }
                (EventKind::PreconditionFailed { observation }, Some(i))
                    if core.fallback.is_some() =>
                {
                    core.phase.replan_begun(i, observation.clone());
                }
                (EventKind::Transition { from, to }, Some(i))
                    if core.tasks[i as usize].state == *from =>
                {
                    core.set_state(i, *to);
                    if *to == TaskState::Failed && core.phase.replan_node() == Some(i) {
                        // The task failed instead: the replan was refused.
                        core.phase.replan_over();
                    }
                }
                (EventKind::StopRequested { reason }, _) => {
                    core.phase.request_stop(reason.clone());
                }
                (EventKind::TaskClosed { spent }, Some(i)) => {
                    let slot = &mut core.tasks[i as usize];
                    slot.spent = *spent;
                    core.root
                        .child_closed(AccountId::Task(core.by_id.id(i)), *spent)
                        .map_err(|error| ResumeError::Ledger { seq: e.seq, error })?;
                }
                (EventKind::TaskSettled { spent }, Some(i)) => {
                    core.settle(i, *spent);
                }
                (EventKind::ControlSent { .. }, Some(i)) => core.await_ack(i),
                (EventKind::TopUpRequested { request }, Some(i)) => {
                    let slot = &mut core.tasks[i as usize];
                    slot.spent = request.spent;
                    slot.park_top_up((**request).clone());
                }
                (EventKind::TopUpDecided { answer }, Some(i)) => core
                    .apply_top_up(i, *answer)
                    .map_err(|error| ResumeError::Ledger { seq: e.seq, error })?,
                (EventKind::ControlAcknowledged { spent }, Some(i)) => {
                    core.awaiting_ack.remove(&core.by_id.id(i));
                    // Settled as live did (its `task-settled` may be missing from a log cut
                    // right after this event; replaying it too changes nothing).
                    core.settle(i, *spent);
                }
                (EventKind::Blob(blob), _) => core.blobs.logged(blob.digest),
                _ => {}
            }
        }
        // Dependencies and results of completed tasks.
        for i in 0..core.plan.len() as u32 {
            if core.tasks[i as usize].state == TaskState::Completed {
                let key = core.result_key(i);
                let value = result(&key).ok_or_else(|| ResumeError::MissingResult {
                    task: core.plan.node(i).id.to_string(),
                    key: key.clone(),
                })?;
                core.tasks[i as usize].set_result(value, Vec::new());
            }
        }
        for i in 0..core.plan.len() as u32 {
            let left = core
                .plan
                .deps(i)
                .iter()
                .filter(|&&d| core.tasks[d as usize].state != TaskState::Completed)
                .count();
            core.tasks[i as usize].deps_left = left as u32;
        }
        Ok(())
    }

    /// Replays `kind`, an event naming `name`, a task the replan dropped: `false` if no dropped
    /// task has that name. Names are unambiguous here because a replay follows one replan (to
    /// the fallback): a later plan could bring a dropped name back as a new node.
    fn replay_retired(&mut self, name: &str, kind: &EventKind) -> bool {
        let Some((&id, r)) = self.retired.iter_mut().find(|(_, r)| &*r.name == name) else {
            return false;
        };
        // As for a task in the plan: an acknowledgement settles the charge too, in case the
        // log was cut before the `task-settled` that followed it.
        let reported = match kind {
            EventKind::TaskSettled { spent } => Some(*spent),
            EventKind::ControlAcknowledged { spent } => {
                self.awaiting_ack.remove(&id);
                Some(*spent)
            }
            _ => None,
        };
        if let (Some(reported), true) = (reported, r.allocated) {
            super::stop::settle_charge(&mut self.root, &mut r.charged, &r.granted, reported);
        }
        true
    }

    /// Continues a resumed run: re-dispatches attempts that were in flight, makes ready what
    /// became ready, and stops if nothing is left.
    pub fn start_resumed(&mut self, now: u64) {
        let replayed = self.seq;
        // The attempts in flight at the crash, by task id (a replan below may move them, and
        // dispatches what it makes ready itself).
        // (Not a task waiting for a top-up: its attempt ended when it ran out.)
        let in_flight: std::collections::HashSet<TaskId> = (0..self.tasks.len() as u32)
            .filter(|&i| {
                let slot = &self.tasks[i as usize];
                matches!(slot.state, TaskState::Running | TaskState::WaitingApproval)
                    && slot.parked_top_up().is_none()
            })
            .map(|i| self.by_id.id(i))
            .collect();
        if let Some(super::phase::PendingReplan { node, observation }) =
            self.phase.begin().flatten()
        {
            // The crash came in the middle of a replan: carry it out (live tasks the new plan
            // drops and the log did not cancel yet are cancelled now).
            if let Some(fallback) = self.fallback.take() {
                if let Err(e) = self.handle_replan(now, fallback) {
                    self.fail(
                        now,
                        node,
                        format!("precondition: {observation}; replan refused: {e}"),
                    );
                }
            }
        }
        if let Some(reason) = self.phase.stopping().cloned() {
            // The crash came in the middle of a stop: finish it (cancel what is still live)
            // instead of dispatching anything again.
            self.record(
                now,
                None,
                EventKind::RunResumed {
                    replayed,
                    redispatched: 0,
                },
            );
            self.begin_stop(now, reason);
            self.after_input(now);
            return;
        }
        let mut redispatched = 0;
        for i in 0..self.tasks.len() as u32 {
            match self.tasks[i as usize].state {
                TaskState::Running | TaskState::WaitingApproval
                    if in_flight.contains(&self.by_id.id(i)) =>
                {
                    // Back to ready for a new attempt (the old attempt's replies become late).
                    // A cancel logged for it just before the crash, with the task's end cut
                    // off, is not awaited: the new attempt replaces the old one (a stop or
                    // replan still pending cancels the task again).
                    self.awaiting_ack.remove(&self.by_id.id(i));
                    self.force_state(i, TaskState::Ready);
                    self.ready.push_back(i);
                    redispatched += 1;
                }
                TaskState::Ready => self.ready.push_back(i),
                TaskState::Pending if self.tasks[i as usize].deps_left == 0 => {
                    self.make_ready(now, i)
                }
                _ => {}
            }
        }
        self.record(
            now,
            None,
            EventKind::RunResumed {
                replayed,
                redispatched,
            },
        );
        // The answers this incarnation was given to the top-ups the run waits for.
        for (node, _) in self.top_up_requests() {
            let (Some(answer), Some(i)) =
                (self.config.top_ups.decide(&node), self.index_of_name(&node))
            else {
                continue;
            };
            // An answer that does not fit leaves the task waiting (see `check_top_ups`).
            let _ = self.decide_top_up(now, i, answer);
        }
        self.after_input(now);
    }

    fn force_state(&mut self, i: u32, to: TaskState) {
        let from = self.tasks[i as usize].state;
        self.set_state(i, to);
        self.record(0, Some(i), EventKind::Transition { from, to });
    }

    fn index_of_name(&self, name: &str) -> Option<u32> {
        let id = quorate_protocols::NodeId::new(name).ok()?;
        self.plan.index_of(&id)
    }

    /// The store key of node `i`'s result.
    pub fn result_key(&self, i: u32) -> String {
        let name = self.plan.node(i).id.as_str();
        let mut key = String::with_capacity(self.result_prefix.len() + name.len());
        key.push_str(&self.result_prefix);
        key.push_str(name);
        key
    }
}
