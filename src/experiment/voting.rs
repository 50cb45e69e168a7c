//! Experiment 2: majority (plurality) voting under correlated errors.
//!
//! For each cell (voters `n` or bloc layout, correlation `rho`) the experiment draws `trials`
//! questions from the [`Model`] with a seeded ChaCha8 generator and aggregates each question's
//! votes with the runtime's [`MajorityVote`] twice: naively (every ballot counts) and
//! source-deduplicated (one ballot per evidence source). With `answers = 2` a vote is right or
//! wrong (majority); with `answers = k > 2` wrong voters spread over `k - 1` wrong answers and the
//! vote is a plurality (see [`super::plurality`]), optionally with one accuracy per voter. It
//! reports the accuracies with 95% Wilson intervals, the measured pairwise error correlation and
//! error-agreement rate, and the exact closed forms where they exist (`None` where only the Monte
//! Carlo estimate is available).
//!
//! **Seeds.** Each cell's generator is seeded from the cell itself (`--seed`, model and its
//! parameters, answers, wrong-answer weights, accuracies, bloc layout, `p`, `rho`: [`cell_seed`]),
//! never from its position in the sweep, so a cell gives the same estimate run alone or in any
//! sweep.
//!
//! **Which path produced the numbers.** The first `runtime_trials` questions of every cell run
//! through the runtime: each voter is a [`VoterAgent`] executed by its own `WorkerActor`; the
//! question's draw reaches it as the evidence text of a real `Envelope<Assignment>`, its answer
//! comes back as a `Report` envelope, and a collector actor feeds the reports into a
//! [`MajorityVote`]. The remaining questions call the same vote on the same draws directly
//! (no actors). Both paths are counted separately in [`VotingCell`], and every runtime decision
//! is compared with the direct one on the same draw (`runtime_mismatches` must be 0).

use std::fmt::Debug;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::models::{Model, ModelError};
use super::plurality::{
    draw_answers, plurality_closed_form, plurality_dedup_closed_form, WrongAnswers,
};
use super::runtime_voters::RuntimeVoters;
use super::stats::{wilson95, PairwiseErrors};
use quorate_coordinator::vote::{Ballot, Decision, MajorityVote, TiePolicy, VoteConfig};

pub use super::runtime_voters::VoterAgent;

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct VotingConfig {
    /// Voter counts (ignored by `shared-evidence`, which uses `blocs`).
    pub voters: Vec<usize>,
    /// Marginal accuracy of one voter (ignored by `difficulty-mix`).
    pub p: f64,
    /// Correlations to sweep (used by common-shock, beta-binomial, bahadur).
    pub rhos: Vec<f64>,
    /// Questions per cell.
    pub trials: u64,
    /// The model.
    pub model: Model,
    /// Bloc layouts for `shared-evidence` (voters per source), one row each.
    pub blocs: Vec<Vec<usize>>,
    /// Seed.
    pub seed: u64,
    /// Questions per cell that go through worker actors.
    pub runtime_trials: u64,
    /// Answers per question (2: right/wrong majority; more: plurality).
    pub answers: usize,
    /// How wrong voters spread over the wrong answers.
    pub wrong: WrongAnswers,
    /// One accuracy per voter (common-shock only): a row of `n` voters takes the first `n`.
    /// Empty: every voter has accuracy `p`.
    pub accuracies: Vec<f64>,
}

/// One cell of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct VotingCell {
    /// Model name.
    pub model: String,
    /// Voters.
    pub n: usize,
    /// Voters per source.
    pub blocs: Vec<usize>,
    /// The swept correlation (`None` when the model does not use it).
    pub rho: Option<f64>,
    /// Marginal accuracy.
    pub p: f64,
    /// Questions.
    pub trials: u64,
    /// Of which through worker actors.
    pub runtime_trials: u64,
    /// Of which by calling the vote directly.
    pub direct_trials: u64,
    /// Runtime decisions that differed from the direct decision on the same draw.
    pub runtime_mismatches: u64,
    /// Answers per question.
    pub answers: usize,
    /// Naive vote: correct answers (a tie is broken by a seeded coin).
    pub naive_correct: u64,
    /// Naive vote accuracy.
    pub naive_accuracy: f64,
    /// Its 95% Wilson interval.
    pub naive_ci: (f64, f64),
    /// Exact naive accuracy (`None`: no closed form at this size; Monte Carlo only).
    pub naive_closed_form: Option<f64>,
    /// Deduplicated vote accuracy.
    pub dedup_accuracy: f64,
    /// Its 95% Wilson interval.
    pub dedup_ci: (f64, f64),
    /// Exact deduplicated accuracy (`None`: Monte Carlo only).
    pub dedup_closed_form: Option<f64>,
    /// Measured mean pairwise error correlation (`None` with one voter).
    pub measured_correlation: Option<f64>,
    /// Measured error agreement: the share of voter pairs (over questions) that are both wrong
    /// with the same answer (`None` with one voter).
    pub measured_error_agreement: Option<f64>,
    /// The correlation the model implies.
    pub implied_correlation: f64,
}

/// Where accuracy peaks along `n`, per model and `rho`.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// The correlation column.
    pub rho: Option<f64>,
    /// `n` with the highest exact accuracy (`None` if a cell of the column has no closed form).
    pub n_closed_form: Option<usize>,
    /// `n` with the highest measured accuracy.
    pub n_measured: usize,
    /// The highest exact accuracy.
    pub accuracy: Option<f64>,
}

/// Everything the experiment found.
#[derive(Clone, Debug, Serialize)]
pub struct VotingReport {
    /// What was run.
    pub config: VotingConfig,
    /// One per cell.
    pub cells: Vec<VotingCell>,
    /// Peaks of naive-majority accuracy over `n`.
    pub peaks: Vec<Peak>,
}

/// The experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum VotingError {
    /// Invalid model parameters.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// Nothing to run.
    #[error("{0}")]
    Empty(&'static str),
    /// The actix runtime failed.
    #[error("actix runtime: {0}")]
    Runtime(String),
    /// A combination of settings the experiment does not model.
    #[error("{0}")]
    Unsupported(&'static str),
    /// A row has more voters than `--accuracies` gives.
    #[error("a row has {voters} voters but --accuracies gives {accuracies}: give one per voter")]
    TooFewAccuracies {
        /// Voters in the largest row.
        voters: usize,
        /// Accuracies given.
        accuracies: usize,
    },
}

/// The seed of one cell, from everything that defines the cell and nothing about its place in
/// the sweep (FNV-1a over the fields, then a SplitMix64 finaliser).
#[must_use]
pub fn cell_seed(config: &VotingConfig, blocs: &[usize], rho: Option<f64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u64| {
        for byte in x.to_le_bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(config.seed);
    for byte in config.model.name().bytes() {
        eat(u64::from(byte));
    }
    if let Model::DifficultyMix { alpha, p1, p2 } = config.model {
        [alpha, p1, p2].iter().for_each(|x| eat(x.to_bits()));
    }
    eat(config.p.to_bits());
    eat(rho.map_or(u64::MAX, f64::to_bits));
    eat(config.answers as u64);
    match config.wrong {
        WrongAnswers::Uniform => eat(0),
        WrongAnswers::Attractor { weight } => eat(weight.to_bits()),
    }
    eat(blocs.len() as u64);
    blocs.iter().for_each(|&b| eat(b as u64));
    let n: usize = blocs.iter().sum();
    config
        .accuracies
        .iter()
        .take(n)
        .for_each(|a| eat(a.to_bits()));
    let mut z = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rows(config: &VotingConfig) -> Vec<Vec<usize>> {
    match config.model {
        Model::SharedEvidence => config.blocs.clone(),
        _ => config.voters.iter().map(|&n| vec![1; n]).collect(),
    }
}

fn columns(config: &VotingConfig) -> Vec<Option<f64>> {
    if config.model.uses_rho() {
        config.rhos.iter().map(|&r| Some(r)).collect()
    } else {
        vec![None]
    }
}

/// The vote of one question over answer labels (voters in `blocs` order): the winning label
/// of the naive and of the source-deduplicated vote (`None` without a decision). `tie` breaks
/// ties: tied answer number `tie % tied`, in order of first ballot.
#[must_use]
pub fn decide_question(blocs: &[usize], labels: &[u32], tie: u64) -> (Option<u32>, Option<u32>) {
    let ballots = labels
        .iter()
        .zip(sources(blocs))
        .enumerate()
        .map(|(voter, (&label, source))| (voter as u32, source, Ballot::Answer(label)));
    decide_ballots(ballots, tie)
}

/// Counts `(voter, source, ballot)` in order, once counting every vote and once one vote per
/// source; returns the two winning answers. The direct path and the runtime voters both decide
/// here, so they can only differ in the ballots that reach it.
pub(crate) fn decide_ballots<V: Eq + std::hash::Hash + Debug + Clone>(
    ballots: impl IntoIterator<Item = (V, u64, Ballot<u32>)>,
    tie: u64,
) -> (Option<u32>, Option<u32>) {
    let config = VoteConfig {
        ties: TiePolicy::Draw,
        ..VoteConfig::default()
    };
    let mut naive: MajorityVote<u32, V> = MajorityVote::new(config);
    let mut dedup: MajorityVote<u32, V> = MajorityVote::new(VoteConfig {
        one_vote_per_source: true,
        ..config
    });
    for (voter, source, ballot) in ballots {
        let _ = dedup.cast(voter.clone(), Some(source), ballot.clone());
        let _ = naive.cast(voter, Some(source), ballot);
    }
    let won = |d: Decision<u32>| match d {
        Decision::Decided { answer, .. } => Some(answer),
        _ => None,
    };
    (won(naive.decide(tie)), won(dedup.decide(tie)))
}

/// The source of each voter: bloc `i` is source `i`.
pub(crate) fn sources(blocs: &[usize]) -> impl Iterator<Item = u64> + '_ {
    blocs
        .iter()
        .enumerate()
        .flat_map(|(i, &size)| std::iter::repeat_n(i as u64, size))
}

/// The voting setup is not valid.
fn check(config: &VotingConfig, rows: &[Vec<usize>]) -> Result<Vec<f64>, VotingError> {
    let weights = config.wrong.weights(config.answers)?;
    if !config.accuracies.is_empty() {
        if config.model != Model::CommonShock {
            return Err(VotingError::Unsupported(
                "--accuracies (one accuracy per voter) works with --model common-shock only: \
                 the other models' closed forms assume voters of one accuracy",
            ));
        }
        for &a in &config.accuracies {
            if !(a.is_finite() && (0.0..=1.0).contains(&a)) {
                return Err(ModelError::OutOfRange {
                    name: "accuracies (--accuracies)",
                    value: a,
                    range: "[0, 1]",
                }
                .into());
            }
        }
        let most = rows.iter().map(Vec::len).max().unwrap_or(0);
        if most > config.accuracies.len() {
            return Err(VotingError::TooFewAccuracies {
                voters: most,
                accuracies: config.accuracies.len(),
            });
        }
    }
    Ok(weights)
}

/// Runs the sweep; `progress` is called after each cell with (done, total).
pub fn run_voting(
    config: &VotingConfig,
    mut progress: impl FnMut(u64, u64),
) -> Result<VotingReport, VotingError> {
    let rows = rows(config);
    let cols = columns(config);
    if rows.is_empty() || rows.iter().any(|b| b.is_empty() || b.contains(&0)) {
        return Err(VotingError::Empty(
            "no voters: give --voters (or --blocs for shared-evidence) with every entry at least 1",
        ));
    }
    if cols.is_empty() {
        return Err(VotingError::Empty("no correlation values: give --rho"));
    }
    if config.trials == 0 {
        return Err(VotingError::Empty(
            "--trials must be at least 1 (every cell reports a Monte Carlo estimate)",
        ));
    }
    let weights = check(config, &rows)?;
    for blocs in &rows {
        for rho in &cols {
            config.model.validate(blocs, config.p, rho.unwrap_or(0.0))?;
        }
    }
    let total = (rows.len() * cols.len()) as u64;
    let mut runtime = if config.runtime_trials > 0 {
        Some(RuntimeVoters::start().map_err(|e| VotingError::Runtime(e.to_string()))?)
    } else {
        None
    };
    let mut cells = Vec::new();
    for rho in &cols {
        for blocs in &rows {
            let mut rng = ChaCha8Rng::seed_from_u64(cell_seed(config, blocs, *rho));
            let cell = run_cell(config, &weights, blocs, *rho, &mut rng, runtime.as_mut())?;
            cells.push(cell);
            progress(cells.len() as u64, total);
        }
    }
    let peaks = cols
        .iter()
        .map(|rho| {
            let col: Vec<&VotingCell> = cells.iter().filter(|c| c.rho == *rho).collect();
            // The smallest n that reaches the top accuracy (more voters that add nothing do
            // not count as a peak).
            let best = |f: &dyn Fn(&VotingCell) -> f64| {
                let top = col.iter().map(|c| f(c)).fold(f64::NEG_INFINITY, f64::max);
                col.iter()
                    .find(|c| f(c) >= top - 1e-12)
                    .map(|c| (c.n, f(c)))
                    .unwrap_or((0, 0.0))
            };
            let exact = col.iter().all(|c| c.naive_closed_form.is_some());
            let (n_closed_form, accuracy) = best(&|c| c.naive_closed_form.unwrap_or(0.0));
            let (n_measured, _) = best(&|c| c.naive_accuracy);
            Peak {
                rho: *rho,
                n_closed_form: exact.then_some(n_closed_form),
                n_measured,
                accuracy: exact.then_some(accuracy),
            }
        })
        .collect();
    Ok(VotingReport {
        config: config.clone(),
        cells,
        peaks,
    })
}

/// Counts pairs of voters that are both wrong with the same answer, per question.
fn agreeing_wrong_pairs(answers: &[u32], k: usize) -> u64 {
    let mut counts = vec![0u64; k];
    for &a in answers {
        counts[a as usize] += 1;
    }
    counts[1..]
        .iter()
        .map(|c| c * c.saturating_sub(1) / 2)
        .sum()
}

fn run_cell(
    config: &VotingConfig,
    weights: &[f64],
    blocs: &[usize],
    rho: Option<f64>,
    rng: &mut ChaCha8Rng,
    mut runtime: Option<&mut RuntimeVoters>,
) -> Result<VotingCell, VotingError> {
    let n: usize = blocs.iter().sum();
    let k = config.answers;
    let r = rho.unwrap_or(0.0);
    let model = &config.model;
    let accuracies = (!config.accuracies.is_empty()).then(|| &config.accuracies[..n]);
    let mut pairs = PairwiseErrors::new(n);
    let mut agreeing = 0u64;
    let (mut naive, mut dedup, mut via_runtime, mut mismatches) = (0u64, 0u64, 0u64, 0u64);
    for trial in 0..config.trials {
        let answers = draw_answers(model, blocs, accuracies, config.p, r, weights, rng);
        let tie: u64 = rng.gen();
        // The label of the correct answer: voters see answers relabelled, so a vote cannot
        // favour one label. Drawn on every trial so the stream does not depend on the path.
        let truth: u32 = rng.gen_range(0..k as u32);
        let labels: Vec<u32> = answers.iter().map(|a| (a + truth) % k as u32).collect();
        let correct: Vec<bool> = answers.iter().map(|&a| a == 0).collect();
        pairs.record(&correct);
        agreeing += agreeing_wrong_pairs(&answers, k);
        let direct = decide_question(blocs, &labels, tie);
        let outcome = match runtime.as_deref_mut() {
            Some(rt) if trial < config.runtime_trials => {
                via_runtime += 1;
                let got = rt
                    .vote(blocs, &labels, tie)
                    .map_err(|e| VotingError::Runtime(e.to_string()))?;
                if got != direct {
                    mismatches += 1;
                }
                got
            }
            _ => direct,
        };
        naive += u64::from(outcome.0 == Some(truth));
        dedup += u64::from(outcome.1 == Some(truth));
    }
    let t = config.trials.max(1) as f64;
    let plurality = k > 2 || accuracies.is_some();
    let naive_closed_form = if plurality {
        plurality_closed_form(model, blocs, accuracies, config.p, r, weights)
    } else {
        Some(model.majority_closed_form(blocs, config.p, r))
    };
    let dedup_closed_form = match model {
        Model::SharedEvidence if plurality => {
            plurality_dedup_closed_form(blocs.len(), config.p, weights)
        }
        Model::SharedEvidence => Some(model.dedup_closed_form(blocs, config.p, r)),
        _ => naive_closed_form,
    };
    let voter_pairs = (n * n.saturating_sub(1) / 2) as f64;
    Ok(VotingCell {
        model: model.name().to_owned(),
        n,
        blocs: blocs.to_vec(),
        rho,
        p: accuracies.map_or(model.marginal(config.p), |a| {
            a.iter().sum::<f64>() / n as f64
        }),
        trials: config.trials,
        runtime_trials: via_runtime,
        direct_trials: config.trials - via_runtime,
        runtime_mismatches: mismatches,
        answers: k,
        naive_correct: naive,
        naive_accuracy: naive as f64 / t,
        naive_ci: wilson95(naive, config.trials),
        naive_closed_form,
        dedup_accuracy: dedup as f64 / t,
        dedup_ci: wilson95(dedup, config.trials),
        dedup_closed_form,
        measured_correlation: pairs.mean_correlation(),
        measured_error_agreement: (n > 1).then(|| agreeing as f64 / t / voter_pairs),
        implied_correlation: match accuracies {
            Some(ps) => shared_draw_correlation(ps, r),
            None => model.implied_correlation(blocs, config.p, r),
        },
    })
}

/// The mean pairwise error correlation of the heterogeneous common shock: with probability
/// `rho` errors are comonotone (`U >= p_i`), so `cov = rho (min(e_i, e_j) - e_i e_j)`.
pub(crate) fn shared_draw_correlation(ps: &[f64], rho: f64) -> f64 {
    let (mut sum, mut pairs) = (0.0, 0u64);
    for (i, &pi) in ps.iter().enumerate() {
        for &pj in &ps[i + 1..] {
            let (ei, ej) = (1.0 - pi, 1.0 - pj);
            let var = ei * (1.0 - ei) * ej * (1.0 - ej);
            if var > 0.0 {
                sum += rho * (ei.min(ej) - ei * ej) / var.sqrt();
                pairs += 1;
            }
        }
    }
    if pairs == 0 {
        0.0
    } else {
        sum / pairs as f64
    }
}
