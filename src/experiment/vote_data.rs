//! Real vote data: a vote matrix read from CSV, what it says about the voters, and how well each
//! correlation model fitted to it predicts the accuracy of larger ensembles.
//!
//! The file format is [`VoteMatrix`]'s (in [`super::vote_matrix`]).
//!
//! ## What is estimated
//!
//! * each voter's accuracy (answered questions only), with its Wilson interval;
//! * the mean pairwise error correlation (Pearson, over questions both voters answered);
//! * the error-agreement rate: the share of (voter pair, question) where both are wrong *with the
//!   same answer*, and the same given that both are wrong;
//! * the answer spread: `k` = the most distinct answers any question received (at least 2).
//!
//! Every estimate carries a 95% percentile-bootstrap interval over questions
//! ([`BOOTSTRAP_RESAMPLES`] resamples, seeded).
//!
//! ## Fits and predictions
//!
//! For each ensemble size `n`, the empirical accuracy of random sub-ensembles: every subset of `n`
//! voters when there are at most [`SUBSETS`] of them, otherwise [`SUBSETS`] drawn at random
//! (seeded). A question's credit is 1 when the correct answer has the most votes alone, `1/t` when
//! it ties with `t - 1` others (the expectation of the seeded tie coin), 0 otherwise; its
//! interval is the bootstrap over questions. Beside it, each model's exact plurality accuracy
//! with the fitted parameters: mean accuracy `p`, correlation `rho` = the measured one, `k` as
//! above, and an attractor weight `w` fitted so that the model reproduces the measured agreement
//! given both wrong, `a`. Where wrong answers are independent given who is wrong (independent,
//! beta-binomial, Bahadur) `a = s = sum_j w_j^2`; under common shock a shared draw's wrong voters
//! agree for sure, so `a = (rho e + (1 - rho) e^2 s) / (rho e + (1 - rho) e^2)` with `e = 1 - p`,
//! solved for `s`; then `w` solves `w^2 + (1-w)^2/(k-2) = s` (`s` clamped to
//! `[1/(k-1), 1]`, uniform at the low end). The fits: `independent` (`rho = 0`), `common-shock`,
//! `beta-binomial`, `bahadur` (where `rho` is in its valid range for that `n`), and
//! `common-shock-per-voter` (each subset's own accuracies, `rho` scaled so the implied mean
//! correlation over all voters is the measured one), averaged over the same subsets.

use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::models::Model;
use super::plurality::{plurality_closed_form, WrongAnswers};
use super::stats::{choose, wilson95, PairwiseErrors};
pub use super::vote_matrix::{VoteDataError, VoteMatrix};

/// Bootstrap resamples per interval.
pub const BOOTSTRAP_RESAMPLES: usize = 500;

/// Sub-ensembles per size beyond which they are sampled instead of enumerated.
pub const SUBSETS: usize = 200;

/// An estimate with its 95% interval.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Estimate {
    /// The point estimate.
    pub value: f64,
    /// Lower end of the 95% interval.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
}

/// One voter's accuracy.
#[derive(Clone, Debug, Serialize)]
pub struct VoterAccuracy {
    /// The voter.
    pub voter: String,
    /// Questions answered.
    pub answered: u64,
    /// Right answers.
    pub right: u64,
    /// Accuracy with its Wilson interval.
    pub accuracy: Estimate,
}

/// Accuracy against ensemble size: data and every fit.
#[derive(Clone, Debug, Serialize)]
pub struct SizeRow {
    /// Ensemble size.
    pub n: usize,
    /// Sub-ensembles averaged.
    pub subsets: usize,
    /// Whether every subset of size `n` was used (otherwise a seeded sample).
    pub all_subsets: bool,
    /// Empirical plurality accuracy with its bootstrap interval.
    pub empirical: Estimate,
    /// Predictions, one per fit (same order as [`VoteDataReport::fits`]); `None` where the fit
    /// has no valid distribution at this `n`.
    pub predicted: Vec<Option<f64>>,
}

/// A fitted model.
#[derive(Clone, Debug, Serialize)]
pub struct Fit {
    /// Name.
    pub model: String,
    /// Its correlation parameter.
    pub rho: f64,
    /// Its attractor weight (share of wrong votes on one wrong answer).
    pub attractor_weight: f64,
    /// The chance that two independent wrong answers agree, `s = sum_j w_j^2`, that the fit
    /// needs to reproduce the measured agreement (before clamping to `[1/(k-1), 1]`). `w` is a
    /// steep function of `s` near the uniform `1/(k-1)`; `s` is the better-determined figure.
    pub wrong_answer_agreement: f64,
}

/// The attractor weight `w >= 1/(k-1)` with `w^2 + (1-w)^2/(k-2) = s` (see the module docs).
#[must_use]
pub fn attractor_for_agreement(s: f64, k: usize) -> f64 {
    if k <= 2 {
        return 1.0;
    }
    let m = (k - 2) as f64;
    let s = s.clamp(1.0 / (k - 1) as f64, 1.0);
    let (a, b, c) = ((m + 1.0) / m, -2.0 / m, 1.0 / m - s);
    let disc = (b * b - 4.0 * a * c).max(0.0);
    ((-b + disc.sqrt()) / (2.0 * a)).clamp(0.0, 1.0)
}

/// The agreement `s = sum w_j^2` of independent wrong answers that makes a common shock with
/// `rho` and error rate `e` show agreement `a` given both wrong.
fn independent_agreement(a: f64, rho: f64, e: f64) -> f64 {
    let shared = rho * e;
    let apart = (1.0 - rho) * e * e;
    if apart <= 0.0 {
        return a;
    }
    (a * (shared + apart) - shared) / apart
}

/// Everything `--from-csv` found.
#[derive(Clone, Debug, Serialize)]
pub struct VoteDataReport {
    /// The file.
    pub file: String,
    /// Questions.
    pub questions: usize,
    /// Voters.
    pub voters: usize,
    /// Per-voter accuracies.
    pub accuracies: Vec<VoterAccuracy>,
    /// Mean accuracy over voters.
    pub mean_accuracy: Estimate,
    /// Mean pairwise error correlation.
    pub error_correlation: Estimate,
    /// Share of (pair, question) both wrong with the same answer.
    pub error_agreement: Estimate,
    /// The same given both wrong.
    pub error_agreement_given_both_wrong: Estimate,
    /// Answers per question used by the fits.
    pub answers: usize,
    /// The fits.
    pub fits: Vec<Fit>,
    /// Accuracy against n.
    pub sizes: Vec<SizeRow>,
    /// Bootstrap seed.
    pub seed: u64,
}

/// Point statistics of the questions `qs` (a bootstrap resample or all of them).
struct Stats {
    mean_accuracy: f64,
    correlation: Option<f64>,
    agreement: f64,
    agreement_given_wrong: f64,
}

fn stats(m: &VoteMatrix, qs: &[usize]) -> Stats {
    let v = m.voters.len();
    let (mut right, mut answered) = (vec![0u64; v], vec![0u64; v]);
    let mut pairs = PairwiseErrors::new(v);
    let (mut same, mut both, mut pair_questions) = (0u64, 0u64, 0u64);
    for &q in qs {
        let row = &m.answers[q];
        for (i, a) in row.iter().enumerate() {
            if let Some(a) = a {
                answered[i] += 1;
                right[i] += u64::from(*a == 0);
            }
        }
        // Missing answers count as not wrong for the correlation (a voter who did not answer
        // did not err); complete matrices are the usual case.
        let correct: Vec<bool> = row.iter().map(|a| a.is_none_or(|a| a == 0)).collect();
        pairs.record(&correct);
        for i in 0..v {
            for j in i + 1..v {
                if let (Some(a), Some(b)) = (row[i], row[j]) {
                    pair_questions += 1;
                    if a != 0 && b != 0 {
                        both += 1;
                        same += u64::from(a == b);
                    }
                }
            }
        }
    }
    let acc: Vec<f64> = (0..v)
        .filter(|&i| answered[i] > 0)
        .map(|i| right[i] as f64 / answered[i] as f64)
        .collect();
    Stats {
        mean_accuracy: acc.iter().sum::<f64>() / acc.len().max(1) as f64,
        correlation: pairs.mean_correlation(),
        agreement: same as f64 / pair_questions.max(1) as f64,
        agreement_given_wrong: same as f64 / both.max(1) as f64,
    }
}

fn percentile_interval(mut values: Vec<f64>, point: f64) -> Estimate {
    values.retain(|x| x.is_finite());
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return Estimate {
            value: point,
            lo: point,
            hi: point,
        };
    }
    let at =
        |p: f64| values[((p * (values.len() - 1) as f64).round() as usize).min(values.len() - 1)];
    Estimate {
        value: point,
        lo: at(0.025),
        hi: at(0.975),
    }
}

/// The plurality credit of the correct answer among `subset`'s answers to one question.
fn credit(row: &[Option<u32>], subset: &[usize]) -> f64 {
    let mut tally: Vec<(u32, usize)> = Vec::new();
    for a in subset.iter().filter_map(|&v| row[v]) {
        match tally.iter_mut().find(|(x, _)| *x == a) {
            Some((_, c)) => *c += 1,
            None => tally.push((a, 1)),
        }
    }
    let top = tally.iter().map(|t| t.1).max().unwrap_or(0);
    let right = tally.iter().find(|t| t.0 == 0).map_or(0, |t| t.1);
    if top == 0 || right < top {
        return 0.0;
    }
    1.0 / tally.iter().filter(|t| t.1 == top).count() as f64
}

fn subsets(v: usize, n: usize, rng: &mut ChaCha8Rng) -> (Vec<Vec<usize>>, bool) {
    if choose(v, n) <= SUBSETS as f64 {
        let mut all = Vec::new();
        let mut current = Vec::new();
        fn rec(start: usize, v: usize, n: usize, cur: &mut Vec<usize>, all: &mut Vec<Vec<usize>>) {
            if cur.len() == n {
                all.push(cur.clone());
                return;
            }
            for i in start..v {
                cur.push(i);
                rec(i + 1, v, n, cur, all);
                cur.pop();
            }
        }
        rec(0, v, n, &mut current, &mut all);
        (all, true)
    } else {
        let drawn = (0..SUBSETS)
            .map(|_| {
                let mut s = sample(rng, v, n).into_vec();
                s.sort_unstable();
                s
            })
            .collect();
        (drawn, false)
    }
}

/// Estimates, fits and predictions for `matrix` (named `file` in the report); `seed` drives
/// the bootstrap and the sampled subsets.
#[must_use]
pub fn analyse(matrix: &VoteMatrix, file: &str, seed: u64) -> VoteDataReport {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let nq = matrix.questions.len();
    let v = matrix.voters.len();
    let all: Vec<usize> = (0..nq).collect();
    let point = stats(matrix, &all);
    let resamples: Vec<Vec<usize>> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| (0..nq).map(|_| rng.gen_range(0..nq)).collect())
        .collect();
    let boot: Vec<Stats> = resamples.iter().map(|qs| stats(matrix, qs)).collect();
    let interval = |f: &dyn Fn(&Stats) -> Option<f64>| {
        percentile_interval(
            boot.iter().filter_map(f).collect(),
            f(&point).unwrap_or(f64::NAN),
        )
    };
    let accuracies: Vec<VoterAccuracy> = (0..v)
        .map(|i| {
            let answered = matrix.answers.iter().filter(|r| r[i].is_some()).count() as u64;
            let right = matrix.answers.iter().filter(|r| r[i] == Some(0)).count() as u64;
            let (lo, hi) = wilson95(right, answered);
            VoterAccuracy {
                voter: matrix.voters[i].clone(),
                answered,
                right,
                accuracy: Estimate {
                    value: right as f64 / answered.max(1) as f64,
                    lo,
                    hi,
                },
            }
        })
        .collect();
    let ps: Vec<f64> = accuracies.iter().map(|a| a.accuracy.value).collect();
    let p = point.mean_accuracy;
    let rho = point.correlation.unwrap_or(0.0).clamp(0.0, 1.0);
    // Answer spread.
    let k = matrix
        .answers
        .iter()
        .map(|r| {
            let mut seen: Vec<u32> = r.iter().flatten().copied().collect();
            seen.push(0);
            seen.sort_unstable();
            seen.dedup();
            seen.len()
        })
        .max()
        .unwrap_or(2)
        .max(2);
    let k = k.min(64);
    let agreement = point.agreement_given_wrong;
    let e = 1.0 - p;
    let s_shock = independent_agreement(agreement, rho, e);
    let w_independent = attractor_for_agreement(agreement, k);
    let w_shock = attractor_for_agreement(s_shock, k);
    let weights = |w: f64| {
        WrongAnswers::Attractor { weight: w }
            .weights(k)
            .unwrap_or_else(|_| vec![1.0])
    };
    // Heterogeneous common shock: scale rho so the implied mean correlation is the measured one.
    let unit = super::voting::shared_draw_correlation(&ps, 1.0);
    let rho_per_voter = if unit > 0.0 {
        (rho / unit).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let s_per_voter = independent_agreement(agreement, rho_per_voter, e);
    let w_per_voter = attractor_for_agreement(s_per_voter, k);
    let fit = |model: &str, rho: f64, w: f64, s: f64| Fit {
        model: model.to_owned(),
        rho,
        attractor_weight: w,
        wrong_answer_agreement: s,
    };
    // The fits of one accuracy `p` for every voter, each with the model that predicts for it;
    // the per-voter fit comes last (its prediction averages over the subsets).
    let homogeneous_fits = [
        (
            fit("independent", 0.0, w_independent, agreement),
            Model::CommonShock,
        ),
        (
            fit("common-shock", rho, w_shock, s_shock),
            Model::CommonShock,
        ),
        (
            fit("beta-binomial", rho, w_independent, agreement),
            Model::BetaBinomial,
        ),
        (
            fit("bahadur", rho, w_independent, agreement),
            Model::Bahadur,
        ),
    ];
    let per_voter_fit = fit(
        "common-shock-per-voter",
        rho_per_voter,
        w_per_voter,
        s_per_voter,
    );
    let sizes = (1..=v)
        .map(|n| {
            let (subs, every) = subsets(v, n, &mut rng);
            let per_question: Vec<f64> = (0..nq)
                .map(|q| {
                    subs.iter()
                        .map(|s| credit(&matrix.answers[q], s))
                        .sum::<f64>()
                        / subs.len() as f64
                })
                .collect();
            let mean =
                |qs: &[usize]| qs.iter().map(|&q| per_question[q]).sum::<f64>() / qs.len() as f64;
            let empirical =
                percentile_interval(resamples.iter().map(|qs| mean(qs)).collect(), mean(&all));
            let blocs = vec![1; n];
            let homogeneous = |(fit, model): &(Fit, Model)| {
                model.validate(&blocs, p, fit.rho).ok()?;
                plurality_closed_form(
                    model,
                    &blocs,
                    None,
                    p,
                    fit.rho,
                    &weights(fit.attractor_weight),
                )
            };
            let per_voter = subs
                .iter()
                .map(|s| {
                    let sub: Vec<f64> = s.iter().map(|&i| ps[i]).collect();
                    plurality_closed_form(
                        &Model::CommonShock,
                        &blocs,
                        Some(&sub),
                        p,
                        per_voter_fit.rho,
                        &weights(per_voter_fit.attractor_weight),
                    )
                })
                .sum::<Option<f64>>()
                .map(|total| total / subs.len() as f64);
            SizeRow {
                n,
                subsets: subs.len(),
                all_subsets: every,
                empirical,
                predicted: homogeneous_fits
                    .iter()
                    .map(homogeneous)
                    .chain(std::iter::once(per_voter))
                    .collect(),
            }
        })
        .collect();
    VoteDataReport {
        file: file.to_owned(),
        questions: nq,
        voters: v,
        accuracies,
        mean_accuracy: interval(&|s| Some(s.mean_accuracy)),
        error_correlation: interval(&|s| s.correlation),
        error_agreement: interval(&|s| Some(s.agreement)),
        error_agreement_given_both_wrong: interval(&|s| Some(s.agreement_given_wrong)),
        answers: k,
        fits: homogeneous_fits
            .into_iter()
            .map(|(fit, _)| fit)
            .chain(std::iter::once(per_voter_fit))
            .collect(),
        sizes,
        seed,
    }
}
