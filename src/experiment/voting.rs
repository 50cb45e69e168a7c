//! Experiment 2: majority voting under correlated errors.
//!
//! For each cell (voters `n` or bloc layout, correlation `rho`) the experiment draws `trials`
//! questions from the [`Model`] with a seeded ChaCha8 generator and aggregates each question's
//! votes with the runtime's [`MajorityVote`] twice: naively (every ballot counts) and
//! source-deduplicated (one ballot per evidence source). It reports the accuracies with 95%
//! Wilson intervals, the measured pairwise error correlation and the exact closed forms.
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
use super::runtime_voters::RuntimeVoters;
use super::stats::{wilson95, PairwiseErrors};
use super::vote::{Ballot, Decision, MajorityVote, TiePolicy, VoteConfig};

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
    /// Naive majority: correct answers (a tie counts as broken by a seeded coin).
    pub naive_correct: u64,
    /// Naive majority accuracy.
    pub naive_accuracy: f64,
    /// Its 95% Wilson interval.
    pub naive_ci: (f64, f64),
    /// Exact naive majority accuracy.
    pub naive_closed_form: f64,
    /// Deduplicated majority accuracy.
    pub dedup_accuracy: f64,
    /// Its 95% Wilson interval.
    pub dedup_ci: (f64, f64),
    /// Exact deduplicated accuracy.
    pub dedup_closed_form: f64,
    /// Measured mean pairwise error correlation (`None` with one voter).
    pub measured_correlation: Option<f64>,
    /// The correlation the model implies.
    pub implied_correlation: f64,
}

/// Where accuracy peaks along `n`, per model and `rho`.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// The correlation column.
    pub rho: Option<f64>,
    /// `n` with the highest exact accuracy.
    pub n_closed_form: usize,
    /// `n` with the highest measured accuracy.
    pub n_measured: usize,
    /// The highest exact accuracy.
    pub accuracy: f64,
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

/// The vote of one question: `(naive correct, dedup correct)`. `tie` breaks ties.
#[must_use]
pub fn decide_question(blocs: &[usize], correct: &[bool], tie: u64) -> (bool, bool) {
    let ballots = correct
        .iter()
        .zip(sources(blocs))
        .enumerate()
        .map(|(voter, (&right, source))| (voter as u32, source, Ballot::Answer(right)));
    decide_ballots(ballots, tie)
}

/// Counts `(voter, source, ballot)` (a ballot says whether the voter was right), in order,
/// once counting every vote and once one vote per source; `(naive correct, dedup correct)`.
/// The direct path and the runtime voters both decide here, so they can only differ in the
/// ballots that reach it.
pub(crate) fn decide_ballots<V: PartialEq + Debug + Clone>(
    ballots: impl IntoIterator<Item = (V, u64, Ballot<bool>)>,
    tie: u64,
) -> (bool, bool) {
    let config = VoteConfig {
        ties: TiePolicy::Draw,
        ..VoteConfig::default()
    };
    let mut naive: MajorityVote<bool, V> = MajorityVote::new(config);
    let mut dedup: MajorityVote<bool, V> = MajorityVote::new(VoteConfig {
        one_vote_per_source: true,
        ..config
    });
    for (voter, source, ballot) in ballots {
        let _ = dedup.cast(voter.clone(), Some(source), ballot.clone());
        let _ = naive.cast(voter, Some(source), ballot);
    }
    let won = |d: Decision<bool>| matches!(d, Decision::Decided { answer: true, .. });
    (won(naive.decide(tie)), won(dedup.decide(tie)))
}

/// The source of each voter: bloc `i` is source `i`.
pub(crate) fn sources(blocs: &[usize]) -> impl Iterator<Item = u64> + '_ {
    blocs
        .iter()
        .enumerate()
        .flat_map(|(i, &size)| std::iter::repeat_n(i as u64, size))
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
    for (ci, rho) in cols.iter().enumerate() {
        for (ri, blocs) in rows.iter().enumerate() {
            // One seeded stream per cell, so adding a cell does not change the others.
            let cell_seed =
                config.seed ^ ((ci as u64) << 32 | ri as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut rng = ChaCha8Rng::seed_from_u64(cell_seed);
            let cell = run_cell(config, blocs, *rho, &mut rng, runtime.as_mut())?;
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
            let (n_closed_form, accuracy) = best(&|c| c.naive_closed_form);
            let (n_measured, _) = best(&|c| c.naive_accuracy);
            Peak {
                rho: *rho,
                n_closed_form,
                n_measured,
                accuracy,
            }
        })
        .collect();
    Ok(VotingReport {
        config: config.clone(),
        cells,
        peaks,
    })
}

fn run_cell(
    config: &VotingConfig,
    blocs: &[usize],
    rho: Option<f64>,
    rng: &mut ChaCha8Rng,
    mut runtime: Option<&mut RuntimeVoters>,
) -> Result<VotingCell, VotingError> {
    let n: usize = blocs.iter().sum();
    let r = rho.unwrap_or(0.0);
    let model = &config.model;
    let mut pairs = PairwiseErrors::new(n);
    let (mut naive, mut dedup, mut via_runtime, mut mismatches) = (0u64, 0u64, 0u64, 0u64);
    for trial in 0..config.trials {
        let correct = model.draw(blocs, config.p, r, rng);
        let tie: u64 = rng.gen();
        // Drawn on every trial so the random stream does not depend on the path taken.
        let truth: bool = rng.gen();
        pairs.record(&correct);
        let direct = decide_question(blocs, &correct, tie);
        let outcome = match runtime.as_deref_mut() {
            Some(rt) if trial < config.runtime_trials => {
                via_runtime += 1;
                let got = rt
                    .vote(blocs, &correct, truth, tie)
                    .map_err(|e| VotingError::Runtime(e.to_string()))?;
                if got != direct {
                    mismatches += 1;
                }
                got
            }
            _ => direct,
        };
        naive += u64::from(outcome.0);
        dedup += u64::from(outcome.1);
    }
    let t = config.trials.max(1) as f64;
    Ok(VotingCell {
        model: model.name().to_owned(),
        n,
        blocs: blocs.to_vec(),
        rho,
        p: model.marginal(config.p),
        trials: config.trials,
        runtime_trials: via_runtime,
        direct_trials: config.trials - via_runtime,
        runtime_mismatches: mismatches,
        naive_correct: naive,
        naive_accuracy: naive as f64 / t,
        naive_ci: wilson95(naive, config.trials),
        naive_closed_form: model.majority_closed_form(blocs, config.p, r),
        dedup_accuracy: dedup as f64 / t,
        dedup_ci: wilson95(dedup, config.trials),
        dedup_closed_form: model.dedup_closed_form(blocs, config.p, r),
        measured_correlation: pairs.mean_correlation(),
        implied_correlation: model.implied_correlation(blocs, config.p, r),
    })
}
