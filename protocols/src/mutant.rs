//! Seeded bugs for the reliability simulator (feature `mutants`, off by default).
//!
//! One process-wide switch says which bug is active; every crate reads it through [`is`].
//! With the feature off this module does not exist and no code path changes. With the feature
//! on and the switch at [`Mutant::None`] (the default) every hook is inert.

use std::sync::atomic::{AtomicU8, Ordering};

/// A deliberately seeded bug the simulator must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mutant {
    /// No bug.
    None = 0,
    /// The supervisor's reply rule skips the terminal-task check (and the live-state check).
    NoTerminalGuard = 1,
    /// The reply rule skips the attempt and state-version checks (accepts stale replies).
    AcceptStale = 2,
    /// The execution gate skips the budget reservation before a call (so nothing is charged).
    ChargeAfterCall = 3,
    /// `MemoryStore::cas_now` ignores the expected version of an existing key.
    CasIgnoresVersion = 4,
    /// The worker forgets its action records on every new attempt (idempotency per attempt).
    IdempotencyPerAttempt = 5,
    /// The execution gate lets a write run without checking its task's store preconditions.
    GateSkipsPreconditions = 6,
    /// A peer accepts its worker's reply for a task whose terminal record is settled.
    PeerAcceptsSettled = 7,
    /// Acceptance takes a verified conclusion at its word: its citations are not resolved
    /// against what the runtime recorded for the attempt.
    AcceptsUncitedConclusion = 8,
    /// A worker that takes a task over does not import the task's action book from the store.
    FailoverSkipsImport = 9,
    /// A peer that proposed a new plan version switches to its own proposal (its own ids for
    /// the new tasks) instead of the version the store holds.
    PeerIgnoresPlanVersion = 10,
}

impl Mutant {
    /// The mutants of the star's cores and the store, which the simulator (and for the store's
    /// CAS, the conformance suite) must catch.
    pub const SIMULATED: [Mutant; 8] = [
        Mutant::NoTerminalGuard,
        Mutant::AcceptStale,
        Mutant::ChargeAfterCall,
        Mutant::CasIgnoresVersion,
        Mutant::IdempotencyPerAttempt,
        Mutant::GateSkipsPreconditions,
        Mutant::AcceptsUncitedConclusion,
        Mutant::FailoverSkipsImport,
    ];

    /// The mutants of peer mode: the peer-core tests (`coordinator/tests/peer_mutants.rs`) must
    /// catch them all.
    pub const PEER: [Mutant; 2] = [Mutant::PeerAcceptsSettled, Mutant::PeerIgnoresPlanVersion];

    /// The mutants of peer mode that the simulator's peer schedules (`sim/tests/mutants.rs`)
    /// must catch too (peer schedules draw `[fallback]` replans).
    pub const PEER_SIMULATED: [Mutant; 2] =
        [Mutant::PeerAcceptsSettled, Mutant::PeerIgnoresPlanVersion];
}

static ACTIVE: AtomicU8 = AtomicU8::new(Mutant::None as u8);

/// Activates `mutant` for the whole process (`Mutant::None` switches every bug off).
pub fn set(mutant: Mutant) {
    ACTIVE.store(mutant as u8, Ordering::SeqCst);
}

/// `true` if `mutant` is the active bug.
#[must_use]
pub fn is(mutant: Mutant) -> bool {
    ACTIVE.load(Ordering::Relaxed) == mutant as u8
}
