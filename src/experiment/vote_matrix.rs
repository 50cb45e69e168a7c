//! A vote matrix made by the runtime: scripted voters with a known error correlation answer
//! questions through worker actors, and what their `Report` envelopes carried is written in the
//! format [`super::vote_data`] reads (`question,voter,answer,correct`).
//!
//! Each question's answers are drawn from a correlation model ([`Model::CommonShock`] or
//! [`Model::BetaBinomial`], whose pairwise error correlation is `rho`) over `k` answers, relabelled
//! by a per-question offset (so the correct answer's label varies), and handed to the voters as
//! evidence; each [`VoterAgent`](super::voting::VoterAgent) runs in its own `WorkerActor` and
//! reports the answer its evidence names. The file holds the answers as the collector received
//! them, not the draws.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::models::{Model, ModelError};
use super::plurality::{draw_answers, WrongAnswers};
use super::runtime_voters::RuntimeVoters;

/// What to generate.
#[derive(Clone, Debug, Serialize)]
pub struct MatrixConfig {
    /// The correlation model (common-shock or beta-binomial).
    pub model: Model,
    /// Voters.
    pub voters: usize,
    /// Questions.
    pub questions: usize,
    /// Accuracy of every voter.
    pub p: f64,
    /// Pairwise error correlation.
    pub rho: f64,
    /// Answers per question.
    pub answers: usize,
    /// Spread of wrong answers.
    pub wrong: WrongAnswers,
    /// Seed.
    pub seed: u64,
}

/// The matrix could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    /// Invalid model parameters.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A model without a known pairwise correlation.
    #[error("vote-matrix takes --model common-shock or beta-binomial (their error correlation is rho), not {0}")]
    UnsupportedModel(&'static str),
    /// Too small.
    #[error("vote-matrix needs at least 2 voters and 2 questions")]
    TooSmall,
    /// The actors did not answer.
    #[error("voter actors: {0}")]
    Runtime(String),
}

/// Runs the questions through the voter actors and returns the CSV text.
pub fn make_vote_matrix(config: &MatrixConfig) -> Result<String, MatrixError> {
    if !matches!(config.model, Model::CommonShock | Model::BetaBinomial) {
        return Err(MatrixError::UnsupportedModel(config.model.name()));
    }
    if config.voters < 2 || config.questions < 2 {
        return Err(MatrixError::TooSmall);
    }
    let blocs = vec![1; config.voters];
    config.model.validate(&blocs, config.p, config.rho)?;
    let weights = config.wrong.weights(config.answers)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut runtime = RuntimeVoters::start().map_err(|e| MatrixError::Runtime(e.to_string()))?;
    let k = config.answers as u32;
    let mut csv = String::from("question,voter,answer,correct\n");
    for q in 0..config.questions {
        let answers = draw_answers(
            &config.model,
            &blocs,
            None,
            config.p,
            config.rho,
            &weights,
            &mut rng,
        );
        let truth: u32 = rng.gen_range(0..k);
        let labels: Vec<u32> = answers.iter().map(|a| (a + truth) % k).collect();
        let (_, reported) = runtime
            .ask(&blocs, &labels, 0)
            .map_err(|e| MatrixError::Runtime(e.to_string()))?;
        for (v, answer) in reported.iter().enumerate() {
            let answer = answer.map_or(String::new(), |a| format!("a{a}"));
            csv.push_str(&format!("q{q:04},v{v},{answer},a{truth}\n"));
        }
    }
    Ok(csv)
}
