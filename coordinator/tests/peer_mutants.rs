//! Peer mode's seeded mutants (`Mutant::PEER`) must be caught by the peer-core tests, with a
//! hand-made scenario each (the simulator hunts them in its peer schedules too:
//! `sim/tests/mutants.rs`).
//! One test in its own binary: the mutant switch is process-wide.
//!
//! Run with `cargo test -p quorate-coordinator --features mutants --test peer_mutants`.
#![cfg(feature = "mutants")]

mod peer_net;
mod support;

use std::panic::{catch_unwind, AssertUnwindSafe};

use quorate_protocols::mutant::{self, Mutant};

/// The scenario that must catch `m`.
fn scenario(m: Mutant) -> fn() {
    match m {
        Mutant::PeerAcceptsSettled => || {
            let (net, runner) = peer_net::second_answer_after_settled();
            assert_eq!(net.cores[runner].messages().rejected_late, 1);
        },
        Mutant::PeerIgnoresPlanVersion => || {
            peer_net::switch_to_fallback();
        },
        other => panic!("no peer scenario for {other:?}"),
    }
}

#[test]
fn every_peer_mutant_is_caught() {
    for m in Mutant::PEER {
        // Sanity: with no mutant active, the scenario passes.
        mutant::set(Mutant::None);
        scenario(m)();
        mutant::set(m);
        let outcome = catch_unwind(AssertUnwindSafe(scenario(m)));
        mutant::set(Mutant::None);
        let caught = match outcome {
            Ok(()) => None,
            Err(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string())),
        };
        println!("{m:?}: caught by {caught:?}");
        let how = caught.unwrap_or_else(|| panic!("{m:?} survived"));
        match m {
            Mutant::PeerAcceptsSettled => assert!(how.contains("accepted a reply"), "{how}"),
            Mutant::PeerIgnoresPlanVersion => {
                assert!(how.contains("gives draft the stored id"), "{how}");
            }
            other => panic!("no peer scenario for {other:?}"),
        }
    }
}
