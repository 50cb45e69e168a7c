//! Small exact statistics used by the experiments: binomial coefficients and sums, majority
//! accuracy from a pmf, Wilson intervals, and a pairwise error-correlation accumulator.
//!
//! Everything here is plain `f64` arithmetic on small `n` (voters up to a few dozen), so the
//! closed forms are exact up to rounding; nothing is approximated by a normal law.

/// `n choose k` as an `f64` (exact for the small `n` used here).
#[must_use]
pub fn choose(n: usize, k: usize) -> f64 {
    if k > n {
        return 0.0;
    }
    let k = k.min(n - k);
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// `P(K = k)` for `K ~ Binomial(n, p)`.
#[must_use]
pub fn binomial_pmf(n: usize, k: usize, p: f64) -> f64 {
    choose(n, k) * p.powi(k as i32) * (1.0 - p).powi((n - k) as i32)
}

/// The pmf of `Binomial(n, p)` as a vector of length `n + 1`.
#[must_use]
pub fn binomial(n: usize, p: f64) -> Vec<f64> {
    (0..=n).map(|k| binomial_pmf(n, k, p)).collect()
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

/// Accumulates which voters erred on each trial and reports the mean pairwise (Pearson)
/// correlation of the error indicators.
#[derive(Clone, Debug)]
pub struct PairwiseErrors {
    n: usize,
    trials: u64,
    errors: Vec<u64>,
    both: Vec<u64>,
}

impl PairwiseErrors {
    /// An accumulator for `n` voters.
    #[must_use]
    pub fn new(n: usize) -> Self {
        Self {
            n,
            trials: 0,
            errors: vec![0; n],
            both: vec![0; n * n],
        }
    }

    /// Records one trial: `correct[i]` says whether voter `i` was right.
    pub fn record(&mut self, correct: &[bool]) {
        self.trials += 1;
        for (i, _) in correct.iter().enumerate().filter(|(_, right)| !**right) {
            self.errors[i] += 1;
            for (j, _) in correct
                .iter()
                .enumerate()
                .skip(i + 1)
                .filter(|(_, right)| !**right)
            {
                self.both[i * self.n + j] += 1;
            }
        }
    }

    /// The mean over voter pairs of the error correlation; pairs where a voter never (or
    /// always) erred have no correlation and are skipped. `None` if no pair had one.
    #[must_use]
    pub fn mean_correlation(&self) -> Option<f64> {
        let t = self.trials as f64;
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
}
