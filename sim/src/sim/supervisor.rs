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
    /// Carries out the core's effects one at a time ([`drive`]), as the actor does: a
    /// precondition check is answered at once; the result commits wait until the core has
    /// nothing else to carry out, then go to the store as one batch, their answers are handed to
    /// the core in order, and the drive goes on with what they brought. A crash cuts the drain
    /// before an effect, before a batch (nothing of it written) or between a batch's writes and
    /// its answers (the keys taken, the core not told).
    pub(super) fn drain_supervisor(&mut self) {
        let crash = std::mem::take(&mut self.crash_armed) && !self.stopped && !self.healed();
        let keep = if crash {
            // Two steps more than the effects queued now: a drain that commits results takes
            // one for the batch's writes and one for its answers, so that the cut can fall
            // between them.
            self.rng.gen_range(0..=self.core.pending_effects() + 2)
        } else {
            usize::MAX
        };
        let mut core = self.core.0.take().expect("the core is home");
        let mut shell = Shell {
            sim: self,
            left: keep,
            commits: Vec::new(),
        };
        // A refused answer (a task that ended or was dropped meanwhile) changes nothing.
        while drive(&mut core, &mut shell).flow.goes_on()
            && !shell.commits.is_empty()
            && shell.step()
        {
            let outcomes = shell.write_commits();
            if !shell.step() {
                break;
            }
            shell.answer_commits(&mut core, outcomes);
        }
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
/// store and log, the checker; `left` steps before a crash cuts the drain.
struct Shell<'a> {
    sim: &'a mut Sim,
    /// Steps (effects, and a batch's writes and answers) still taken before the crash cut
    /// (`usize::MAX`: no crash).
    left: usize,
    /// The result commits asked for since the last batch.
    commits: Vec<(CommitTicket, String, quorate_protocols::Payload)>,
}

impl Shell<'_> {
    /// Takes one step, unless the crash cuts the drain here.
    fn step(&mut self) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        true
    }

    /// Writes the commits asked for into the store as one batch, as the actor does; each
    /// commit's ticket, key and outcome.
    fn write_commits(
        &mut self,
    ) -> Vec<(CommitTicket, String, CasOutcome<quorate_protocols::Payload>)> {
        let asked = std::mem::take(&mut self.commits);
        let mut outcomes = Vec::with_capacity(asked.len());
        let items = asked
            .iter()
            .map(|(_, key, value)| (key.as_str(), value.clone()));
        self.sim
            .results
            .create_many_now(items, |o| outcomes.push(o));
        asked
            .into_iter()
            .zip(outcomes)
            .map(|((ticket, key, _), outcome)| (ticket, key, outcome))
            .collect()
    }

    /// Hands the core each answer of a batch, in order. A key the store kept (committed before,
    /// e.g. before a crash) gives the core the stored value, which it must hold from then on.
    fn answer_commits(
        &mut self,
        core: &mut SupervisorCore,
        outcomes: Vec<(CommitTicket, String, CasOutcome<quorate_protocols::Payload>)>,
    ) {
        for (ticket, key, outcome) in outcomes {
            let answer = CommitOutcome::of_create(outcome);
            let kept = match &answer {
                CommitOutcome::Kept { value, .. } => Some(value.clone()),
                CommitOutcome::Committed => None,
            };
            // A refused answer (a task that ended or was dropped meanwhile) changes nothing.
            let _ = core.handle_result_commit(self.sim.now, ticket, answer);
            if let Some(stored) = kept {
                let node = (0..core.plan().len() as u32).find(|&i| core.result_key(i) == key);
                let held = node.and_then(|i| core.task_result(i));
                if held.is_some_and(|h| stored != *h) {
                    let detail = format!("result {key}: the core kept another value");
                    self.sim.fail(Invariant::ResultLost, detail);
                }
            }
        }
    }
}

impl SupervisorEnv for Shell<'_> {
    fn now(&self) -> u64 {
        self.sim.now
    }

    fn proceed(&mut self, _core: &SupervisorCore) -> Flow {
        if self.step() {
            Flow::Continue
        } else {
            Flow::Halt
        }
    }

    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
        self.sim.send(Msg::Assign(worker, envelope));
    }

    fn control(&mut self, worker: usize, envelope: Box<Envelope<Control>>) {
        self.sim.send(Msg::Control(worker, envelope));
    }

    /// Answered once the drive has nothing else to do, with the drive's other commits, as the
    /// actor does (see [`Shell::write_commits`]).
    fn commit_result(
        &mut self,
        ticket: CommitTicket,
        key: String,
        value: quorate_protocols::Payload,
    ) -> Answer<CommitOutcome> {
        self.commits.push((ticket, key, value));
        Answer::Later
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
