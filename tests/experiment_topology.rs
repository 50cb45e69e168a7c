//! Experiment 1: counted messages equal the formulas, counted tokens equal the closed forms,
//! and a seed reproduces every count.

use quorate::experiment::topology::{
    closed_form_tokens, run_topology, TokenMode, Topology, TopologyConfig, TopologyTransport,
};

fn config(agents: Vec<u64>, rounds: u64, mode: TokenMode, seed: u64) -> TopologyConfig {
    TopologyConfig {
        agents,
        rounds,
        msg_tokens: 7,
        mode,
        seed,
        repeats: 1,
        transport: TopologyTransport::InProcess,
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
            assert!(row.context_match, "{mode:?} {row:?}");
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

/// The largest read of one agent in one round, counted by the participants, against values
/// worked out by hand: n = 5, R = 3, M = 7. The star hub's inbox is 4 reports (28 tokens) a
/// round, a worker's one feedback (7); an all-to-all peer's 4 contributions (28).
#[test]
fn the_hub_reads_what_a_peer_reads_and_a_worker_far_less() {
    let mut c = config(vec![5], 3, TokenMode::Full, 2);
    c.repeats = 3;
    let report = run_topology(&c, |_, _| {}).unwrap();
    let row = |t: Topology| report.rows.iter().find(|r| r.topology == t).unwrap();
    let (star, mesh) = (row(Topology::Star), row(Topology::AllToAll));
    // full: the round-3 history (3 rounds of the inbox); delta: one inbox; artifact: inbox + M.
    assert_eq!(
        (
            star.hub_context.full,
            star.hub_context.delta,
            star.hub_context.artifact
        ),
        (84, 28, 35)
    );
    assert_eq!(
        (
            star.worker_context.full,
            star.worker_context.delta,
            star.worker_context.artifact
        ),
        (21, 7, 14)
    );
    assert_eq!(mesh.hub_context, star.hub_context);
    assert_eq!(mesh.worker_context, star.hub_context);
    assert_eq!(star.largest_context, 84);
    for r in &report.rows {
        assert_eq!(r.wall_ms_runs.len(), 3, "{r:?}");
        assert!(r.repeats_agree, "{r:?}");
        assert!(
            r.wall_ms_min <= r.wall_ms && r.wall_ms <= r.wall_ms_max,
            "{r:?}"
        );
    }
    let mut none = c.clone();
    none.repeats = 0;
    assert!(run_topology(&none, |_, _| {}).is_err());
}
