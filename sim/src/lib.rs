//! # quorate-sim
//!
//! A seeded, deterministic simulator over quorate's pure cores: the supervisor
//! ([`SupervisorCore`](quorate_coordinator::SupervisorCore)), the workers
//! ([`WorkerCore`](quorate_workers::WorkerCore)), the result store
//! ([`MemoryStore`](quorate_state::MemoryStore)), the scripted tool [`World`](quorate_workers::World)
//! and a network of in-flight envelopes, all in one thread on a virtual clock.
//!
//! * [`gen`] draws a schedule from a seed: a plan DAG of 2-8 tasks, a script per task (ok calls,
//!   errors, timeouts before and after commit, approvals, answers, duplicate and late replies),
//!   supervisor settings, the fault plan, and sometimes a `[fallback]` plan that a failed store
//!   precondition switches to.
//! * [`Sim`] runs it: drops, duplicates, delays and reorders envelopes, crashes workers
//!   mid-task, crashes the coordinator mid-step and resumes it from its log and result store,
//!   replans, cancels, and answers approvals — and checks the invariants ([`check`]) after every
//!   step. In peer mode ([`Topology`]; a quarter of the seeds by default) peer cores
//!   ([`PeerCore`](quorate_coordinator::PeerCore)) claim the tasks by CAS over shared stores
//!   instead, each with its own worker, and every peer's view is checked.
//! * [`campaign`] runs many seeds and reports faults exercised, violations and throughput.
//!
//! The same seed always gives the same trace, ids included: [`Outcome::trace_hash`] hashes
//! every delivery, tick and event line, and [`Options::trace`] keeps their text
//! ([`Outcome::trace`], what `quorate-sim --seed S --trace` prints). Every core's ids come from
//! an `IdSource` forked from the seed.
//! docs/reliability.md lists each guarantee and the command that checks it.

pub mod campaign;
pub mod check;
pub mod fault;
pub mod gen;
mod sim;

pub use campaign::{hunt, known_bug, run_campaign, Campaign, CampaignReport, KNOWN_BUGS};
pub use check::{Invariant, Violation};
pub use fault::{Fault, FaultCounts};
pub use sim::{Options, Outcome, Persistence, Sim, Topology};

/// Runs schedule `seed` with `opts`; a panic inside a core is reported as a violation.
#[must_use]
pub fn run_schedule(seed: u64, opts: Options) -> Outcome {
    let result = std::panic::catch_unwind(|| Sim::new(seed, opts).run());
    result.unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".to_owned());
        Outcome {
            seed,
            violation: Some(Violation {
                invariant: Invariant::Panic,
                at_ms: 0,
                detail,
            }),
            faults: FaultCounts::default(),
            trace_hash: [0; 32],
            trace: None,
            steps: 0,
            stop: None,
            tasks: 0,
            slice_reused: false,
            peer: opts.topology.is_peer(seed),
        }
    })
}
