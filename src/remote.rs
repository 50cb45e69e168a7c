//! `quorate run --nats ... --remote-workers N` and `quorate worker`: the process split over
//! NATS (docs/distributed.md, "Processes"). Without the cargo feature `nats` both say so and
//! exit 2.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use quorate::runner::{FileRun, RunArgs};
use quorate::security::{Security, SecurityArgs};

/// `quorate worker`'s flags.
#[derive(clap::Args, Debug)]
#[cfg_attr(not(feature = "nats"), allow(dead_code))]
pub(crate) struct WorkerCli {
    /// The NATS JetStream server (nats://HOST:PORT).
    #[arg(long, value_name = "URL")]
    nats: String,
    /// The run to work for (the uuid the supervisor was given with --run, or printed).
    #[arg(long, value_name = "RUN")]
    run: String,
    /// The plan file the supervisor runs: the worker registers its agents and tools.
    #[arg(long, value_name = "PLAN")]
    plan: PathBuf,
    /// This worker's agent id (a uuid); random if absent.
    #[arg(long, value_name = "ID")]
    id: Option<String>,
    /// How long to wait for the supervisor's welcome (exit 9 after).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    wait_ms: u64,
    /// TLS and credentials for NATS.
    #[command(flatten)]
    security: SecurityArgs,
}

/// `quorate run`'s flags for a supervisor process.
#[cfg_attr(not(feature = "nats"), allow(dead_code))]
pub(crate) struct Remote {
    pub(crate) nats: String,
    pub(crate) workers: usize,
    pub(crate) run: Option<String>,
    pub(crate) wait_ms: u64,
    pub(crate) security: Security,
}

const EXIT_BAD_INPUT: u8 = 2;

#[cfg(not(feature = "nats"))]
fn no_feature() -> ExitCode {
    eprintln!("quorate: --nats needs a quorate built with the cargo feature `nats` (cargo build --features nats)");
    ExitCode::from(EXIT_BAD_INPUT)
}

/// Runs `plan`'s supervisor over NATS; the finished run, or the exit code after a message.
#[cfg(not(feature = "nats"))]
pub(crate) fn supervise(_: &Path, _: &RunArgs, _: Remote) -> Result<FileRun, ExitCode> {
    Err(no_feature())
}

/// Runs a worker process.
#[cfg(not(feature = "nats"))]
pub(crate) fn worker(_: &WorkerCli) -> ExitCode {
    no_feature()
}

/// Runs `plan`'s supervisor over NATS; the finished run, or the exit code after a message.
#[cfg(feature = "nats")]
pub(crate) fn supervise(plan: &Path, args: &RunArgs, remote: Remote) -> Result<FileRun, ExitCode> {
    use quorate::plan_file::PlanFile;
    use quorate::process::{parse_id, run_remote, RemoteArgs};
    let fail = |message: String, code: u8| {
        eprintln!("quorate: {message}");
        ExitCode::from(code)
    };
    let run = match &remote.run {
        Some(text) => parse_id(text).map_err(|e| fail(format!("--run: {e}"), EXIT_BAD_INPUT))?,
        None => quorate_workers::edge::random_ids().run_id(),
    };
    if remote.workers == 0 {
        return Err(fail(
            "--remote-workers must be at least 1".into(),
            EXIT_BAD_INPUT,
        ));
    }
    let file = PlanFile::load(plan).map_err(|e| fail(e.to_string(), EXIT_BAD_INPUT))?;
    for w in file.warnings() {
        eprintln!("quorate: warning: {}: {w}", plan.display());
    }
    let remote = RemoteArgs {
        nats: remote.nats,
        workers: remote.workers,
        run,
        wait: std::time::Duration::from_millis(remote.wait_ms),
        security: remote.security,
    };
    match run_remote(plan, &file, args, &remote) {
        Ok(done) => {
            let c = done.counts;
            eprintln!(
                "quorate: nats stream: stored {}  delivered {}  redelivered {}  held {}  ack pending {}",
                c.stored, c.delivered, c.redelivered, c.held, c.ack_pending
            );
            Ok(done.run)
        }
        Err(e) => Err(fail(e.to_string(), e.exit_code())),
    }
}

/// Runs a worker process.
#[cfg(feature = "nats")]
pub(crate) fn worker(cli: &WorkerCli) -> ExitCode {
    use quorate::process::{parse_id, run_worker, WorkerArgs};
    let fail = |message: String, code: u8| {
        eprintln!("quorate: {message}");
        ExitCode::from(code)
    };
    let run = match parse_id(&cli.run) {
        Ok(run) => run,
        Err(e) => return fail(format!("--run: {e}"), EXIT_BAD_INPUT),
    };
    let id = match cli.id.as_deref().map(parse_id).transpose() {
        Ok(id) => id,
        Err(e) => return fail(format!("--id: {e}"), EXIT_BAD_INPUT),
    };
    let security = match cli.security.resolve() {
        Ok(security) => security,
        Err(e) => return fail(e.to_string(), EXIT_BAD_INPUT),
    };
    let args = WorkerArgs {
        security,
        nats: cli.nats.clone(),
        run,
        id,
        plan: cli.plan.clone(),
        wait: std::time::Duration::from_millis(cli.wait_ms),
    };
    match run_worker(&args) {
        Ok(exit) => {
            eprintln!(
                "quorate: worker {}: run ended; {} envelopes handled, {} effects committed here",
                exit.id, exit.received, exit.effects
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.to_string(), e.exit_code()),
    }
}
