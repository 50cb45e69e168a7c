//! The supervisor side of a schedule: the simulator as the core's drive environment (a crash may
//! cut a drain short), and rebuilding the core from its log after a crash.

use quorate_coordinator::drive::{drive, Answer, Flow, SupervisorEnv};
use quorate_coordinator::{
    ApprovalPolicy, CheckTicket, CommitOutcome, CommitTicket, EventKind, Record, ResumeError,
    SupervisorCore,
};
use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Envelope, Precondition};
use quorate_state::{CasOutcome, PreconditionFailure};
use rand::Rng;

use super::{Msg, Sim};
use crate::check::Invariant;
use crate::fault::Fault;

/// The supervisor core, in its place in the [`Sim`] except while a drive carries out its
/// effects (the simulator itself is then the drive's environment, [`Shell`]).
pub(super) struct CoreSlot(Option<Box<SupervisorCore>>);

impl CoreSlot {
    pub(super) fn new(core: SupervisorCore) -> Self {
        Self(Some(Box::new(core)))
    }
}

impl std::ops::Deref for CoreSlot {
    type Target = SupervisorCore;
    fn deref(&self) -> &SupervisorCore {
        self.0
            .as_deref()
            .expect("the core is out only during a drive")
    }
}

impl std::ops::DerefMut for CoreSlot {
    fn deref_mut(&mut self) -> &mut SupervisorCore {
        self.0
            .as_deref_mut()
            .expect("the core is out only during a drive")
    }
}

impl Sim {
    /// Carries out the core's effects one at a time ([`drive`]), as the actor does: a result
    /// commit and a precondition check are answered at once, and the effects an answer brings
    /// are queued behind the others. A crash cuts the effects queued when the drain began.
    pub(super) fn drain_supervisor(&mut self) {
        let crash = std::mem::take(&mut self.crash_armed) && !self.stopped && !self.healed();
        let keep = if crash {
            self.rng.gen_range(0..=self.core.pending_effects())
        } else {
            usize::MAX
        };
        let mut core = self.core.0.take().expect("the core is home");
        let mut shell = Shell {
            sim: self,
            left: keep,
            kept: None,
        };
        // A refused answer (a task that ended or was dropped meanwhile) changes nothing.
        let _drained = drive(&mut core, &mut shell);
        self.core.0 = Some(core);
        if crash && !self.stopped {
            self.resume();
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
                self.core = CoreSlot::new(core);
                self.core.start_resumed(self.now);
                self.report_lost_workers();
                self.drain_supervisor();
            }
            Err(ResumeError::AlreadyStopped { .. }) => self.stopped = true,
            Err(e) => self.fail(Invariant::Resume, e.to_string()),
        }
    }
}

/// The simulator as the supervisor core's drive environment: the network, the run's result
/// store and log, the checker; `left` effects before a crash cuts the drain.
struct Shell<'a> {
    sim: &'a mut Sim,
    /// Effects still carried out before the crash cut (`usize::MAX`: no crash).
    left: usize,
    /// A result the store kept (key and stored value): the core must hold that one too once
    /// it has the answer (checked before the next effect).
    kept: Option<(String, quorate_protocols::Payload)>,
}

impl SupervisorEnv for Shell<'_> {
    fn now(&self) -> u64 {
        self.sim.now
    }

    fn proceed(&mut self, core: &SupervisorCore) -> Flow {
        if let Some((key, stored)) = self.kept.take() {
            let node = (0..core.plan().len() as u32).find(|&i| core.result_key(i) == key);
            let held = node.and_then(|i| core.task_result(i));
            if held.is_some_and(|h| stored != *h) {
                let detail = format!("result {key}: the core kept another value");
                self.sim.fail(Invariant::ResultLost, detail);
            }
        }
        if self.left == 0 {
            return Flow::Halt;
        }
        self.left -= 1;
        Flow::Continue
    }

    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
        self.sim.send(Msg::Assign(worker, envelope));
    }

    fn control(&mut self, worker: usize, envelope: Box<Envelope<Control>>) {
        self.sim.send(Msg::Control(worker, envelope));
    }

    /// The store call the actor's commit makes (create only; a taken key answers with what it
    /// holds), answered at once.
    fn commit_result(
        &mut self,
        _ticket: CommitTicket,
        key: String,
        value: quorate_protocols::Payload,
    ) -> Answer<CommitOutcome> {
        let outcome = match self.sim.results.create_now(key.clone(), value) {
            CasOutcome::Conflict {
                current: Some(current),
            } => CommitOutcome::Kept {
                value: current.value,
                version: current.version,
            },
            _ => CommitOutcome::Committed,
        };
        if let CommitOutcome::Kept { value, .. } = &outcome {
            // The store keeps its result; the core must now hold that one too.
            self.kept = Some((key, value.clone()));
        }
        Answer::Now(outcome)
    }

    /// Checked at once against the run's store, as the actor shell does.
    fn check_preconditions(
        &mut self,
        _ticket: CheckTicket,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        Answer::Now(quorate_state::check_preconditions(
            &self.sim.results,
            &checks,
        ))
    }

    fn record(&mut self, core: &SupervisorCore, record: Record) {
        let sim = &mut *self.sim;
        let event = core.event(record);
        sim.trace.event(sim.now, &event);
        sim.checker.on_event(sim.now, &event);
        if let EventKind::ApprovalRequested { .. } = event.kind {
            if sim.config.approvals == ApprovalPolicy::Ask {
                let node = *sim.checker.approvals_requested.last().expect("just pushed");
                let at = sim.now + sim.rng.gen_range(10..500);
                let approved = sim.rng.gen_bool(0.7);
                sim.schedule(at, Msg::Approval(node as u32, approved));
            }
        }
        if matches!(event.kind, EventKind::Replanned { .. }) {
            sim.counts.bump(Fault::Replan);
        }
        if matches!(event.kind, EventKind::RunStopped { .. }) {
            sim.stopped = true;
        }
        sim.log.push(event);
    }

    fn stop(&mut self, _core: &SupervisorCore, _reason: quorate_coordinator::StopReason) -> Flow {
        self.sim.stopped = true;
        Flow::Continue
    }
}
