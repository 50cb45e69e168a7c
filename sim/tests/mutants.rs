//! Every seeded mutant of the star's cores and the store must be caught: by the simulator's
//! invariants, or (for the store's CAS) by the conformance suite and the linearizability check.
//! Peer mode's mutants (`Mutant::PEER_SIMULATED`) must be caught by the simulator's peer schedules too
//! (`coordinator/tests/peer_mutants.rs` catches them with a hand-made scenario).
//!
//! Run with `cargo test -p quorate-sim --features mutants --release --test mutants`.
#![cfg(feature = "mutants")]

use std::panic::{catch_unwind, AssertUnwindSafe};

use quorate_protocols::mutant::{self, Mutant};
use quorate_sim::{hunt, Options, Topology};
use quorate_state::linearizability::{check_histories, stress};
use quorate_state::{conformance, MemoryLog, MemoryStore};

/// Schedules tried per mutant before it counts as surviving.
const BUDGET: u64 = 20_000;

fn store_caught() -> (bool, String) {
    let conformance = catch_unwind(AssertUnwindSafe(|| {
        conformance::run_all(MemoryStore::new, MemoryStore::new, MemoryLog::new);
    }))
    .is_err();
    let lin = (0..20).find(|&seed| {
        let store = MemoryStore::<u64>::new();
        check_histories(&stress(&store, 4, 100, 2, 50, seed)).is_err()
    });
    (
        conformance || lin.is_some(),
        format!(
            "conformance suite failed: {conformance}; linearizability flagged at history {lin:?}"
        ),
    )
}

#[test]
fn every_mutant_is_caught() {
    let mut lines = Vec::new();
    let mut caught = 0;
    // Sanity: with no mutant active, nothing unexplained breaks.
    mutant::set(Mutant::None);
    assert!(
        hunt(Options::default(), 2_000).is_none(),
        "clean build must pass"
    );
    let star = Options {
        topology: Topology::Star,
        ..Options::default()
    };
    let peer = Options {
        topology: Topology::Peer,
        ..Options::default()
    };
    let all: Vec<Mutant> = Mutant::SIMULATED
        .into_iter()
        .chain(Mutant::PEER_SIMULATED)
        .collect();
    for &m in &all {
        mutant::set(m);
        let opts = if Mutant::PEER_SIMULATED.contains(&m) {
            peer
        } else {
            star
        };
        let (ok, how) = match m {
            Mutant::CasIgnoresVersion => store_caught(),
            _ => match hunt(opts, BUDGET) {
                Some((n, out)) => (
                    true,
                    format!(
                        "after {n} schedules (seed {}): {}",
                        out.seed,
                        out.violation.expect("violating")
                    ),
                ),
                None => (false, format!("survived {BUDGET} schedules")),
            },
        };
        mutant::set(Mutant::None);
        caught += u32::from(ok);
        lines.push(format!("{m:?}: caught={ok} {how}"));
    }
    let summary = format!(
        "mutants caught {caught}/{}\n{}",
        all.len(),
        lines.join("\n")
    );
    println!("{summary}");
    assert_eq!(caught as usize, all.len(), "{summary}");
}
