//! Real vote data: a vote matrix read from CSV, what it says about the voters, and how well each
//! correlation model fitted to it predicts the accuracy of larger ensembles.
//!
//! ## File format
//!
//! A CSV file with a header naming (in any order) `question`, `voter`, `answer` and `correct`;
//! other columns are ignored. One row per (question, voter): the voter's answer and the correct
//! answer of that question (the same on every row of the question). Answers are compared as
//! trimmed text; an empty answer is an abstention. A voter may miss questions. Fields may be
//! quoted (`"a, b"`, `""` for a quote).
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

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::models::Model;
use super::plurality::{plurality_closed_form, WrongAnswers};
use super::stats::{choose, wilson95, PairwiseErrors};

/// Bootstrap resamples per interval.
pub const BOOTSTRAP_RESAMPLES: usize = 500;

/// Sub-ensembles per size beyond which they are sampled instead of enumerated.
pub const SUBSETS: usize = 200;

/// A vote matrix could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VoteDataError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The header lacks a column.
    #[error(
        "{path}: the header has no `{column}` column (needs question, voter, answer, correct)"
    )]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column.
        column: &'static str,
    },
    /// A row is not usable.
    #[error("{path}:{line}: {reason}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Too little data to estimate anything.
    #[error("{path}: {reason}")]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// What is missing.
        reason: &'static str,
    },
}

/// Votes by question and voter; answers are per-question codes: 0 correct, then wrong answers
/// by decreasing frequency in that question (1 is its most common wrong answer).
#[derive(Clone, Debug, Serialize)]
pub struct VoteMatrix {
    /// Question names, in order of first appearance.
    pub questions: Vec<String>,
    /// Voter names, in order of first appearance.
    pub voters: Vec<String>,
    /// `answers[q][v]`: voter `v`'s answer code on question `q` (`None`: no answer).
    pub answers: Vec<Vec<Option<u32>>>,
}

fn split_csv_line(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(ch) = chars.next() {
        match (ch, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                if let Some(f) = fields.last_mut() {
                    f.push('"');
                }
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields.into_iter().map(|f| f.trim().to_owned()).collect()
}

impl VoteMatrix {
    /// Reads a vote matrix (see the module docs for the format).
    pub fn load(path: &Path) -> Result<Self, VoteDataError> {
        let text = std::fs::read_to_string(path).map_err(|source| VoteDataError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses CSV text (named `path` in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Self, VoteDataError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let header = lines
            .next()
            .map(|(_, l)| split_csv_line(l))
            .unwrap_or_default();
        let column = |name: &'static str| {
            header
                .iter()
                .position(|h| h.eq_ignore_ascii_case(name))
                .ok_or(VoteDataError::MissingColumn {
                    path: path.to_path_buf(),
                    column: name,
                })
        };
        let (qc, vc, ac, cc) = (
            column("question")?,
            column("voter")?,
            column("answer")?,
            column("correct")?,
        );
        let mut questions: Vec<String> = Vec::new();
        let mut q_index: HashMap<String, usize> = HashMap::new();
        let mut voters: Vec<String> = Vec::new();
        let mut v_index: HashMap<String, usize> = HashMap::new();
        let mut correct: Vec<String> = Vec::new();
        let mut raw: HashMap<(usize, usize), String> = HashMap::new();
        for (i, line) in lines {
            let row_err = |reason: String| VoteDataError::Row {
                path: path.to_path_buf(),
                line: i + 1,
                reason,
            };
            let fields = split_csv_line(line);
            let get = |c: usize| fields.get(c).cloned().unwrap_or_default();
            let (question, voter, answer, right) = (get(qc), get(vc), get(ac), get(cc));
            if question.is_empty() || voter.is_empty() || right.is_empty() {
                return Err(row_err(
                    "question, voter and correct must not be empty".to_owned(),
                ));
            }
            let q = *q_index.entry(question.clone()).or_insert_with(|| {
                questions.push(question.clone());
                correct.push(right.clone());
                questions.len() - 1
            });
            if correct[q] != right {
                return Err(row_err(format!(
                    "question {question:?} has correct answer {:?} on an earlier row, {right:?} here",
                    correct[q]
                )));
            }
            let v = *v_index.entry(voter.clone()).or_insert_with(|| {
                voters.push(voter.clone());
                voters.len() - 1
            });
            if raw.insert((q, v), answer).is_some() {
                return Err(row_err(format!(
                    "voter {voter:?} answers question {question:?} twice"
                )));
            }
        }
        if voters.len() < 2 {
            return Err(VoteDataError::TooSmall {
                path: path.to_path_buf(),
                reason: "needs at least two voters",
            });
        }
        if questions.len() < 2 {
            return Err(VoteDataError::TooSmall {
                path: path.to_path_buf(),
                reason: "needs at least two questions",
            });
        }
        let answers = (0..questions.len())
            .map(|q| {
                // Wrong answers coded by decreasing frequency, ties by first appearance.
                let mut wrong: Vec<(String, usize)> = Vec::new();
                for v in 0..voters.len() {
                    if let Some(a) = raw
                        .get(&(q, v))
                        .filter(|a| !a.is_empty() && **a != correct[q])
                    {
                        match wrong.iter_mut().find(|(w, _)| w == a) {
                            Some((_, c)) => *c += 1,
                            None => wrong.push((a.clone(), 1)),
                        }
                    }
                }
                wrong.sort_by_key(|w| std::cmp::Reverse(w.1));
                (0..voters.len())
                    .map(|v| {
                        let a = raw.get(&(q, v)).filter(|a| !a.is_empty())?;
                        if *a == correct[q] {
                            return Some(0);
                        }
                        wrong.iter().position(|(w, _)| w == a).map(|i| i as u32 + 1)
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            questions,
            voters,
            answers,
        })
    }
}

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
    let fits = vec![
        fit("independent", 0.0, w_independent, agreement),
        fit("common-shock", rho, w_shock, s_shock),
        fit("beta-binomial", rho, w_independent, agreement),
        fit("bahadur", rho, w_independent, agreement),
        fit(
            "common-shock-per-voter",
            rho_per_voter,
            w_per_voter,
            s_per_voter,
        ),
    ];
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
            let homogeneous = |model: Model, r: f64, w: f64| {
                model.validate(&blocs, p, r).ok()?;
                plurality_closed_form(&model, &blocs, None, p, r, &weights(w))
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
                        rho_per_voter,
                        &weights(w_per_voter),
                    )
                })
                .sum::<Option<f64>>()
                .map(|total| total / subs.len() as f64);
            SizeRow {
                n,
                subsets: subs.len(),
                all_subsets: every,
                empirical,
                predicted: vec![
                    homogeneous(Model::CommonShock, 0.0, w_independent),
                    homogeneous(Model::CommonShock, rho, w_shock),
                    homogeneous(Model::BetaBinomial, rho, w_independent),
                    homogeneous(Model::Bahadur, rho, w_independent),
                    per_voter,
                ],
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
        fits,
        sizes,
        seed,
    }
}
