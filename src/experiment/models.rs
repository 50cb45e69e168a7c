//! Correlation models of voter errors: how one question's votes are drawn, and the exact
//! majority accuracy each model implies.
//!
//! Every model keeps each voter's marginal accuracy at the configured value (for
//! `difficulty-mix`: `alpha * p1 + (1 - alpha) * p2`) and differs only in how errors co-occur.
//! Each model states its exact pmf of the number of correct votes, from which the majority
//! accuracy follows with [`majority_accuracy`] (ties: half credit, i.e. a fair coin).

use rand::seq::index::sample;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::stats::{binomial, choose, independent_majority, ln_beta, ln_choose, majority_accuracy};

/// A correlation model with its parameters (the swept `rho` is passed separately).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "model")]
pub enum Model {
    /// With probability `rho` every voter takes one shared draw, otherwise independent draws.
    CommonShock,
    /// Per question accuracy `q ~ Beta(a, b)` with mean `p` and pairwise correlation `rho`.
    BetaBinomial,
    /// Second-order Bahadur model with pairwise correlation `c = rho`.
    Bahadur,
    /// A fraction `alpha` of questions is easy (accuracy `p1`), the rest hard (`p2`).
    DifficultyMix {
        /// Share of easy questions.
        alpha: f64,
        /// Accuracy on easy questions.
        p1: f64,
        /// Accuracy on hard questions.
        p2: f64,
    },
    /// Voters copy one of K sources (bloc sizes per row); each source is right with `p`.
    SharedEvidence,
}

/// Parameters that do not make a distribution.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A probability outside its range.
    #[error("{name} must be in {range}, got {value}")]
    OutOfRange {
        /// The parameter.
        name: &'static str,
        /// The value.
        value: f64,
        /// The valid range.
        range: &'static str,
    },
    /// The Bahadur correlation makes some probability negative.
    #[error(
        "bahadur correlation c = {c} is not a valid distribution for n = {n}, p = {p}: \
         valid range is [{min:.6}, {max:.6}]"
    )]
    BahadurOutOfRange {
        /// Voters.
        n: usize,
        /// Marginal accuracy.
        p: f64,
        /// The requested correlation.
        c: f64,
        /// Smallest valid correlation.
        min: f64,
        /// Largest valid correlation.
        max: f64,
    },
}

fn check(
    name: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
    range: &'static str,
) -> Result<(), ModelError> {
    if value.is_finite() && value >= lo && value <= hi {
        Ok(())
    } else {
        Err(ModelError::OutOfRange { name, value, range })
    }
}

/// The Bahadur correction term `sum_{i<j} z_i z_j` with `k` of `n` votes correct.
fn bahadur_t(n: usize, k: usize, p: f64) -> f64 {
    let u = ((1.0 - p) / p).sqrt();
    let v = (p / (1.0 - p)).sqrt();
    let s = k as f64 * u - (n - k) as f64 * v;
    let sq = k as f64 * u * u + (n - k) as f64 * v * v;
    (s * s - sq) / 2.0
}

/// The range of Bahadur correlations `c` for which `n` voters at accuracy `p` have a valid
/// distribution: `1 + c * T(k) >= 0` for every count `k`.
#[must_use]
pub fn bahadur_range(n: usize, p: f64) -> (f64, f64) {
    let (mut min, mut max) = (f64::NEG_INFINITY, f64::INFINITY);
    for k in 0..=n {
        let t = bahadur_t(n, k, p);
        if t > 1e-12 {
            min = min.max(-1.0 / t);
        } else if t < -1e-12 {
            max = max.min(-1.0 / t);
        }
    }
    (min, max)
}

impl Model {
    /// The CLI name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Model::CommonShock => "common-shock",
            Model::BetaBinomial => "beta-binomial",
            Model::Bahadur => "bahadur",
            Model::DifficultyMix { .. } => "difficulty-mix",
            Model::SharedEvidence => "shared-evidence",
        }
    }

    /// Whether the swept `rho` is a parameter of the model (otherwise one column is run).
    #[must_use]
    pub fn uses_rho(&self) -> bool {
        matches!(
            self,
            Model::CommonShock | Model::BetaBinomial | Model::Bahadur
        )
    }

    /// Checks the parameters for `blocs` (one entry per source; a voter per unit) at
    /// accuracy `p` and correlation `rho`.
    pub fn validate(&self, blocs: &[usize], p: f64, rho: f64) -> Result<(), ModelError> {
        check("p", p, 0.0, 1.0, "[0, 1]")?;
        match self {
            Model::CommonShock | Model::BetaBinomial => check("rho", rho, 0.0, 1.0, "[0, 1]"),
            Model::Bahadur => {
                check("p", p, 1e-9, 1.0 - 1e-9, "(0, 1)")?;
                let n = blocs.len();
                let (min, max) = bahadur_range(n, p);
                if rho.is_finite() && rho >= min - 1e-12 && rho <= max + 1e-12 {
                    Ok(())
                } else {
                    Err(ModelError::BahadurOutOfRange {
                        n,
                        p,
                        c: rho,
                        min,
                        max,
                    })
                }
            }
            Model::DifficultyMix { alpha, p1, p2 } => {
                check("alpha", *alpha, 0.0, 1.0, "[0, 1]")?;
                check("p1", *p1, 0.0, 1.0, "[0, 1]")?;
                check("p2", *p2, 0.0, 1.0, "[0, 1]")
            }
            // The closed form enumerates 2^K source outcomes.
            Model::SharedEvidence => check(
                "sources (--blocs entries)",
                blocs.len() as f64,
                1.0,
                24.0,
                "[1, 24]",
            ),
        }
    }

    /// Each voter's marginal accuracy.
    #[must_use]
    pub fn marginal(&self, p: f64) -> f64 {
        match self {
            Model::DifficultyMix { alpha, p1, p2 } => alpha * p1 + (1.0 - alpha) * p2,
            _ => p,
        }
    }

    /// The exact pmf of the number of correct votes among `n` exchangeable voters (not
    /// defined for `shared-evidence`, whose voters are not exchangeable: see
    /// [`Model::majority_closed_form`]).
    #[must_use]
    pub fn pmf(&self, n: usize, p: f64, rho: f64) -> Vec<f64> {
        match self {
            Model::CommonShock => {
                let mut pmf: Vec<f64> = binomial(n, p).iter().map(|x| (1.0 - rho) * x).collect();
                pmf[n] += rho * p;
                pmf[0] += rho * (1.0 - p);
                pmf
            }
            Model::BetaBinomial => beta_binomial(n, p, rho),
            Model::Bahadur => (0..=n)
                .map(|k| super::stats::binomial_pmf(n, k, p) * (1.0 + rho * bahadur_t(n, k, p)))
                .collect(),
            Model::DifficultyMix { alpha, p1, p2 } => binomial(n, *p1)
                .iter()
                .zip(binomial(n, *p2))
                .map(|(a, b)| alpha * a + (1.0 - alpha) * b)
                .collect(),
            Model::SharedEvidence => binomial(n, p),
        }
    }

    /// Exact accuracy of the naive majority of all voters (`blocs`: voters per source).
    #[must_use]
    pub fn majority_closed_form(&self, blocs: &[usize], p: f64, rho: f64) -> f64 {
        match self {
            Model::SharedEvidence => weighted_majority(blocs, p),
            _ => majority_accuracy(&self.pmf(blocs.len(), p, rho)),
        }
    }

    /// Exact accuracy of the majority with one vote per independent source.
    #[must_use]
    pub fn dedup_closed_form(&self, blocs: &[usize], p: f64, rho: f64) -> f64 {
        match self {
            Model::SharedEvidence => independent_majority(blocs.len(), p),
            // Every voter is its own source: the same vote.
            _ => self.majority_closed_form(blocs, p, rho),
        }
    }

    /// The pairwise error correlation the model implies.
    #[must_use]
    pub fn implied_correlation(&self, blocs: &[usize], p: f64, rho: f64) -> f64 {
        match self {
            Model::CommonShock | Model::BetaBinomial | Model::Bahadur => rho,
            Model::DifficultyMix { alpha, p1, p2 } => {
                let m = self.marginal(p);
                let var = m * (1.0 - m);
                if var <= 0.0 {
                    0.0
                } else {
                    alpha * (1.0 - alpha) * (p1 - p2) * (p1 - p2) / var
                }
            }
            Model::SharedEvidence => {
                let n: usize = blocs.iter().sum();
                let same: usize = blocs.iter().map(|s| s * s.saturating_sub(1) / 2).sum();
                let pairs = n * n.saturating_sub(1) / 2;
                if pairs == 0 {
                    0.0
                } else {
                    same as f64 / pairs as f64
                }
            }
        }
    }

    /// Draws one question: whether each voter is right (voters in `blocs` order: the first
    /// `blocs[0]` read source 0, and so on). `blocs` gives the voters per source (all ones except
    /// for `shared-evidence`).
    pub fn draw(&self, blocs: &[usize], p: f64, rho: f64, rng: &mut ChaCha8Rng) -> Vec<bool> {
        let n: usize = blocs.iter().sum();
        let iid = |q: f64, rng: &mut ChaCha8Rng| (0..n).map(|_| rng.gen_bool(q)).collect();
        match self {
            Model::CommonShock => {
                if rng.gen_bool(rho) {
                    vec![rng.gen_bool(p); n]
                } else {
                    iid(p, rng)
                }
            }
            Model::BetaBinomial => {
                let q = if rho <= 0.0 {
                    p
                } else if rho >= 1.0 || p <= 0.0 || p >= 1.0 {
                    f64::from(u8::from(rng.gen_bool(p)))
                } else {
                    let a = p * (1.0 - rho) / rho;
                    let b = (1.0 - p) * (1.0 - rho) / rho;
                    sample_beta(a, b, rng)
                };
                iid(q.clamp(0.0, 1.0), rng)
            }
            Model::Bahadur => {
                // No generative story: draw the count from the exact pmf, then which voters
                // (the model is exchangeable, so every subset of that size is equally likely).
                let pmf = self.pmf(n, p, rho);
                let mut u: f64 = rng.gen();
                let mut k = n;
                for (i, w) in pmf.iter().enumerate() {
                    if u < *w {
                        k = i;
                        break;
                    }
                    u -= w;
                }
                let mut votes = vec![false; n];
                for i in sample(rng, n, k) {
                    votes[i] = true;
                }
                votes
            }
            Model::DifficultyMix { alpha, p1, p2 } => {
                let q = if rng.gen_bool(*alpha) { *p1 } else { *p2 };
                iid(q, rng)
            }
            Model::SharedEvidence => blocs
                .iter()
                .flat_map(|&size| std::iter::repeat_n(rng.gen_bool(p), size))
                .collect(),
        }
    }
}

/// The beta-binomial pmf with mean `p` and pairwise correlation `rho` (limits included:
/// `rho = 0` is the binomial, `rho = 1` puts everything on 0 and n). Up to n = 100 with the
/// rising factorial form `C(n,k) (a)_k (b)_{n-k} / (a+b)_n` (exact products); above, where
/// those products overflow, in log space: `ln C(n,k) + ln B(k+a, n-k+b) - ln B(a, b)`.
#[must_use]
pub fn beta_binomial(n: usize, p: f64, rho: f64) -> Vec<f64> {
    if rho <= 0.0 || p <= 0.0 || p >= 1.0 {
        return binomial(n, p);
    }
    if rho >= 1.0 {
        let mut pmf = vec![0.0; n + 1];
        pmf[n] += p;
        pmf[0] += 1.0 - p;
        return pmf;
    }
    let a = p * (1.0 - rho) / rho;
    let b = (1.0 - p) * (1.0 - rho) / rho;
    if n > 100 {
        let base = ln_beta(a, b);
        return (0..=n)
            .map(|k| (ln_choose(n, k) + ln_beta(k as f64 + a, (n - k) as f64 + b) - base).exp())
            .collect();
    }
    let rising = |x: f64, m: usize| (0..m).fold(1.0, |acc, i| acc * (x + i as f64));
    let total = rising(a + b, n);
    (0..=n)
        .map(|k| choose(n, k) * rising(a, k) * rising(b, n - k) / total)
        .collect()
}

/// Accuracy of a majority where each source (right with `p`, independently) casts `size`
/// identical votes; ties get half credit. Exact enumeration over the 2^K source outcomes.
#[must_use]
pub fn weighted_majority(blocs: &[usize], p: f64) -> f64 {
    let n: usize = blocs.iter().sum();
    let k = blocs.len();
    let mut acc = 0.0;
    for mask in 0u64..(1u64 << k) {
        let (mut right, mut prob) = (0usize, 1.0);
        for (i, size) in blocs.iter().enumerate() {
            if mask >> i & 1 == 1 {
                right += size;
                prob *= p;
            } else {
                prob *= 1.0 - p;
            }
        }
        if 2 * right > n {
            acc += prob;
        } else if 2 * right == n {
            acc += 0.5 * prob;
        }
    }
    acc
}

fn sample_normal(rng: &mut ChaCha8Rng) -> f64 {
    // Box-Muller.
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

fn sample_gamma(shape: f64, rng: &mut ChaCha8Rng) -> f64 {
    // Marsaglia and Tsang (2000); shape < 1 boosted by U^(1/shape).
    if shape < 1.0 {
        let u: f64 = 1.0 - rng.gen::<f64>();
        return sample_gamma(shape + 1.0, rng) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = sample_normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u: f64 = 1.0 - rng.gen::<f64>();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// A draw from `Beta(a, b)` as `X / (X + Y)` with `X ~ Gamma(a)`, `Y ~ Gamma(b)`.
pub fn sample_beta(a: f64, b: f64, rng: &mut ChaCha8Rng) -> f64 {
    let x = sample_gamma(a, rng);
    let y = sample_gamma(b, rng);
    if x + y == 0.0 {
        if rng.gen_bool(a / (a + b)) {
            1.0
        } else {
            0.0
        }
    } else {
        x / (x + y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmfs_sum_to_one_and_keep_the_marginal() {
        let models = [
            Model::CommonShock,
            Model::BetaBinomial,
            Model::Bahadur,
            Model::DifficultyMix {
                alpha: 0.5,
                p1: 0.9,
                p2: 0.7,
            },
        ];
        for model in models {
            let pmf = model.pmf(5, 0.8, 0.05);
            let total: f64 = pmf.iter().sum();
            let mean: f64 = pmf.iter().enumerate().map(|(k, w)| k as f64 * w).sum();
            assert!((total - 1.0).abs() < 1e-9, "{model:?}");
            assert!((mean / 5.0 - model.marginal(0.8)).abs() < 1e-9, "{model:?}");
        }
    }

    #[test]
    fn bahadur_refuses_outside_its_range() {
        let blocs = vec![1; 5];
        let err = Model::Bahadur.validate(&blocs, 0.8, 0.9).unwrap_err();
        assert!(err.to_string().contains("valid range"), "{err}");
        assert!(Model::Bahadur.validate(&blocs, 0.8, 0.0).is_ok());
    }

    #[test]
    fn shared_evidence_closed_forms() {
        // Three voters on one source plus two independents: the bloc outvotes the others.
        assert!((weighted_majority(&[3, 1, 1], 0.8) - 0.8).abs() < 1e-12);
        assert!((weighted_majority(&[1, 1, 1], 0.8) - 0.896).abs() < 1e-12);
    }
}
