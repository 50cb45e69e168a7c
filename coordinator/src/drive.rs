//! The one drive loop of the supervisor core: [`drive`] polls every effect of a
//! [`SupervisorCore`] and carries it out through a [`SupervisorEnv`], the environment's
//! primitives (the sends, the result store, the precondition checks, the log, the stop, the
//! clock). The match over [`SupervisorEffect`] and feeding every answer given at once back to the
//! core ([`handle_result_commit`](SupervisorCore::handle_result_commit),
//! [`handle_preconditions`](SupervisorCore::handle_preconditions)) are written here once; the
//! actix shell, the simulator, the test harnesses and the fuzz target each only implement the
//! trait.
//!
//! An answer that comes later ([`Answer::Later`]) is the driver's to hand to the core when it
//! arrives, followed by another [`drive`]. An environment may end a drain early with
//! [`Flow::Halt`] (from [`SupervisorEnv::proceed`] or [`SupervisorEnv::stop`]); the effects not
//! yet polled stay queued in the core.
//!
//! A tiny environment that collects what the core sends and answers every result commit at once:
//!
//! ```
//! use quorate_coordinator::drive::{drive, Answer, Flow, SupervisorEnv};
//! use quorate_coordinator::{CommitOutcome, CommitTicket, SupervisorConfig, SupervisorCore};
//! use quorate_protocols::wire::Assignment;
//! use quorate_protocols::{AgentId, Budget, Envelope, IdSource, NodeSpec, Payload, PlanSpec, Role, RunId, Sender};
//!
//! #[derive(Default)]
//! struct Collect {
//!     sent: Vec<(usize, Envelope<Assignment>)>,
//!     stopped: bool,
//! }
//!
//! impl SupervisorEnv for Collect {
//!     fn now(&self) -> u64 {
//!         0
//!     }
//!     fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
//!         self.sent.push((worker, *envelope));
//!     }
//!     fn commit_result(&mut self, _: CommitTicket, _: String, _: Payload) -> Answer<CommitOutcome> {
//!         Answer::Now(CommitOutcome::Committed)
//!     }
//!     fn stop(&mut self, _: &SupervisorCore, _: quorate_coordinator::StopReason) -> Flow {
//!         self.stopped = true;
//!         Flow::Continue
//!     }
//! }
//!
//! let plan = PlanSpec {
//!     budget: Budget::new(100, 20, 1000, 100),
//!     nodes: vec![NodeSpec::named("a").with_budget(Budget::new(10, 2, 100, 10))],
//!     ..PlanSpec::default()
//! }
//! .validate()
//! .expect("a valid plan");
//! let worker = Sender { agent: AgentId::from_u128(2), role: Role::Worker };
//! let me = Sender { agent: AgentId::from_u128(1), role: Role::Supervisor };
//! let mut core = SupervisorCore::new(
//!     RunId::from_u128(1), plan, SupervisorConfig::default(), me, vec![worker], IdSource::seeded(1),
//! );
//! let mut env = Collect::default();
//! core.start(0);
//! let drained = drive(&mut core, &mut env);
//! assert_eq!(drained.flow, Flow::Continue);
//! assert_eq!(env.sent.len(), 1, "node a went to the one worker");
//! core.handle_cancel(1).expect("a running run can be cancelled");
//! // a's worker never acknowledges: the grace period runs out and the run stops.
//! core.handle_tick(60_000_000);
//! assert!(drive(&mut core, &mut env).refused.is_empty());
//! assert!(env.stopped);
//! ```

use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Envelope, Millis, Payload, Precondition};
use quorate_state::PreconditionFailure;

pub use quorate_protocols::drive::{Answer, Flow};

use crate::event::Record;
use crate::{
    CheckTicket, CommitOutcome, CommitTicket, InputRefused, StopReason, SupervisorCore,
    SupervisorEffect,
};

/// What a driver's environment does with the supervisor core's effects. Only [`now`](Self::now),
/// [`dispatch`](Self::dispatch) and [`commit_result`](Self::commit_result) have no default.
pub trait SupervisorEnv {
    /// The time an answer given at once is handed to the core with.
    fn now(&self) -> Millis;

    /// Called before each effect is polled, and once more when none is left: `Halt` ends the
    /// drain there (the simulator's crash cut). The core is as the previous effect left it (its
    /// answer fed back).
    #[inline]
    fn proceed(&mut self, _core: &SupervisorCore) -> Flow {
        Flow::Continue
    }

    /// Send `envelope` to worker `worker`.
    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>);

    /// Send the control message `envelope` to worker `worker` (after the assignments sent to it
    /// before). Default: dropped.
    #[inline]
    fn control(&mut self, _worker: usize, _envelope: Box<Envelope<Control>>) {}

    /// Merge the accepted result `value` into the store under `key` (create only: a taken key
    /// keeps its value), answering [`CommitOutcome`] now, or later by handing `ticket` to
    /// [`SupervisorCore::handle_result_commit`].
    fn commit_result(
        &mut self,
        ticket: CommitTicket,
        key: String,
        value: Payload,
    ) -> Answer<CommitOutcome>;

    /// Check `checks` against the store, answering now, or later by handing `ticket` to
    /// [`SupervisorCore::handle_preconditions`]. Default: [`Answer::Later`] (the task waits for
    /// an answer the driver gives, if any).
    #[inline]
    fn check_preconditions(
        &mut self,
        _ticket: CheckTicket,
        _checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        Answer::Later
    }

    /// Append `record` to the run log (and trace); [`SupervisorCore::event`] makes its event.
    /// Default: dropped.
    #[inline]
    fn record(&mut self, _core: &SupervisorCore, _record: Record) {}

    /// The run stopped for `reason`. `Halt` ends the drain (the actix shell stops its actor).
    /// Default: nothing to do, go on.
    #[inline]
    fn stop(&mut self, _core: &SupervisorCore, _reason: StopReason) -> Flow {
        Flow::Continue
    }
}

/// What one [`drive`] came to: the inputs the core refused on the way, and whether the
/// environment halted.
pub type Drained = quorate_protocols::drive::Drained<InputRefused>;

/// Carries out every pending effect of `core` through `env`, feeding each answer given at once
/// back to the core before the next effect (the effects that answer brings queue behind the
/// others), until none is left or `env` halts.
#[inline]
pub fn drive(core: &mut SupervisorCore, env: &mut impl SupervisorEnv) -> Drained {
    let mut refused = Vec::new();
    loop {
        if !env.proceed(core).goes_on() {
            return Drained {
                refused,
                flow: Flow::Halt,
            };
        }
        let Some(effect) = core.poll_effect() else {
            return Drained {
                refused,
                flow: Flow::Continue,
            };
        };
        match effect {
            SupervisorEffect::Dispatch { worker, envelope } => env.dispatch(worker, envelope),
            SupervisorEffect::Control { worker, envelope } => env.control(worker, envelope),
            SupervisorEffect::CommitResult { ticket, key, value } => {
                if let Answer::Now(outcome) = env.commit_result(ticket, key, value) {
                    let now = env.now();
                    refused.extend(core.handle_result_commit(now, ticket, outcome).err());
                }
            }
            SupervisorEffect::CheckPreconditions { ticket, checks } => {
                if let Answer::Now(outcome) = env.check_preconditions(ticket, checks) {
                    let now = env.now();
                    refused.extend(core.handle_preconditions(now, ticket, outcome).err());
                }
            }
            SupervisorEffect::Record(record) => env.record(core, record),
            SupervisorEffect::Stop(reason) => {
                if !env.stop(core, reason).goes_on() {
                    return Drained {
                        refused,
                        flow: Flow::Halt,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "drive_tests.rs"]
mod tests;
