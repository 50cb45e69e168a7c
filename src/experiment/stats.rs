//! Exact statistics used by the experiments: binomial and beta-binomial pmfs, the
//! Poisson-binomial (voters of different accuracies), majority accuracy from a pmf, Wilson
//! intervals, and a pairwise error-correlation accumulator.
//!
//! **Large n.** Every pmf is computed in log space (`ln C(n, k)` from the log-gamma function of
//! `statrs`, `k ln p + (n-k) ln(1-p)`) and exponentiated term by term, so no factor overflows or
//! underflows into `inf * 0 = NaN`: the closed forms stay finite and correct at n = 10 000 and
//! beyond (tests/experiment_large_n.rs checks them against independent references). Nothing is
//! approximated by a normal law.

use statrs::function::gamma::ln_gamma;

/// `ln C(n, k)` (`-inf` for `k > n`).
#[must_use]
pub fn ln_choose(n: usize, k: usize) -> f64 {
    if k > n {
        return f64::NEG_INFINITY;
    }
    let k = k.min(n - k);
    if k < 30 {
        // Exact small products (ln_gamma loses a few ulps on large arguments).
        return (0..k).map(|i| ((n - i) as f64 / (i + 1) as f64).ln()).sum();
    }
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// `n choose k` as an `f64` (`inf` once it passes `f64::MAX`, near n = 1030).
#[must_use]
pub fn choose(n: usize, k: usize) -> f64 {
    ln_choose(n, k).exp()
}

/// `k ln p` with `0 ln 0 = 0`.
fn xlogy(k: usize, p: f64) -> f64 {
    if k == 0 {
        0.0
    } else {
        k as f64 * p.ln()
    }
}

/// `P(K = k)` for `K ~ Binomial(n, p)`, in log space (exact 0 and 1 at `p = 0, 1`).
#[must_use]
pub fn binomial_pmf(n: usize, k: usize, p: f64) -> f64 {
    if k > n {
        return 0.0;
    }
    (ln_choose(n, k) + xlogy(k, p) + xlogy(n - k, 1.0 - p)).exp()
}

/// The pmf of `Binomial(n, p)` as a vector of length `n + 1`.
#[must_use]
pub fn binomial(n: usize, p: f64) -> Vec<f64> {
    (0..=n).map(|k| binomial_pmf(n, k, p)).collect()
}

/// The pmf of the number of successes of independent trials with probabilities `ps`
/// (Poisson-binomial), by the usual O(n^2) recurrence (each step a convex combination, so it
/// neither overflows nor cancels).
#[must_use]
pub fn poisson_binomial(ps: &[f64]) -> Vec<f64> {
    let mut pmf = vec![1.0];
    for &p in ps {
        let mut next = vec![0.0; pmf.len() + 1];
        for (k, w) in pmf.iter().enumerate() {
            next[k] += w * (1.0 - p);
            next[k + 1] += w * p;
        }
        pmf = next;
    }
    pmf
}

/// `ln B(a, b)`.
#[must_use]
pub fn ln_beta(a: f64, b: f64) -> f64 {
    ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b)
}

/// Accuracy of a majority of `n = pmf.len() - 1` voters whose number of correct votes has
/// distribution `pmf`: `P(K > n/2)` plus half of `P(K = n/2)` (a tie is broken by a fair coin).
#[must_use]
pub fn majority_accuracy(pmf: &[f64]) -> f64 {
    let n = pmf.len().saturating_sub(1);
    let mut acc = 0.0;
    for (k, p) in pmf.iter().enumerate() {
        if 2 * k > n {
            acc += p;
        } else if 2 * k == n {
            acc += 0.5 * p;
        }
    }
    acc
}

/// Majority accuracy of `n` independent voters each right with probability `p`.
#[must_use]
pub fn independent_majority(n: usize, p: f64) -> f64 {
    majority_accuracy(&binomial(n, p))
}

/// The 95% Wilson score interval of `successes` out of `trials` (`(0, 1)` for no trials).
#[must_use]
pub fn wilson95(successes: u64, trials: u64) -> (f64, f64) {
    if trials == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054_f64;
    let n = trials as f64;
    let phat = successes as f64 / n;
    let denom = 1.0 + z * z / n;
    let centre = (phat + z * z / (2.0 * n)) / denom;
    let half = z * (phat * (1.0 - phat) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Voters up to which [`PairwiseErrors`] keeps every pair; above it keeps the pooled estimate.
pub const PAIRWISE_MAX: usize = 128;

/// Accumulates which voters erred on each trial and reports the mean pairwise (Pearson)
/// correlation of the error indicators.
///
/// Up to [`PAIRWISE_MAX`] voters it keeps every pair and averages the per-pair correlations;
/// above (memory would grow as `n^2`) it keeps only per-voter counts and the number of erring
/// pairs per trial, and reports the pooled correlation (mean pairwise covariance over mean
/// variance), which equals the mean of the per-pair ones for exchangeable voters.
#[derive(Clone, Debug)]
pub struct PairwiseErrors {
    n: usize,
    trials: u64,
    errors: Vec<u64>,
    both: Vec<u64>,
    /// Sum over trials of `S (S - 1)`, with `S` the voters that erred (pooled mode).
    pairs_erring: f64,
}

impl PairwiseErrors {
    /// An accumulator for `n` voters.
    #[must_use]
    pub fn new(n: usize) -> Self {
        let both = if n <= PAIRWISE_MAX { n * n } else { 0 };
        Self {
            n,
            trials: 0,
            errors: vec![0; n],
            both: vec![0; both],
            pairs_erring: 0.0,
        }
    }

    /// Records one trial: `correct[i]` says whether voter `i` was right.
    pub fn record(&mut self, correct: &[bool]) {
        self.trials += 1;
        let pooled = self.both.is_empty();
        let mut erring = 0u64;
        for (i, _) in correct.iter().enumerate().filter(|(_, right)| !**right) {
            self.errors[i] += 1;
            erring += 1;
            if pooled {
                continue;
            }
            for (j, _) in correct
                .iter()
                .enumerate()
                .skip(i + 1)
                .filter(|(_, right)| !**right)
            {
                self.both[i * self.n + j] += 1;
            }
        }
        self.pairs_erring += (erring * erring.saturating_sub(1)) as f64;
    }

    /// The mean over voter pairs of the error correlation; pairs where a voter never (or
    /// always) erred have no correlation and are skipped. `None` if no pair had one.
    #[must_use]
    pub fn mean_correlation(&self) -> Option<f64> {
        let t = self.trials as f64;
        if self.both.is_empty() {
            return self.pooled_correlation();
        }
        let (mut sum, mut pairs) = (0.0, 0u64);
        for i in 0..self.n {
            for j in (i + 1)..self.n {
                let (pi, pj) = (self.errors[i] as f64 / t, self.errors[j] as f64 / t);
                let var = pi * (1.0 - pi) * pj * (1.0 - pj);
                if var <= 0.0 {
                    continue;
                }
                let pij = self.both[i * self.n + j] as f64 / t;
                sum += (pij - pi * pj) / var.sqrt();
                pairs += 1;
            }
        }
        (pairs > 0).then(|| sum / pairs as f64)
    }

    fn pooled_correlation(&self) -> Option<f64> {
        let (t, n) = (self.trials as f64, self.n as f64);
        if self.n < 2 || self.trials == 0 {
            return None;
        }
        let e: Vec<f64> = self.errors.iter().map(|&c| c as f64 / t).collect();
        let sum: f64 = e.iter().sum();
        let sum_sq: f64 = e.iter().map(|x| x * x).sum();
        // Mean over ordered pairs i != j of P(both err) and of e_i e_j.
        let joint = self.pairs_erring / t / (n * (n - 1.0));
        let product = (sum * sum - sum_sq) / (n * (n - 1.0));
        let var = e.iter().map(|x| x * (1.0 - x)).sum::<f64>() / n;
        (var > 0.0).then(|| (joint - product) / var)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_voters_at_point_eight() {
        assert!((independent_majority(3, 0.8) - 0.896).abs() < 1e-12);
        assert!((independent_majority(1, 0.8) - 0.8).abs() < 1e-12);
        // Two voters: right if both right, half credit on a split.
        assert!((independent_majority(2, 0.8) - (0.64 + 0.16)).abs() < 1e-12);
    }

    #[test]
    fn wilson_contains_estimate() {
        let (lo, hi) = wilson95(80, 100);
        assert!(lo < 0.8 && 0.8 < hi && lo > 0.7 && hi < 0.88);
    }

    #[test]
    fn poisson_binomial_of_equal_accuracies_is_the_binomial() {
        let a = poisson_binomial(&[0.7; 9]);
        for (x, y) in a.iter().zip(binomial(9, 0.7)) {
            assert!((x - y).abs() < 1e-14);
        }
        // Two voters, 0.9 and 0.6: P(both) = 0.54, P(one) = 0.42, P(none) = 0.04.
        let b = poisson_binomial(&[0.9, 0.6]);
        assert!((b[2] - 0.54).abs() < 1e-14 && (b[1] - 0.42).abs() < 1e-14);
    }

    #[test]
    fn pooled_and_pairwise_correlation_agree_on_exchangeable_voters() {
        // Trials where all err, none err, or only voter 0 errs.
        let trials = [vec![false; 4], vec![true; 4], vec![false, true, true, true]];
        let mut exact = PairwiseErrors::new(4);
        let mut pooled = PairwiseErrors::new(4);
        pooled.both.clear();
        for _ in 0..10 {
            for t in &trials[..2] {
                exact.record(t);
                pooled.record(t);
            }
        }
        let (a, b) = (
            exact.mean_correlation().unwrap(),
            pooled.mean_correlation().unwrap(),
        );
        assert!(
            (a - 1.0).abs() < 1e-12 && (b - 1.0).abs() < 1e-12,
            "{a} {b}"
        );
        exact.record(&trials[2]);
        pooled.record(&trials[2]);
        assert!(exact.mean_correlation().unwrap() < 1.0);
        assert!(pooled.mean_correlation().unwrap() < 1.0);
    }
}
