//! The one drive loop of the peer core: [`drive`] carries out every effect a [`PeerCore`] has
//! queued through a [`PeerEnv`] (the actix shell, the peer process's etcd shell, the
//! simulator, the test harness) and feeds each answer the environment gives at once
//! ([`Answer::Now`]) back into the core before the next effect. An answer that comes later
//! ([`Answer::Later`]: an etcd call in flight) is fed by the driver with [`feed`], then it
//! drives again. The environment only carries out: which store key an effect names (the node's
//! name in the current plan), what an answer is fed to, and what happens after `Done`, are the
//! loop's; every decision about an answer is the core's (a contended root account, a vanished
//! record, a result another peer kept).
//!
//! The peer core's handlers refuse nothing with an error: a late or stale answer is ignored or
//! recorded as an event by the core itself. So [`drive`] returns only the [`Flow`].
//!
//! ```
//! use quorate_coordinator::peer::drive::{drive, PeerEnv};
//! use quorate_coordinator::peer::{PeerMsg, PlanVersion, RootUpdate, Terminal, TerminalCommit};
//! use quorate_coordinator::{Event, PeerCore, StopReason, SupervisorConfig};
//! use quorate_protocols::drive::{Answer, Flow};
//! use quorate_protocols::wire::{Assignment, Control};
//! use quorate_protocols::*;
//!
//! /// A lone peer whose stores accept everything; it keeps what it hands its worker.
//! #[derive(Default)]
//! struct Env { executed: Vec<String>, done: Option<StopReason> }
//! impl PeerEnv for Env {
//!     fn now(&mut self) -> u64 { 0 }
//!     fn try_claim(&mut self, _: u32, _: &str) -> Answer<bool> { Answer::Now(true) }
//!     fn allocate(&mut self, _: u32, _: TaskId, _: Budget) -> Answer<RootUpdate> {
//!         Answer::Now(RootUpdate::Done)
//!     }
//!     fn close_slice(&mut self, _: u32, _: TaskId, _: Budget) -> Answer<RootUpdate> {
//!         Answer::Now(RootUpdate::Done)
//!     }
//!     fn execute(&mut self, env: Box<Envelope<Assignment>>) {
//!         self.executed.push(env.payload.node.to_string());
//!     }
//!     fn control(&mut self, _: Envelope<Control>) {}
//!     fn commit_terminal(&mut self, _: &str, _: bool, record: Terminal)
//!         -> Answer<TerminalCommit> {
//!         Answer::Now(TerminalCommit::Won { record, version: 1 })
//!     }
//!     fn commit_result(&mut self, _: u32, _: &str, _: Payload)
//!         -> Answer<Option<quorate_state::Versioned<Payload>>> { Answer::Now(None) }
//!     fn propose_plan(&mut self, r: PlanVersion) -> Answer<Option<PlanVersion>> {
//!         Answer::Now(Some(r))
//!     }
//!     fn read_plan(&mut self) -> Answer<Option<PlanVersion>> { Answer::Now(None) }
//!     fn broadcast(&mut self, _: Box<Envelope<PeerMsg>>) {}
//!     fn record(&mut self, _: Event) {}
//!     fn done(&mut self, _: &PeerCore, reason: StopReason) { self.done = Some(reason); }
//! }
//!
//! let spec = PlanSpec {
//!     budget: Budget::new(100, 20, 1000, 100),
//!     reserve: Budget::steps(4),
//!     nodes: vec![NodeSpec::named("a").with_budget(Budget::new(10, 2, 100, 10))],
//!     ..PlanSpec::default()
//! };
//! let plan = spec.validate().unwrap();
//! let mut ids = IdSource::seeded(1);
//! let me = Sender { agent: ids.agent_id(), role: Role::Peer };
//! let worker = Sender { agent: ids.agent_id(), role: Role::Worker };
//! let tasks = vec![ids.task_id()];
//! let mut core = PeerCore::new(ids.run_id(), plan, SupervisorConfig::default(), 0,
//!     vec![me], worker, tasks, ids.fork());
//! core.start(0);
//! let mut env = Env::default();
//! assert_eq!(drive(&mut core, &mut env), Flow::Continue);
//! assert_eq!(env.executed, ["a"], "claimed, allocated, handed to the worker");
//! assert_eq!(env.done, None);
//! ```

use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Budget, Envelope, Payload, Precondition, TaskId};
use quorate_state::{PreconditionFailure, Versioned};

use super::{PeerCore, PeerEffect, PeerMsg, PlanVersion, RootUpdate, Terminal, TerminalCommit};
use crate::{Event, StopReason};

/// A stored value, as a result store holds it.
pub type StoredResult = Option<Versioned<Payload>>;

/// What a peer core's driver provides: the shared stores (each call answered at once or
/// later), its own worker, the links to the other peers, the run log and the clock.
pub trait PeerEnv {
    /// The run's time now (read before each answer is fed).
    fn now(&mut self) -> u64;

    /// Whether the loop goes on with the next effect (checked before each one; default: it
    /// does). [`Flow::Halt`] leaves the rest queued in the core: a driver that answers a store
    /// call later and must carry out effects in order halts until it has fed the answer.
    fn go_on(&mut self) -> Flow {
        Flow::Continue
    }

    /// CAS the claim of node `node` (named `name` in the current plan) from absent to this
    /// peer: whether this peer holds it.
    fn try_claim(&mut self, node: u32, name: &str) -> Answer<bool>;

    /// Allocate `slice` for `task` from the shared root account, one read-change-CAS.
    fn allocate(&mut self, node: u32, task: TaskId, slice: Budget) -> Answer<RootUpdate>;

    /// Return `task`'s slice (`spent` stays spent) to the root account, one read-change-CAS.
    fn close_slice(&mut self, node: u32, task: TaskId, spent: Budget) -> Answer<RootUpdate>;

    /// Check node `node`'s store preconditions against the shared result store (default: no
    /// such store, [`PreconditionFailure::NoStore`]).
    fn check_preconditions(
        &mut self,
        node: u32,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        let _ = (node, checks);
        Answer::Now(Err(PreconditionFailure::NoStore))
    }

    /// Raise the fence of `task` (node `node`, named `name` in the current plan) past `past`
    /// (this peer's last attempt of it), by CAS, only up, and only while this peer holds the
    /// node's claim: the attempt it now names, or `None` if the claim is no longer this peer's.
    /// The core asks for fences only when set fenced ([`PeerCore::set_fenced`]: peer processes,
    /// whose workers keep their action books on the store of record). Default: no such store,
    /// the next attempt.
    fn raise_fence(
        &mut self,
        node: u32,
        name: &str,
        task: TaskId,
        past: u32,
    ) -> Answer<Option<u32>> {
        let _ = (node, name, task);
        Answer::Now(Some(super::fence_after(None, past)))
    }

    /// Hand an assignment to this peer's own worker.
    fn execute(&mut self, envelope: Box<Envelope<Assignment>>);

    /// Send a control message to this peer's own worker.
    fn control(&mut self, envelope: Envelope<Control>);

    /// CAS the terminal record of the task named `name` from absent to `record`: what the key
    /// holds afterwards. `claimed`: this peer claimed the task, so the record is written only
    /// while the claim is still this peer's (a claim that went with its lease answers
    /// [`TerminalCommit::Unclaimed`] when the key holds no record; a shell whose claims outlive
    /// nothing, one process, never answers so).
    fn commit_terminal(
        &mut self,
        name: &str,
        claimed: bool,
        record: Terminal,
    ) -> Answer<TerminalCommit>;

    /// Create `key` in the result store with `value` (never overwrite): `None` if written,
    /// otherwise what the key holds.
    fn commit_result(&mut self, node: u32, key: &str, value: Payload) -> Answer<StoredResult>;

    /// A check hook: the core, fed the result `stored` under `key` that another peer wrote
    /// first, now holds `held` as node `node`'s result (default: nothing to check).
    fn result_kept(
        &mut self,
        node: u32,
        key: &str,
        stored: &serde_json::Value,
        held: Option<&serde_json::Value>,
    ) {
        let _ = (node, key, stored, held);
    }

    /// CAS `plan/<run>` from absent to `record`: what the key holds afterwards.
    fn propose_plan(&mut self, record: PlanVersion) -> Answer<Option<PlanVersion>>;

    /// Read `plan/<run>`.
    fn read_plan(&mut self) -> Answer<Option<PlanVersion>>;

    /// Send `envelope` to every other peer.
    fn broadcast(&mut self, envelope: Box<Envelope<PeerMsg>>);

    /// Append `event` to the run log and the trace (its `seq` is the environment's to stamp).
    fn record(&mut self, event: Event);

    /// This peer is done (`core` as it ended, for a summary). The loop goes on only if
    /// effects remain and [`Self::go_on`] says so.
    fn done(&mut self, core: &PeerCore, reason: StopReason);
}

/// An answer to feed to the core: one the environment gave at once (the loop feeds it), or one
/// that came later (the driver feeds it with [`feed`]).
#[derive(Clone, Debug, PartialEq)]
pub enum PeerAnswer {
    /// Whether this peer holds node `node`'s claim.
    Claim {
        /// Node index.
        node: u32,
        /// This peer holds it.
        won: bool,
    },
    /// What became of node `node`'s allocation.
    Allocation {
        /// Node index.
        node: u32,
        /// The CAS's outcome.
        outcome: RootUpdate,
    },
    /// What became of the return of node `node`'s slice.
    SliceClosed {
        /// Node index.
        node: u32,
        /// The CAS's outcome.
        outcome: RootUpdate,
    },
    /// What the check of node `node`'s store preconditions found.
    Preconditions {
        /// Node index.
        node: u32,
        /// `Ok`, or the first failing check.
        outcome: Result<(), PreconditionFailure>,
    },
    /// The attempt node `node`'s fence names now (`None`: the claim is no longer this peer's).
    Fence {
        /// Node index.
        node: u32,
        /// The attempt raised to.
        raised: Option<u32>,
    },
    /// What the terminal record's key held after this peer's commit.
    Commit(TerminalCommit),
    /// What became of merging node `node`'s result.
    Result {
        /// Node index.
        node: u32,
        /// `None` if written, else what the key held.
        stored: StoredResult,
    },
    /// What `plan/<run>` holds.
    Plan(Option<PlanVersion>),
}

/// Carries out every effect `core` has queued through `env`, feeding back each answer given at
/// once, until the core has none left ([`Flow::Continue`]) or `env` halts ([`Flow::Halt`]).
pub fn drive(core: &mut PeerCore, env: &mut impl PeerEnv) -> Flow {
    loop {
        if !env.go_on().goes_on() {
            return Flow::Halt;
        }
        let Some(effect) = core.poll_effect() else {
            return Flow::Continue;
        };
        let answer = match effect {
            PeerEffect::TryClaim { node } => {
                let name = core.plan().node(node).id.as_str();
                env.try_claim(node, name)
                    .now()
                    .map(|won| PeerAnswer::Claim { node, won })
            }
            PeerEffect::Allocate { node, task, slice } => env
                .allocate(node, task, slice)
                .now()
                .map(|outcome| PeerAnswer::Allocation { node, outcome }),
            PeerEffect::CloseSlice { node, task, spent } => env
                .close_slice(node, task, spent)
                .now()
                .map(|outcome| PeerAnswer::SliceClosed { node, outcome }),
            PeerEffect::CheckPreconditions { node, checks } => env
                .check_preconditions(node, checks)
                .now()
                .map(|outcome| PeerAnswer::Preconditions { node, outcome }),
            PeerEffect::RaiseFence { node, task, past } => {
                let name = core.plan().node(node).id.as_str();
                env.raise_fence(node, name, task, past)
                    .now()
                    .map(|raised| PeerAnswer::Fence { node, raised })
            }
            PeerEffect::Execute(envelope) => {
                env.execute(envelope);
                None
            }
            PeerEffect::Control(envelope) => {
                env.control(envelope);
                None
            }
            PeerEffect::CommitTerminal(record) => {
                // By name: a switch of plan version renumbers the nodes.
                let name = core.plan().node(record.node).id.as_str();
                let claimed = core.claimed(record.node);
                env.commit_terminal(name, claimed, record)
                    .now()
                    .map(PeerAnswer::Commit)
            }
            PeerEffect::CommitResult { node, key, value } => {
                if let Answer::Now(stored) = env.commit_result(node, &key, value) {
                    let kept = stored.as_ref().map(|s| s.value.clone());
                    let now = env.now();
                    core.handle_result_commit(now, node, stored);
                    if let Some(kept) = kept {
                        env.result_kept(node, &key, kept.value(), core.result(node));
                    }
                }
                None
            }
            PeerEffect::ProposePlan(record) => env.propose_plan(record).now().map(PeerAnswer::Plan),
            PeerEffect::ReadPlan => env.read_plan().now().map(PeerAnswer::Plan),
            PeerEffect::Broadcast(envelope) => {
                env.broadcast(envelope);
                None
            }
            PeerEffect::Record(event) => {
                env.record(event);
                None
            }
            PeerEffect::Done(reason) => {
                env.done(core, reason);
                None
            }
        };
        if let Some(answer) = answer {
            let now = env.now();
            feed(core, now, answer);
        }
    }
}

/// Feeds one answer to `core` at `now` (the matching `handle_*`).
pub fn feed(core: &mut PeerCore, now: u64, answer: PeerAnswer) {
    match answer {
        PeerAnswer::Claim { node, won } => core.handle_claim_result(now, node, won),
        PeerAnswer::Allocation { node, outcome } => core.handle_allocation(now, node, outcome),
        PeerAnswer::SliceClosed { node, outcome } => core.handle_slice_closed(now, node, outcome),
        PeerAnswer::Preconditions { node, outcome } => {
            core.handle_preconditions(now, node, outcome);
        }
        PeerAnswer::Fence { node, raised } => core.handle_fence_raised(now, node, raised),
        PeerAnswer::Commit(outcome) => core.handle_commit(now, outcome),
        PeerAnswer::Result { node, stored } => core.handle_result_commit(now, node, stored),
        PeerAnswer::Plan(stored) => core.handle_plan_version(now, stored),
    }
}
