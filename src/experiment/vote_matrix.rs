//! Vote matrices: the CSV file format [`VoteMatrix`] reads, and [`make_vote_matrix`], which
//! writes one made by the runtime.
//!
//! ## File format
//!
//! A CSV file with a header naming (in any order) `question`, `voter`, `answer` and `correct`;
//! other columns are ignored. One row per (question, voter): the voter's answer and the correct
//! answer of that question (the same on every row of the question). Answers are compared as
//! trimmed text; an empty answer is an abstention. A voter may miss questions. Fields may be
//! quoted (`"a, b"`, `""` for a quote).
//!
//! ## Made by the runtime
//!
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

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
