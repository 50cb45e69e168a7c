//! Experiment 2: majority voting, Monte Carlo beside the exact closed forms.

use quorate::experiment::models::Model;
use quorate::experiment::plurality::WrongAnswers;
use quorate::experiment::voting::{run_voting, VotingCell, VotingConfig, VotingError};

fn config(
    model: Model,
    voters: Vec<usize>,
    rhos: Vec<f64>,
    trials: u64,
    runtime: u64,
) -> VotingConfig {
    VotingConfig {
        voters,
        p: 0.8,
        rhos,
        trials,
        model,
        blocs: Vec::new(),
        seed: 7,
        runtime_trials: runtime,
        answers: 2,
        wrong: WrongAnswers::Uniform,
        accuracies: Vec::new(),
    }
}

#[test]
fn common_shock_three_voters_cover_the_closed_forms() {
    let c = config(Model::CommonShock, vec![3], vec![0.0, 1.0], 4000, 0);
    let report = run_voting(&c, |_, _| {}).unwrap();
    let at = |rho: f64| report.cells.iter().find(|c| c.rho == Some(rho)).unwrap();
    let independent = at(0.0);
    assert!((independent.naive_closed_form.unwrap() - 0.896).abs() < 1e-12);
    assert!(
        independent.naive_ci.0 <= 0.896 && 0.896 <= independent.naive_ci.1,
        "{independent:?}"
    );
    let shared = at(1.0);
    assert!((shared.naive_closed_form.unwrap() - 0.8).abs() < 1e-12);
    assert!(
        shared.naive_ci.0 <= 0.8 && 0.8 <= shared.naive_ci.1,
        "{shared:?}"
    );
    assert!((shared.measured_correlation.unwrap() - 1.0).abs() < 1e-9);
    assert!(independent.measured_correlation.unwrap().abs() < 0.06);
}

#[test]
fn monte_carlo_agrees_with_every_closed_form() {
    let models = [
        (Model::CommonShock, vec![0.0, 0.3]),
        (Model::BetaBinomial, vec![0.0, 0.2, 1.0]),
        (Model::Bahadur, vec![0.0, 0.05]),
        (
            Model::DifficultyMix {
                alpha: 0.7,
                p1: 0.95,
                p2: 0.45,
            },
            vec![0.0],
        ),
    ];
    let trials = 3000;
    for (model, rhos) in models {
        let c = config(model.clone(), vec![1, 4, 5], rhos, trials, 0);
        let report = run_voting(&c, |_, _| {}).unwrap();
        for c in &report.cells {
            let exact = c.naive_closed_form.unwrap();
            let sd = (exact * (1.0 - exact) / trials as f64).sqrt();
            assert!(
                (c.naive_accuracy - exact).abs() <= 4.0 * sd + 1e-9,
                "{model:?} {c:?}"
            );
            // Without shared sources every voter is its own source: deduplicating changes nothing
            // in the sampled votes either.
            assert_eq!(c.dedup_accuracy, c.naive_accuracy, "{model:?} {c:?}");
        }
    }
}

#[test]
fn shared_evidence_dedup_counts_sources() {
    let mut c = config(Model::SharedEvidence, vec![], vec![0.0], 3000, 0);
    c.blocs = vec![vec![3, 1, 1], vec![1, 1, 1]];
    let report = run_voting(&c, |_, _| {}).unwrap();
    let bloc = &report.cells[0];
    assert_eq!(bloc.n, 5);
    assert!(
        (bloc.naive_closed_form.unwrap() - 0.8).abs() < 1e-12,
        "the bloc of three decides"
    );
    assert!(
        (bloc.dedup_closed_form.unwrap() - 0.896).abs() < 1e-12,
        "three sources, one vote each"
    );
    // Monte Carlo within four standard errors of the exact values.
    let sd = |x: f64| 4.0 * (x * (1.0 - x) / 3000.0).sqrt();
    assert!((bloc.dedup_accuracy - 0.896).abs() <= sd(0.896), "{bloc:?}");
    assert!((bloc.naive_accuracy - 0.8).abs() <= sd(0.8), "{bloc:?}");
    assert!((bloc.implied_correlation - 0.3).abs() < 1e-12);
}

#[test]
fn runtime_path_agrees_with_the_direct_vote() {
    let mut c = config(Model::CommonShock, vec![2, 3], vec![0.5], 60, 25);
    c.seed = 3;
    let report = run_voting(&c, |_, _| {}).unwrap();
    for cell in &report.cells {
        assert_eq!(cell.runtime_trials, 25);
        assert_eq!(cell.direct_trials, 35);
        assert_eq!(cell.runtime_mismatches, 0, "{cell:?}");
    }
    let mut s = config(Model::SharedEvidence, vec![], vec![0.0], 30, 30);
    s.blocs = vec![vec![2, 1, 1]];
    let report = run_voting(&s, |_, _| {}).unwrap();
    assert_eq!(report.cells[0].runtime_mismatches, 0);
}

#[test]
fn same_seed_same_numbers() {
    let c = config(Model::BetaBinomial, vec![3, 5], vec![0.1, 0.4], 500, 5);
    let a = serde_json::to_string(&run_voting(&c, |_, _| {}).unwrap()).unwrap();
    let b = serde_json::to_string(&run_voting(&c, |_, _| {}).unwrap()).unwrap();
    assert_eq!(a, b);
    let mut other = c.clone();
    other.seed = 8;
    let c2 = serde_json::to_string(&run_voting(&other, |_, _| {}).unwrap()).unwrap();
    assert_ne!(a, c2);
}

#[test]
fn invalid_bahadur_is_refused_with_the_range() {
    let c = config(Model::Bahadur, vec![5], vec![0.5], 10, 0);
    let err = run_voting(&c, |_, _| {}).unwrap_err();
    assert!(matches!(err, VotingError::Model(_)));
    let text = err.to_string();
    assert!(text.contains("valid range is ["), "{text}");
}

fn within_four_sd(c: &VotingCell) {
    let exact = c.naive_closed_form.expect("a closed form at this size");
    let sd = (exact * (1.0 - exact) / c.trials as f64).sqrt();
    assert!((c.naive_accuracy - exact).abs() <= 4.0 * sd + 1e-9, "{c:?}");
}

#[test]
fn plurality_monte_carlo_agrees_with_its_closed_forms() {
    let models = [
        (Model::CommonShock, vec![0.0, 0.4]),
        (Model::BetaBinomial, vec![0.2]),
        (Model::Bahadur, vec![0.03]),
        (
            Model::DifficultyMix {
                alpha: 0.6,
                p1: 0.9,
                p2: 0.3,
            },
            vec![0.0],
        ),
    ];
    for (model, rhos) in models {
        for wrong in [
            WrongAnswers::Uniform,
            WrongAnswers::Attractor { weight: 0.7 },
        ] {
            let mut c = config(model.clone(), vec![2, 4, 7], rhos.clone(), 3000, 0);
            c.p = 0.5;
            c.answers = 4;
            c.wrong = wrong;
            let report = run_voting(&c, |_, _| {}).unwrap();
            report.cells.iter().for_each(within_four_sd);
        }
    }
    // Plurality beats majority over right/wrong when wrong answers spread: p = 0.4, n = 7.
    let mut c = config(Model::CommonShock, vec![7], vec![0.0], 10, 0);
    c.p = 0.4;
    let two = run_voting(&c, |_, _| {}).unwrap().cells[0]
        .naive_closed_form
        .unwrap();
    c.answers = 5;
    let five = run_voting(&c, |_, _| {}).unwrap().cells[0]
        .naive_closed_form
        .unwrap();
    assert!(two < 0.4 && five > 0.4, "{two} {five}");
}

#[test]
fn heterogeneous_voters_and_shared_evidence_plurality() {
    let mut c = config(Model::CommonShock, vec![1, 3, 5], vec![0.0, 0.5], 4000, 0);
    c.accuracies = vec![0.9, 0.75, 0.6, 0.55, 0.55];
    c.answers = 3;
    let report = run_voting(&c, |_, _| {}).unwrap();
    report.cells.iter().for_each(within_four_sd);
    // One voter: its own accuracy, whatever rho.
    for cell in report.cells.iter().filter(|c| c.n == 1) {
        assert!(
            (cell.naive_closed_form.unwrap() - 0.9).abs() < 1e-12,
            "{cell:?}"
        );
    }
    let mut s = config(Model::SharedEvidence, vec![], vec![0.0], 4000, 0);
    s.blocs = vec![vec![3, 1, 1], vec![1, 1, 1, 1]];
    s.answers = 3;
    let report = run_voting(&s, |_, _| {}).unwrap();
    report.cells.iter().for_each(within_four_sd);
    for cell in &report.cells {
        let exact = cell.dedup_closed_form.unwrap();
        let sd = (exact * (1.0 - exact) / 4000.0).sqrt();
        assert!((cell.dedup_accuracy - exact).abs() <= 4.0 * sd, "{cell:?}");
    }
    // Refused: accuracies with another model, or fewer accuracies than voters.
    let mut bad = c.clone();
    bad.model = Model::BetaBinomial;
    assert!(matches!(
        run_voting(&bad, |_, _| {}),
        Err(VotingError::Unsupported(_))
    ));
    let mut bad = c.clone();
    bad.voters = vec![6];
    assert!(matches!(
        run_voting(&bad, |_, _| {}),
        Err(VotingError::TooFewAccuracies {
            voters: 6,
            accuracies: 5
        })
    ));
}

#[test]
fn plurality_without_a_closed_form_says_so() {
    let mut c = config(Model::BetaBinomial, vec![201], vec![0.2], 50, 0);
    c.answers = 3;
    let cell = &run_voting(&c, |_, _| {}).unwrap().cells[0];
    assert_eq!(
        cell.naive_closed_form, None,
        "Monte Carlo only above 200 voters"
    );
    assert!(cell.naive_ci.0 < cell.naive_ci.1);
}

/// A cell's estimate depends on the cell, not on where it sits in the sweep.
#[test]
fn a_cell_gives_the_same_estimate_alone_or_in_a_sweep() {
    let sweep = config(
        Model::BetaBinomial,
        vec![1, 3, 5, 9],
        vec![0.0, 0.2, 0.6],
        400,
        3,
    );
    let all = run_voting(&sweep, |_, _| {}).unwrap();
    let alone = config(Model::BetaBinomial, vec![5], vec![0.6], 400, 3);
    let one = run_voting(&alone, |_, _| {}).unwrap();
    let cell = all
        .cells
        .iter()
        .find(|c| c.n == 5 && c.rho == Some(0.6))
        .unwrap();
    assert_eq!(cell.naive_correct, one.cells[0].naive_correct);
    assert_eq!(cell.measured_correlation, one.cells[0].measured_correlation);
    // Reordered lists: same cells, same numbers.
    let reordered = config(
        Model::BetaBinomial,
        vec![9, 5, 3, 1],
        vec![0.6, 0.2, 0.0],
        400,
        3,
    );
    let again = run_voting(&reordered, |_, _| {}).unwrap();
    for c in &all.cells {
        let d = again
            .cells
            .iter()
            .find(|d| d.n == c.n && d.rho == c.rho)
            .unwrap();
        assert_eq!(c.naive_correct, d.naive_correct, "{c:?}");
    }
}
