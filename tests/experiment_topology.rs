//! Experiment 1: counted messages equal the formulas, counted tokens equal the closed forms,
//! and a seed reproduces every count.

use quorate::experiment::topology::{
    closed_form_tokens, run_topology, TokenMode, Topology, TopologyConfig,
};

fn config(agents: Vec<u64>, rounds: u64, mode: TokenMode, seed: u64) -> TopologyConfig {
    TopologyConfig {
        agents,
        rounds,
        msg_tokens: 7,
        mode,
        seed,
    }
}

#[test]
fn counted_messages_equal_the_formulas() {
    for (rounds, mode) in [
        (1, TokenMode::Full),
        (3, TokenMode::Delta),
        (4, TokenMode::Artifact),
    ] {
        let report =
            run_topology(&config(vec![1, 2, 3, 5, 8], rounds, mode, 1), |_, _| {}).unwrap();
        assert_eq!(report.rows.len(), 10);
        for row in &report.rows {
            let n = row.n;
            let formula = match row.topology {
                Topology::Star => 2 * (n - 1) * rounds,
                Topology::AllToAll => n * (n - 1) * rounds,
            };
            assert_eq!(row.messages, formula, "{row:?}");
            assert_eq!(row.formula_messages, formula);
            assert_eq!(row.tokens, row.closed_form_tokens, "{mode:?} {row:?}");
            assert_eq!(row.bytes > 0, formula > 0, "every envelope has bytes");
        }
    }
}

#[test]
fn token_closed_forms_by_hand() {
    // n = 4, R = 3, M = 10. Star: m = 6 a round; all-to-all: m = 12.
    assert_eq!(
        closed_form_tokens(Topology::Star, TokenMode::Delta, 4, 3, 10),
        180
    );
    assert_eq!(
        closed_form_tokens(Topology::Star, TokenMode::Full, 4, 3, 10),
        6 * 10 * 6
    );
    assert_eq!(
        closed_form_tokens(Topology::AllToAll, TokenMode::Full, 4, 3, 10),
        12 * 10 * 6
    );
    assert_eq!(
        closed_form_tokens(Topology::AllToAll, TokenMode::Artifact, 4, 3, 10),
        360 + 80
    );
    // At n = 2 both topologies exchange two messages a round.
    assert_eq!(
        Topology::Star.messages_per_round(2),
        Topology::AllToAll.messages_per_round(2)
    );
}

#[test]
fn same_seed_same_numbers() {
    let strip = |seed| {
        let r = run_topology(&config(vec![3, 6], 2, TokenMode::Full, seed), |_, _| {}).unwrap();
        r.rows
            .iter()
            .map(|r| (r.messages, r.bytes, r.tokens))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(42), strip(42));
    assert_ne!(
        strip(42),
        strip(43),
        "the seed drives the message text, hence the bytes"
    );
}

#[test]
fn bad_configuration_is_refused() {
    assert!(run_topology(&config(vec![], 1, TokenMode::Full, 0), |_, _| {}).is_err());
    assert!(run_topology(&config(vec![2], 0, TokenMode::Full, 0), |_, _| {}).is_err());
}
