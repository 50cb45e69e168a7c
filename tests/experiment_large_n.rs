//! Closed forms at the sizes papers use (n = 10 000): finite, and equal to references computed
//! here by other means, never copied from the code's own output.
//!
//! * The binomial tail by the regularized incomplete beta function (statrs' continued fraction):
//!   `P(K >= k) = I_p(k, n - k + 1)` for `K ~ Binomial(n, p)`. The code sums log-space pmf terms;
//!   the reference never forms a pmf term.
//! * A beta-binomial whose pmf is linear in k: with `a = 2, b = 1` (mean `p = 2/3`, pairwise
//!   correlation `rho = 1 / (a + b + 1) = 1/4`),
//!   `P(K = k) = C(n,k) B(k+2, n-k+1) / B(2, 1) = 2 (k + 1) / ((n + 1)(n + 2))`, so the majority
//!   accuracy at n = 10 000 is the exact rational
//!   `(2 * sum_{k=5001}^{10000} (k + 1) + 5001) / (10001 * 10002)`, summed here in integers.

use quorate::experiment::models::{Model, ModelError};
use statrs::function::beta::beta_reg;

const N: usize = 10_000;

fn ones(n: usize) -> Vec<usize> {
    vec![1; n]
}

/// `P(K > n/2) + P(K = n/2) / 2` for `K ~ Binomial(n, p)`, from the incomplete beta function.
fn binomial_majority_reference(n: usize, p: f64) -> f64 {
    let tail = |k: usize| beta_reg(k as f64, (n - k + 1) as f64, p); // P(K >= k)
    if n % 2 == 1 {
        tail(n / 2 + 1)
    } else {
        let above = tail(n / 2 + 1);
        let at = tail(n / 2) - above;
        above + at / 2.0
    }
}

#[test]
fn binomial_and_common_shock_at_ten_thousand() {
    for (n, p) in [(N, 0.505), (N + 1, 0.51), (N, 0.5), (N, 0.49)] {
        let reference = binomial_majority_reference(n, p);
        let code = Model::CommonShock.majority_closed_form(&ones(n), p, 0.0);
        assert!(code.is_finite(), "n = {n}, p = {p}: {code}");
        assert!(
            (code - reference).abs() < 1e-9,
            "n = {n}, p = {p}: {code} vs {reference}"
        );
        // Common shock mixes the independent vote with one shared draw (right with p).
        let rho = 0.3;
        let mixed = Model::CommonShock.majority_closed_form(&ones(n), p, rho);
        let expected = (1.0 - rho) * reference + rho * p;
        assert!((mixed - expected).abs() < 1e-9, "{mixed} vs {expected}");
    }
    // Sanity of the reference itself: p = 1/2 with n even is exactly 1/2 by symmetry.
    assert!((binomial_majority_reference(N, 0.5) - 0.5).abs() < 1e-12);
}

#[test]
fn beta_binomial_with_a_linear_pmf_at_ten_thousand() {
    let n = N as u128;
    let high: u128 = (n / 2 + 1..=n).map(|k| k + 1).sum();
    let numerator = 2 * high + (n / 2 + 1);
    let denominator = (n + 1) * (n + 2);
    let exact = numerator as f64 / denominator as f64;
    let code = Model::BetaBinomial.majority_closed_form(&ones(N), 2.0 / 3.0, 0.25);
    assert!(code.is_finite());
    assert!((code - exact).abs() < 1e-9, "{code} vs {exact}");
    let pmf = Model::BetaBinomial.pmf(N, 2.0 / 3.0, 0.25);
    for k in [0, 1, 5000, 9999, 10_000] {
        let want = 2.0 * (k as f64 + 1.0) / ((N as f64 + 1.0) * (N as f64 + 2.0));
        assert!(
            (pmf[k] - want).abs() < 1e-9 * want,
            "k = {k}: {} vs {want}",
            pmf[k]
        );
    }
}

#[test]
fn every_model_is_finite_at_ten_thousand() {
    let blocs = ones(N);
    let mix = Model::DifficultyMix {
        alpha: 0.7,
        p1: 0.95,
        p2: 0.45,
    };
    for (model, rho) in [
        (Model::CommonShock, 0.5),
        (Model::BetaBinomial, 0.01),
        (Model::BetaBinomial, 0.99),
        (Model::Bahadur, 0.0),
        (mix.clone(), 0.0),
    ] {
        model.validate(&blocs, 0.8, rho).unwrap();
        let a = model.majority_closed_form(&blocs, 0.8, rho);
        assert!(
            a.is_finite() && (0.0..=1.0).contains(&a),
            "{model:?} {rho}: {a}"
        );
        let total: f64 = model.pmf(N, 0.8, rho).iter().sum();
        assert!(
            (total - 1.0).abs() < 1e-9,
            "{model:?} {rho}: pmf sums to {total}"
        );
    }
    // The mix: 0.7 of questions at an easy 0.95 (the majority is then right) plus 0.3 at 0.45.
    let reference =
        0.7 * binomial_majority_reference(N, 0.95) + 0.3 * binomial_majority_reference(N, 0.45);
    let code = mix.majority_closed_form(&blocs, 0.8, 0.0);
    assert!((code - reference).abs() < 1e-9, "{code} vs {reference}");
}

#[test]
fn bahadur_outside_its_range_at_ten_thousand_is_a_typed_error() {
    let err = Model::Bahadur.validate(&ones(N), 0.8, 0.01).unwrap_err();
    match &err {
        ModelError::BahadurOutOfRange { n, min, max, .. } => {
            assert_eq!(*n, N);
            assert!(min < max && *max < 0.01, "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("valid range is ["), "{err}");
}

/// The whole sweep at n = 10 000: the vote (a set of voters, O(1) a ballot), the pooled error
/// correlation and the closed form all stay finite, and the estimate covers the exact value.
#[test]
fn a_sweep_cell_at_ten_thousand_voters() {
    use quorate::experiment::plurality::WrongAnswers;
    use quorate::experiment::voting::{run_voting, VotingConfig};
    let config = VotingConfig {
        voters: vec![N],
        p: 0.8,
        rhos: vec![0.2],
        trials: 12,
        model: Model::BetaBinomial,
        blocs: Vec::new(),
        seed: 3,
        runtime_trials: 0,
        answers: 2,
        wrong: WrongAnswers::Uniform,
        accuracies: Vec::new(),
    };
    let report = run_voting(&config, |_, _| {}).unwrap();
    let cell = &report.cells[0];
    let exact = cell.naive_closed_form.unwrap();
    assert!(exact.is_finite() && exact > 0.9 && exact < 0.95, "{exact}");
    assert!(
        cell.naive_ci.0 <= exact && exact <= cell.naive_ci.1,
        "{cell:?}"
    );
    let corr = cell.measured_correlation.unwrap();
    assert!(corr.is_finite() && (-1.0..=1.0).contains(&corr), "{corr}");
}
