//! The same seed gives the same trace (hash of the event stream), the same faults and the same
//! number of steps; different seeds give different traces.

use std::collections::HashSet;

use quorate_sim::{run_schedule, Options};

#[test]
fn same_seed_same_trace() {
    for seed in 0..300 {
        let a = run_schedule(seed, Options::default());
        let b = run_schedule(seed, Options::default());
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed}");
        assert_eq!(
            (a.faults, a.steps, a.stop),
            (b.faults, b.steps, b.stop),
            "seed {seed}"
        );
    }
}

#[test]
fn different_seeds_differ() {
    let hashes: HashSet<[u8; 32]> = (0..200)
        .map(|seed| run_schedule(seed, Options::default()).trace_hash)
        .collect();
    assert!(hashes.len() > 190, "only {} distinct traces", hashes.len());
}
