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
    /// The store of record, etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (a build with the cargo
    /// features `etcd` and `nats`): the scripted tools' effects and the tasks' action books
    /// live there, and the worker holds a lease, so another worker can take its tasks over.
    #[arg(long, value_name = "STORE")]
    store: Option<quorate::durable::StoreAt>,
    /// With --store: the worker's lease time to live (etcd counts whole seconds: rounded up).
    /// A worker silent this long is taken for lost and its tasks go to other workers.
    #[arg(long, value_name = "MS", default_value_t = 3_000)]
    lease_ms: u64,
    /// TLS and credentials for NATS and etcd.
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
    /// `--store`: the store of record whose leases tell which workers are live.
    pub(crate) store: Option<quorate::durable::StoreAt>,
}

/// The etcd URL of a `--store` given with --nats (a redb file is refused: worker processes
/// share the store of record over the network).
#[cfg(feature = "nats")]
fn etcd_store(
    store: Option<&quorate::durable::StoreAt>,
) -> Result<Option<quorate::state::EtcdUrl>, String> {
    match store {
        None => Ok(None),
        Some(quorate::durable::StoreAt::Etcd(url)) => Ok(Some(url.clone())),
        Some(quorate::durable::StoreAt::File(path)) => Err(format!(
            "--store {}: with --nats (or for a worker) the store must be an etcd cluster, \
             etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
            path.display()
        )),
    }
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
    let store = etcd_store(remote.store.as_ref()).map_err(|e| fail(e, EXIT_BAD_INPUT))?;
    let file = PlanFile::load(plan).map_err(|e| fail(e.to_string(), EXIT_BAD_INPUT))?;
    for w in file.warnings() {
        eprintln!("quorate: warning: {}: {w}", plan.display());
    }
    let remote = RemoteArgs {
        nats: remote.nats,
        workers: remote.workers,
        run,
        wait: std::time::Duration::from_millis(remote.wait_ms),
        store,
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
    let store = match etcd_store(cli.store.as_ref()) {
        Ok(store) => store,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if cli.lease_ms == 0 {
        return fail("--lease-ms must be at least 1".into(), EXIT_BAD_INPUT);
    }
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
        store,
        lease: std::time::Duration::from_millis(cli.lease_ms),
    };
    match run_worker(&args) {
        Ok(exit) => {
            eprintln!(
                "quorate: worker {}: run ended; {} envelopes handled, {} effects committed here, fenced off {} times",
                exit.id, exit.received, exit.effects, exit.fenced
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e.to_string(), e.exit_code()),
    }
}
