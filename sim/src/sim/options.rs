//! A schedule's settings besides its seed ([`Options`]: persistence model, liveness mode,
//! topology, trace) and what it did ([`Outcome`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::check::Violation;
use crate::fault::FaultCounts;

/// How a crashed worker comes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Persistence {
    /// The worker's action records (and attempt state) are durable, as with an
    /// `IdempotencyRegistry` in the store: a crash loses in-flight calls, queries and messages;
    /// their outcomes become unknown.
    #[default]
    DurableBook,
    /// The worker restarts empty: its in-memory `ActionBook` is lost.
    Volatile,
}

/// Which topology a schedule runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Topology {
    /// The supervisor core dispatches to the workers.
    Star,
    /// Peer cores claim tasks by CAS, each running its own worker.
    Peer,
    /// Each seed draws its topology: one schedule in four runs in peer mode.
    #[default]
    Both,
}

impl Topology {
    /// Whether schedule `seed` runs in peer mode (drawn from an RNG of its own for
    /// [`Topology::Both`], so the rest of the schedule's draws stay as they were).
    #[must_use]
    pub fn is_peer(self, seed: u64) -> bool {
        match self {
            Topology::Star => false,
            Topology::Peer => true,
            Topology::Both => {
                ChaCha8Rng::seed_from_u64(seed ^ 0x7065_6572_6d6f_6465).gen_bool(0.25)
            }
        }
    }
}

/// Settings of a schedule besides its seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Liveness mode: faults stop at `heal_ms`; every task must be terminal by
    /// `heal_ms + delta_ms`.
    pub liveness: Option<(u64, u64)>,
    /// Worker persistence model.
    pub persistence: Persistence,
    /// Deliveries after which the run counts as not terminating.
    pub step_bound: u64,
    /// Keep the trace's text ([`Outcome::trace`]): every delivery, tick and event, one line
    /// each, with their ids. The trace hash is taken either way.
    pub trace: bool,
    /// Star, peer, or both (drawn per seed).
    pub topology: Topology,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            liveness: None,
            persistence: Persistence::DurableBook,
            step_bound: 50_000,
            trace: false,
            topology: Topology::Both,
        }
    }
}

/// What one schedule did.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The first broken invariant, if any.
    pub violation: Option<Violation>,
    /// Faults that happened.
    pub faults: FaultCounts,
    /// SHA-256 of the trace: every delivery, tick and event line, ids included.
    pub trace_hash: [u8; 32],
    /// The trace's text, one line per delivery, tick and event, when [`Options::trace`] asked
    /// for it: the same seed gives the same bytes.
    pub trace: Option<String>,
    /// Deliveries and ticks handled.
    pub steps: u64,
    /// The stop reason, if the run stopped.
    pub stop: Option<String>,
    /// Tasks in the plan.
    pub tasks: usize,
    /// Some task's attempts together made more tool calls than the task's slice.
    pub slice_reused: bool,
    /// The schedule ran in peer mode.
    pub peer: bool,
}
