//! The `quorate experiment ...` subcommands.
//!
//! Exit codes: 0 done (and every counted value matched its formula), 1 a check failed,
//! 2 bad input or an output file could not be written.

use std::path::PathBuf;
use std::process::ExitCode;

use super::critical_path::{builtin, evaluate, Dag, ScheduleRow};
use super::models::Model;
use super::output::progress;
use super::output::write_text;
use super::plurality::WrongAnswers;
use super::present::{bad, critical_path_outputs, topology_outputs};
use super::present_data::vote_data_outputs;
use super::present_voting::voting_outputs;
use super::topology::{run_topology, TokenMode, TopologyConfig, TopologyTransport};
use super::vote_data::{analyse, VoteMatrix};
use super::vote_matrix::{make_vote_matrix, MatrixConfig};
use super::voting::{run_voting, VotingConfig};

/// Correlation models of `experiment voting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelName {
    /// With probability rho all voters share one draw.
    CommonShock,
    /// Question difficulty q ~ Beta(a, b) with mean p and correlation rho.
    BetaBinomial,
    /// Second-order Bahadur correlation c = rho.
    Bahadur,
    /// A fraction alpha of easy questions (accuracy p1), the rest hard (p2).
    DifficultyMix,
    /// Voters copy K evidence sources in blocs (--blocs).
    SharedEvidence,
}

/// How `experiment topology` moves its envelopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportKind {
    /// Actor mailboxes in this process.
    InProcess,
    /// NATS JetStream (`--nats nats://HOST:PORT`).
    Nats,
}

/// Research experiments: topology costs, voting (simulated and real vote data), critical paths.
#[derive(clap::Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Star vs all-to-all: counted messages, bytes, context tokens and the largest context one
    /// agent reads per round, beside the formulas; wall times repeated.
    #[command(mut_arg("plot", |a| a.help("Write an SVG plot of messages, tokens and the largest single-agent context against n (`-`: stdout)")))]
    Topology {
        /// Participant counts.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32")]
        agents: Vec<u64>,
        /// Rounds.
        #[arg(long, default_value_t = 5)]
        rounds: u64,
        /// Tokens per message.
        #[arg(long, default_value_t = 100)]
        msg_tokens: u64,
        /// Token model: full history, delta only, or previous-round artifact.
        #[arg(long, value_enum, default_value_t = TokenMode::Full)]
        mode: TokenMode,
        /// Seed of the message text.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Runs of each exchange: wall time is the median with its min and max.
        #[arg(long, default_value_t = 5)]
        repeats: u64,
        /// How the envelopes travel: actor mailboxes in this process, or NATS JetStream
        /// (needs --nats, and a build with the cargo feature `nats`).
        #[arg(long, value_enum, default_value_t = TransportKind::InProcess)]
        transport: TransportKind,
        /// The NATS server of `--transport nats`.
        #[arg(long, value_name = "nats://HOST:PORT")]
        nats: Option<String>,
        /// TLS and credentials for `--transport nats`.
        #[command(flatten)]
        security: crate::security::SecurityArgs,
        /// `--json`, `--csv`, `--plot`.
        #[command(flatten)]
        out: Outputs,
    },
    /// Majority or plurality voting under correlated errors: Monte Carlo (95% Wilson intervals)
    /// beside the exact closed form; or, with --from-csv, a real vote matrix analysed.
    #[command(
        mut_arg("csv", |a| a.help("Write the cells as CSV (`-`: stdout)")),
        mut_arg("plot", |a| a.help("Write an SVG plot of accuracy against n per rho, with 95% intervals (`-`: stdout)"))
    )]
    Voting {
        /// Voter counts.
        #[arg(long, value_delimiter = ',', default_value = "1,3,5,7,9,11,13,15")]
        voters: Vec<usize>,
        /// Marginal accuracy of one voter.
        #[arg(long, default_value_t = 0.8)]
        p: f64,
        /// Correlations to sweep.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1"
        )]
        rho: Vec<f64>,
        /// Questions per cell.
        #[arg(long, default_value_t = 20_000)]
        trials: u64,
        /// Correlation model.
        #[arg(long, value_enum, default_value_t = ModelName::CommonShock)]
        model: ModelName,
        /// difficulty-mix: share of easy questions.
        #[arg(long, default_value_t = 0.7)]
        alpha: f64,
        /// difficulty-mix: accuracy on easy questions.
        #[arg(long, default_value_t = 0.95)]
        p1: f64,
        /// difficulty-mix: accuracy on hard questions.
        #[arg(long, default_value_t = 0.45)]
        p2: f64,
        /// shared-evidence: voters per source, e.g. 3,1,1 (repeat the flag for more rows).
        #[arg(long)]
        blocs: Vec<String>,
        /// Questions per cell that run through worker actors (the rest call the vote directly).
        #[arg(long, default_value_t = 50)]
        runtime_trials: u64,
        /// Answers per question: 2 is right/wrong majority, more is plurality.
        #[arg(long, default_value_t = 2)]
        answers: usize,
        /// How wrong voters spread over the wrong answers: `uniform`, or `attractor=W` (one
        /// wrong answer takes share W of the wrong votes).
        #[arg(long, default_value = "uniform", value_parser = parse_wrong)]
        wrong: WrongAnswers,
        /// One accuracy per voter, e.g. 0.9,0.8,0.7 (common-shock only; a row of n voters takes
        /// the first n).
        #[arg(long, value_delimiter = ',')]
        accuracies: Vec<f64>,
        /// Seed (of the draws; with --from-csv, of the bootstrap and the sampled sub-ensembles).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Analyse a vote matrix instead of simulating: CSV with question, voter, answer,
        /// correct (see docs/experiments.md); the model flags are then not used.
        #[arg(long, value_name = "FILE")]
        from_csv: Option<PathBuf>,
        /// `--json`, `--csv`, `--plot`.
        #[command(flatten)]
        out: Outputs,
    },
    /// Write a vote matrix made by the runtime: scripted voters with a known error correlation
    /// answer through worker actors (the input format of `voting --from-csv`).
    VoteMatrix {
        /// Voters.
        #[arg(long, default_value_t = 7)]
        voters: usize,
        /// Questions.
        #[arg(long, default_value_t = 400)]
        questions: usize,
        /// Accuracy of every voter.
        #[arg(long, default_value_t = 0.7)]
        p: f64,
        /// Pairwise error correlation.
        #[arg(long, default_value_t = 0.3)]
        rho: f64,
        /// Correlation model: common-shock or beta-binomial.
        #[arg(long, value_enum, default_value_t = ModelName::CommonShock)]
        model: ModelName,
        /// Answers per question.
        #[arg(long, default_value_t = 4)]
        answers: usize,
        /// Spread of wrong answers: `uniform` or `attractor=W`.
        #[arg(long, default_value = "uniform", value_parser = parse_wrong)]
        wrong: WrongAnswers,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Where to write the CSV (`-`: stdout).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Makespan of DAGs under a list scheduler on a virtual clock, beside the lower bound.
    #[command(mut_arg("plot", |a| a.help("Write an SVG plot of makespan / lower bound against W per DAG (`-`: stdout)")))]
    CriticalPath {
        /// A DAG file (TOML or JSON) instead of the built-in set.
        #[arg(long, value_name = "FILE")]
        dag: Option<PathBuf>,
        /// Worker counts.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
        workers: Vec<usize>,
        /// Include each schedule in the JSON output.
        #[arg(long)]
        schedule: bool,
        /// `--json`, `--csv`, `--plot`.
        #[command(flatten)]
        out: Outputs,
    },
}

/// The output flags every experiment takes (flattened into each subcommand). Each subcommand
/// words the help of `--plot` (and voting that of `--csv`) itself, with `mut_arg` on its variant
/// (no final period there: the derive drops the one of a doc comment).
#[derive(clap::Args, Debug)]
pub struct Outputs {
    /// Print one JSON object instead of the table, or with FILE write it there (`-`: stdout).
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    pub json: Option<Option<PathBuf>>,
    /// Write the rows as CSV (`-`: stdout, instead of the table).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write an SVG plot (`-`: stdout, instead of the table).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// Runs an experiment subcommand.
pub fn run(cmd: ExperimentCommand) -> ExitCode {
    match cmd {
        ExperimentCommand::Topology {
            agents,
            rounds,
            msg_tokens,
            mode,
            seed,
            repeats,
            transport,
            nats,
            security,
            out: Outputs { json, csv, plot },
        } => {
            let transport = match (transport, nats) {
                (TransportKind::InProcess, None) => TopologyTransport::InProcess,
                (TransportKind::Nats, Some(url)) => match security.resolve() {
                    Ok(security) => TopologyTransport::Nats { url, security },
                    Err(e) => return bad(e),
                },
                (TransportKind::Nats, None) => {
                    return bad("--transport nats needs --nats nats://HOST:PORT")
                }
                (TransportKind::InProcess, Some(_)) => {
                    return bad("--nats is only used with --transport nats")
                }
            };
            let config = TopologyConfig {
                agents,
                rounds,
                msg_tokens,
                mode,
                seed,
                repeats,
                transport,
            };
            let bar = progress(2 * config.agents.len() as u64, "topology");
            let report = match run_topology(&config, |done, _| bar.set_position(done)) {
                Ok(report) => report,
                Err(e) => return bad(e),
            };
            bar.finish_and_clear();
            match topology_outputs(&report, json, csv.as_deref(), plot.as_deref()) {
                Ok(()) => {}
                Err(code) => return code,
            }
            let ok = report.rows.iter().all(|r| {
                r.messages_match
                    && r.tokens_match
                    && r.context_match
                    && r.repeats_agree
                    && r.nats.is_none_or(|c| c.matches)
            });
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        ExperimentCommand::Voting {
            voters,
            p,
            rho,
            trials,
            model,
            alpha,
            p1,
            p2,
            blocs,
            runtime_trials,
            answers,
            wrong,
            accuracies,
            seed,
            from_csv,
            out: Outputs { json, csv, plot },
        } => {
            if let Some(path) = from_csv {
                let matrix = match VoteMatrix::load(&path) {
                    Ok(m) => m,
                    Err(e) => return bad(e),
                };
                let report = analyse(&matrix, &path.display().to_string(), seed);
                return match vote_data_outputs(&report, json, csv.as_deref(), plot.as_deref()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(code) => code,
                };
            }
            let blocs = match parse_blocs(&blocs) {
                Ok(b) => b,
                Err(e) => return bad(e),
            };
            let model = match model {
                ModelName::CommonShock => Model::CommonShock,
                ModelName::BetaBinomial => Model::BetaBinomial,
                ModelName::Bahadur => Model::Bahadur,
                ModelName::DifficultyMix => Model::DifficultyMix { alpha, p1, p2 },
                ModelName::SharedEvidence => Model::SharedEvidence,
            };
            let blocs = if blocs.is_empty() && model == Model::SharedEvidence {
                vec![
                    vec![1, 1, 1],
                    vec![2, 1, 1],
                    vec![3, 1, 1],
                    vec![5, 1, 1],
                    vec![7, 1, 1],
                ]
            } else {
                blocs
            };
            let config = VotingConfig {
                voters,
                p,
                rhos: rho,
                trials,
                model,
                blocs,
                seed,
                runtime_trials,
                answers,
                wrong,
                accuracies,
            };
            let bar = progress(0, "voting");
            let report = match run_voting(&config, |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            }) {
                Ok(report) => report,
                Err(e) => return bad(e),
            };
            bar.finish_and_clear();
            if let Err(code) = voting_outputs(&report, json, csv.as_deref(), plot.as_deref()) {
                return code;
            }
            if report.cells.iter().all(|c| c.runtime_mismatches == 0) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        ExperimentCommand::VoteMatrix {
            voters,
            questions,
            p,
            rho,
            model,
            answers,
            wrong,
            seed,
            out,
        } => {
            let model = match model {
                ModelName::CommonShock => Model::CommonShock,
                ModelName::BetaBinomial => Model::BetaBinomial,
                other => {
                    return bad(format!(
                        "vote-matrix takes --model common-shock or beta-binomial, not {}",
                        clap::ValueEnum::to_possible_value(&other)
                            .map_or_else(String::new, |v| v.get_name().to_owned())
                    ))
                }
            };
            let config = MatrixConfig {
                model,
                voters,
                questions,
                p,
                rho,
                answers,
                wrong,
                seed,
            };
            let text = match make_vote_matrix(&config) {
                Ok(t) => t,
                Err(e) => return bad(e),
            };
            match write_text(&out, &text) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => bad(e),
            }
        }
        ExperimentCommand::CriticalPath {
            dag,
            workers,
            schedule,
            out: Outputs { json, csv, plot },
        } => {
            let dags = match dag {
                Some(path) => match Dag::load(&path) {
                    Ok(d) => vec![d],
                    Err(e) => return bad(e),
                },
                None => builtin(),
            };
            if workers.is_empty() || workers.contains(&0) {
                return bad("--workers needs at least one count, each at least 1");
            }
            let rows: Vec<ScheduleRow> = dags
                .iter()
                .flat_map(|d| workers.iter().map(|&w| evaluate(d, w, schedule)))
                .collect();
            match critical_path_outputs(&rows, json, csv.as_deref(), plot.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(code) => code,
            }
        }
    }
}

/// Parses `--wrong uniform` or `--wrong attractor=0.6`.
pub fn parse_wrong(s: &str) -> Result<WrongAnswers, String> {
    let attractor = |w: &str| match w.trim().parse::<f64>() {
        Ok(weight) if (0.0..=1.0).contains(&weight) => Ok(WrongAnswers::Attractor { weight }),
        _ => Err(format!(
            "{s:?}: the attractor weight must be a number in [0, 1], e.g. attractor=0.6"
        )),
    };
    match s.trim() {
        "uniform" => Ok(WrongAnswers::Uniform),
        other => match other.strip_prefix("attractor=") {
            Some(w) => attractor(w),
            None => Err(format!(
                "{s:?}: expected `uniform` or `attractor=W` with W in [0, 1]"
            )),
        },
    }
}

/// Parses `--blocs 3,1,1` entries.
pub fn parse_blocs(specs: &[String]) -> Result<Vec<Vec<usize>>, String> {
    specs
        .iter()
        .map(|s| {
            s.split(',')
                .map(|x| match x.trim().parse::<usize>() {
                    Ok(v) if v > 0 => Ok(v),
                    _ => Err(format!("--blocs {s:?}: each entry must be a whole number >= 1 (voters per source), e.g. 3,1,1")),
                })
                .collect()
        })
        .collect()
}
