//! The same seed gives the same trace (every delivery, tick and event line, ids included, and
//! their hash), the same faults and the same number of steps; different seeds give different
//! traces and different ids. `quorate-sim --seed S --trace` prints the same bytes twice.

use std::collections::HashSet;

use quorate_sim::{run_schedule, Options, Topology};

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

/// The text of schedule `seed`'s trace, through the library.
fn trace_of(seed: u64) -> (String, [u8; 32]) {
    let opts = Options {
        trace: true,
        ..Options::default()
    };
    let out = run_schedule(seed, opts);
    assert!(out.violation.is_none(), "seed {seed}: {:?}", out.violation);
    (out.trace.expect("a kept trace"), out.trace_hash)
}

/// The values of `key=` in a trace (the ids it prints).
fn ids_named(trace: &str, key: &str) -> HashSet<String> {
    trace
        .split_whitespace()
        .filter_map(|w| w.strip_prefix(key))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_trace_bytes_ids_included() {
    for seed in [0, 3, 17, 99] {
        let (a, hash_a) = trace_of(seed);
        let (b, hash_b) = trace_of(seed);
        assert_eq!(a, b, "seed {seed}");
        assert_eq!(hash_a, hash_b);
        for key in ["run=", "task=", "dedupe=", "correlation="] {
            assert!(
                !ids_named(&a, key).is_empty(),
                "seed {seed}: no {key} in the trace"
            );
        }
        assert!(a.contains("\"run_id\":") && a.contains("\"task_id\":"));
    }
}

#[test]
fn another_seed_draws_other_ids() {
    let (a, hash_a) = trace_of(3);
    let (b, hash_b) = trace_of(4);
    assert_ne!(hash_a, hash_b);
    for key in ["run=", "task=", "dedupe=", "correlation="] {
        let (ia, ib) = (ids_named(&a, key), ids_named(&b, key));
        assert!(ia.is_disjoint(&ib), "seeds 3 and 4 share a {key} id");
    }
}

#[test]
fn the_binary_prints_the_same_bytes_twice() {
    let run = |seed: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quorate-sim"))
            .args(["--seed", seed, "--trace"])
            .output()
            .expect("quorate-sim runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let (a, b) = (run("5"), run("5"));
    assert_eq!(a, b, "two runs of seed 5 printed different bytes");
    let text = String::from_utf8(a).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{text}");
    assert!(lines.iter().any(|l| l.contains(" event {")));
    assert!(lines.iter().any(|l| l.contains(" dedupe=")));
    let summary = lines.iter().position(|l| l.starts_with("seed 5: "));
    assert!(
        summary.is_some_and(|i| i > 10),
        "the summary follows the trace"
    );
    assert_ne!(run("6"), text.as_bytes(), "seed 6 printed seed 5's trace");
}

/// Peer schedules: the same seed gives the same trace bytes (every peer's events with their
/// `peer` field, the broadcasts between peers with their ids), through the library and the
/// binary; another seed gives another trace.
#[test]
fn peer_schedules_give_the_same_trace_bytes() {
    let opts = Options {
        trace: true,
        topology: Topology::Peer,
        ..Options::default()
    };
    let mut broadcasts = 0;
    // Seed 966 switches to its fallback plan (every peer proposes or reads the plan version).
    for seed in [0, 3, 17, 99, 966] {
        let (a, b) = (run_schedule(seed, opts), run_schedule(seed, opts));
        assert!(
            a.peer && a.violation.is_none(),
            "seed {seed}: {:?}",
            a.violation
        );
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed}");
        let text = a.trace.expect("kept");
        assert!(
            text.contains("\"peer\":0") && text.contains("\"peer\":1"),
            "{text}"
        );
        broadcasts += text.matches(" broadcast -> peer ").count();
    }
    assert!(
        broadcasts > 0,
        "no broadcast between peers in five schedules"
    );
    let replanned = run_schedule(966, opts).trace.expect("kept");
    assert!(
        replanned.contains("\"replanned\""),
        "seed 966 no longer replans"
    );
    let other = run_schedule(4, opts);
    assert_ne!(other.trace_hash, run_schedule(3, opts).trace_hash);
    let run = |seed: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_quorate-sim"))
            .args(["--seed", seed, "--trace", "--topology", "peer"])
            .output()
            .expect("quorate-sim runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let printed = run("7");
    assert_eq!(
        printed,
        run("7"),
        "two runs of peer seed 7 printed different bytes"
    );
    let text = String::from_utf8(printed).expect("utf-8");
    assert!(
        text.lines().any(|l| l.starts_with("seed 7: peer, ")),
        "{text}"
    );
}

#[test]
fn both_topologies_are_drawn_by_default() {
    let peer = (0..400)
        .filter(|&seed| Topology::Both.is_peer(seed))
        .count();
    assert!(
        (60..140).contains(&peer),
        "{peer} of 400 seeds in peer mode"
    );
    let out = run_schedule(0, Options::default());
    assert_eq!(out.peer, Topology::Both.is_peer(0));
}
