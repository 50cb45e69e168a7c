//! Plurality over `k` answers: what voting accuracy becomes when wrong answers differ.
//!
//! Majority over right/wrong (the `k = 2` case) treats every wrong vote as one shared wrong
//! answer, which overstates the risk of a wrong consensus when LLM answers spread over several
//! wrong answers. Here a question has `k` answers, one correct; a wrong voter picks wrong answer
//! `j` with weight `w_j` ([`WrongAnswers`]: uniform over the `k - 1`, or one *attractor* taking
//! `w` and the rest sharing `1 - w`). The answer with the most votes wins; a tie between the top
//! answers is broken by a seeded coin, uniformly over the tied answers (the runtime's
//! [`MajorityVote`](quorate_coordinator::vote::MajorityVote) with [`TiePolicy::Draw`](quorate_coordinator::vote::TiePolicy)),
//! so the correct answer tied with `t` wrong ones earns `1 / (t + 1)` in expectation.
//!
//! ## Exact where a closed form exists
//!
//! If, given how many voters are right (`c`), the wrong voters pick their answers independently
//! from `w`, the accuracy is `sum_c P(C = c) G(c)` with [`credit_given_correct`] `G` (a dynamic
//! programme over the wrong answers, each count a binomial split of what is left). That holds for
//! independent voters of any accuracies (Poisson-binomial `C`), beta-binomial, Bahadur and
//! difficulty-mix. Common shock is a mixture: with probability `rho` every voter reads one shared
//! uniform draw `U` (voter `i` is right iff `U < p_i`, so each keeps its accuracy) and the wrong
//! ones give the *same* wrong answer; otherwise voters are independent. Shared evidence enumerates
//! the `k^K` answers of the `K` sources.
//!
//! `G` costs about `k^2 n^3 / 6` steps, so the closed form is computed up to
//! [`EXACT_PLURALITY_MAX`] voters for `k > 2` (and up to `k^K <=` [`EXACT_SOURCES_MAX`] for
//! shared evidence); beyond, a cell carries the Monte Carlo estimate and its Wilson interval only
//! (`closed_form: null`). For `k = 2` every closed form is the majority's, exact at any n.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::models::{Model, ModelError};
use super::stats::{binomial_pmf, majority_accuracy, poisson_binomial};

/// Voters up to which the `k > 2` closed form is computed.
pub const EXACT_PLURALITY_MAX: usize = 200;

/// Source-answer combinations (`k^K`) up to which shared evidence is enumerated exactly.
pub const EXACT_SOURCES_MAX: f64 = 1_048_576.0;

/// How a wrong voter picks among the `k - 1` wrong answers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum WrongAnswers {
    /// Uniformly.
    Uniform,
    /// Wrong answer 1 with probability `weight`, the others share the rest uniformly.
    Attractor {
        /// The attractor's share of wrong votes, in `[0, 1]`.
        weight: f64,
    },
}

impl WrongAnswers {
    /// The weights of the `k - 1` wrong answers (answers `1..k`; answer 0 is correct).
    pub fn weights(&self, k: usize) -> Result<Vec<f64>, ModelError> {
        if !(2..=64).contains(&k) {
            return Err(ModelError::OutOfRange {
                name: "answers (--answers)",
                value: k as f64,
                range: "[2, 64]",
            });
        }
        let wrong = k - 1;
        match *self {
            WrongAnswers::Uniform => Ok(vec![1.0 / wrong as f64; wrong]),
            WrongAnswers::Attractor { weight } => {
                if !(weight.is_finite() && (0.0..=1.0).contains(&weight)) {
                    return Err(ModelError::OutOfRange {
                        name: "attractor weight",
                        value: weight,
                        range: "[0, 1]",
                    });
                }
                if wrong == 1 {
                    return Ok(vec![1.0]);
                }
                let rest = (1.0 - weight) / (wrong - 1) as f64;
                let mut w = vec![rest; wrong];
                w[0] = weight;
                Ok(w)
            }
        }
    }

    /// How the CLI writes it: `uniform` or `attractor=W`.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            WrongAnswers::Uniform => "uniform".to_owned(),
            WrongAnswers::Attractor { weight } => format!("attractor={weight}"),
        }
    }

    /// Draws a wrong answer (`1..k`) from `weights`.
    fn draw(weights: &[f64], rng: &mut ChaCha8Rng) -> u32 {
        let mut u: f64 = rng.gen();
        for (j, w) in weights.iter().enumerate() {
            if u < *w {
                return j as u32 + 1;
            }
            u -= w;
        }
        weights.len() as u32
    }
}

/// Expected plurality credit of the correct answer when `c` of `n` voters are right and the
/// other `n - c` pick wrong answers independently with `weights`: the probability that no
/// wrong answer beats `c`, each outcome weighted by `1 / (1 + wrong answers tied at c)`.
#[must_use]
pub fn credit_given_correct(n: usize, c: usize, weights: &[f64]) -> f64 {
    let wrong = n - c;
    if 2 * c > n {
        return 1.0;
    }
    if weights.len() == 1 {
        // One wrong answer: the majority (c < n - c here, or a tie).
        return if 2 * c == n { 0.5 } else { 0.0 };
    }
    // Pigeonhole: some wrong answer has at least ceil(wrong / (k-1)) votes.
    if c == 0 || c < wrong.div_ceil(weights.len()) {
        return 0.0;
    }
    // state[m][t]: first j wrong answers took m votes, t of them tied with c, none above c.
    let ties = weights.len() + 1;
    let mut state = vec![vec![0.0; ties]; wrong + 1];
    state[0][0] = 1.0;
    let mut rest: f64 = weights.iter().sum();
    for (j, &w) in weights.iter().enumerate() {
        let last = j + 1 == weights.len();
        let share = if rest > 0.0 { (w / rest).min(1.0) } else { 0.0 };
        let mut next = vec![vec![0.0; ties]; wrong + 1];
        for (m, row) in state.iter().enumerate() {
            let left = wrong - m;
            for (t, &prob) in row.iter().enumerate() {
                if prob == 0.0 {
                    continue;
                }
                if last {
                    // The last wrong answer takes every vote left.
                    if left <= c {
                        next[wrong][t + usize::from(left == c)] += prob;
                    }
                    continue;
                }
                for x in 0..=left.min(c) {
                    let px = binomial_pmf(left, x, share);
                    if px > 0.0 {
                        next[m + x][t + usize::from(x == c)] += prob * px;
                    }
                }
            }
        }
        state = next;
        rest -= w;
    }
    state[wrong]
        .iter()
        .enumerate()
        .map(|(t, p)| p / (t + 1) as f64)
        .sum()
}

/// Plurality accuracy when the number right has distribution `pmf` and wrong voters pick
/// independently from `weights`. For two answers this is [`majority_accuracy`].
#[must_use]
pub fn plurality_accuracy(pmf: &[f64], weights: &[f64]) -> f64 {
    if weights.len() == 1 {
        return majority_accuracy(pmf);
    }
    let n = pmf.len() - 1;
    pmf.iter()
        .enumerate()
        .filter(|(_, p)| **p > 0.0)
        .map(|(c, p)| p * credit_given_correct(n, c, weights))
        .sum()
}

/// What a shared draw (common shock) earns: voter `i` right iff `U < p_i`, the wrong ones on
/// one shared wrong answer. Integrates over `U` piece by piece.
fn shared_draw_credit(accuracies: &[f64]) -> f64 {
    let n = accuracies.len();
    let mut cuts: Vec<f64> = accuracies.to_vec();
    cuts.push(0.0);
    cuts.push(1.0);
    cuts.sort_by(f64::total_cmp);
    cuts.windows(2)
        .map(|w| {
            let (lo, hi) = (w[0], w[1]);
            let mid = (lo + hi) / 2.0;
            let right = accuracies.iter().filter(|&&p| mid < p).count();
            let credit = if 2 * right > n {
                1.0
            } else if 2 * right == n && right > 0 {
                0.5
            } else {
                0.0
            };
            (hi - lo) * credit
        })
        .sum()
}

/// The exact plurality accuracy of `model` (naive vote: every voter counts), or `None` where the
/// module docs say there is no affordable closed form. `accuracies`: one per voter (`blocs`
/// all ones), or `None` for `p` each.
#[must_use]
pub fn plurality_closed_form(
    model: &Model,
    blocs: &[usize],
    accuracies: Option<&[f64]>,
    p: f64,
    rho: f64,
    weights: &[f64],
) -> Option<f64> {
    let n: usize = blocs.iter().sum();
    let k = weights.len() + 1;
    if k > 2 && n > EXACT_PLURALITY_MAX && *model != Model::SharedEvidence {
        return None;
    }
    Some(match (model, accuracies) {
        (Model::CommonShock, Some(ps)) => {
            let independent = plurality_accuracy(&poisson_binomial(ps), weights);
            rho * shared_draw_credit(ps) + (1.0 - rho) * independent
        }
        (_, Some(_)) => return None,
        (Model::CommonShock, None) => {
            rho * p + (1.0 - rho) * plurality_accuracy(&super::stats::binomial(n, p), weights)
        }
        (Model::SharedEvidence, None) => return shared_evidence(blocs, p, weights),
        (model, None) => plurality_accuracy(&model.pmf(n, p, rho), weights),
    })
}

/// Exact accuracy with one vote per independent source: `K` independent voters.
#[must_use]
pub fn plurality_dedup_closed_form(sources: usize, p: f64, weights: &[f64]) -> Option<f64> {
    (weights.len() == 1 || sources <= EXACT_PLURALITY_MAX)
        .then(|| plurality_accuracy(&super::stats::binomial(sources, p), weights))
}

/// Shared evidence: each source answers (right with `p`, else wrong from `weights`), each bloc
/// votes its source's answer. Enumerates the `k^K` source answers.
fn shared_evidence(blocs: &[usize], p: f64, weights: &[f64]) -> Option<f64> {
    let k = weights.len() + 1;
    if (k as f64).powi(blocs.len() as i32) > EXACT_SOURCES_MAX {
        return None;
    }
    let probs: Vec<f64> = std::iter::once(p)
        .chain(weights.iter().map(|w| (1.0 - p) * w))
        .collect();
    let mut tally = vec![0usize; k];
    Some(enumerate(blocs, &probs, &mut tally, 1.0))
}

fn enumerate(blocs: &[usize], probs: &[f64], tally: &mut [usize], prob: f64) -> f64 {
    let Some((&size, rest)) = blocs.split_first() else {
        let top = tally.iter().copied().max().unwrap_or(0);
        if tally[0] != top {
            return 0.0;
        }
        let tied = tally.iter().filter(|&&t| t == top).count();
        return prob / tied as f64;
    };
    let mut acc = 0.0;
    for (answer, &q) in probs.iter().enumerate() {
        if q > 0.0 {
            tally[answer] += size;
            acc += enumerate(rest, probs, tally, prob * q);
            tally[answer] -= size;
        }
    }
    acc
}

/// Draws one question's answers (0 is correct; voters in `blocs` order). The right/wrong pattern
/// comes from the model (or, with `accuracies`, from the heterogeneous common shock of the
/// module docs); a wrong voter's answer is drawn from `weights`, except that a shared draw's
/// wrong voters, and a source's bloc, share one answer.
pub fn draw_answers(
    model: &Model,
    blocs: &[usize],
    accuracies: Option<&[f64]>,
    p: f64,
    rho: f64,
    weights: &[f64],
    rng: &mut ChaCha8Rng,
) -> Vec<u32> {
    match (model, accuracies) {
        (Model::CommonShock, Some(ps)) => {
            if rng.gen_bool(rho) {
                let u: f64 = rng.gen();
                let wrong = WrongAnswers::draw(weights, rng);
                ps.iter()
                    .map(|&pi| if u < pi { 0 } else { wrong })
                    .collect()
            } else {
                ps.iter()
                    .map(|&pi| {
                        if rng.gen_bool(pi) {
                            0
                        } else {
                            WrongAnswers::draw(weights, rng)
                        }
                    })
                    .collect()
            }
        }
        (Model::CommonShock, None) if rng.gen_bool(rho) => {
            let n: usize = blocs.iter().sum();
            let answer = if rng.gen_bool(p) {
                0
            } else {
                WrongAnswers::draw(weights, rng)
            };
            vec![answer; n]
        }
        (Model::CommonShock, None) => {
            draw_wrong(&Model::CommonShock.draw(blocs, p, 0.0, rng), weights, rng)
        }
        (Model::SharedEvidence, _) => blocs
            .iter()
            .flat_map(|&size| {
                let answer = if rng.gen_bool(p) {
                    0
                } else {
                    WrongAnswers::draw(weights, rng)
                };
                std::iter::repeat_n(answer, size)
            })
            .collect(),
        (model, _) => draw_wrong(&model.draw(blocs, p, rho, rng), weights, rng),
    }
}

fn draw_wrong(correct: &[bool], weights: &[f64], rng: &mut ChaCha8Rng) -> Vec<u32> {
    correct
        .iter()
        .map(|&right| {
            if right {
                0
            } else {
                WrongAnswers::draw(weights, rng)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force over every answer vector of `n` independent voters.
    fn brute(n: usize, p: f64, weights: &[f64]) -> f64 {
        let k = weights.len() + 1;
        let probs: Vec<f64> = std::iter::once(p)
            .chain(weights.iter().map(|w| (1.0 - p) * w))
            .collect();
        let mut acc = 0.0;
        for code in 0..k.pow(n as u32) {
            let (mut c, mut prob, mut tally) = (code, 1.0, vec![0usize; k]);
            for _ in 0..n {
                tally[c % k] += 1;
                prob *= probs[c % k];
                c /= k;
            }
            let top = *tally.iter().max().unwrap();
            if tally[0] == top {
                acc += prob / tally.iter().filter(|&&t| t == top).count() as f64;
            }
        }
        acc
    }

    #[test]
    fn dynamic_programme_equals_brute_force() {
        for (n, p, weights) in [
            (5, 0.4, vec![1.0 / 3.0; 3]),
            (6, 0.35, vec![0.6, 0.2, 0.2]),
            (4, 0.5, vec![0.5, 0.5]),
            (7, 0.3, vec![0.9, 0.05, 0.05]),
            (5, 0.6, vec![1.0]),
        ] {
            let exact = plurality_accuracy(&crate::experiment::stats::binomial(n, p), &weights);
            let want = brute(n, p, &weights);
            assert!(
                (exact - want).abs() < 1e-12,
                "n {n} p {p} {weights:?}: {exact} vs {want}"
            );
        }
    }

    #[test]
    fn spread_wrong_answers_help_and_an_attractor_hurts() {
        let n = 9;
        let pmf = crate::experiment::stats::binomial(n, 0.4);
        let two = plurality_accuracy(&pmf, &[1.0]);
        let spread = plurality_accuracy(&pmf, &WrongAnswers::Uniform.weights(5).unwrap());
        let attractor = WrongAnswers::Attractor { weight: 0.9 }.weights(5).unwrap();
        let pulled = plurality_accuracy(&pmf, &attractor);
        assert!(two < pulled && pulled < spread, "{two} {pulled} {spread}");
    }

    #[test]
    fn shared_draw_of_equal_voters_is_one_voter() {
        assert!((shared_draw_credit(&[0.7; 5]) - 0.7).abs() < 1e-12);
        // 0.9, 0.6, 0.3: U < 0.3 all right; U in [0.3, 0.6) two of three; [0.6, 0.9) one.
        assert!((shared_draw_credit(&[0.9, 0.6, 0.3]) - 0.6).abs() < 1e-12);
    }
}
