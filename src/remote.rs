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
    /// The plan roles this worker serves (the plan nodes' `role`), comma-separated: the
    /// supervisor sends it only tasks of these roles. Absent: every role.
    #[arg(long, value_name = "ROLE,...", value_delimiter = ',', num_args = 1..)]
    roles: Vec<String>,
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

/// `quorate resume`'s flags for a run whose supervisor ran as a process over NATS.
#[derive(clap::Args, Debug)]
pub(crate) struct ResumeNats {
    /// Resume a run started with `run --nats ... --store ...` whose supervisor process was
    /// lost: run its supervisor here again, with the same id, and reach its worker processes
    /// (still running) over the NATS JetStream server at URL. Needs --remote-workers. Built
    /// with the feature `nats`.
    #[arg(long, value_name = "URL", requires = "remote_workers")]
    nats: Option<String>,
    /// With --nats: the number of worker processes the run was started with.
    #[arg(long, value_name = "N", requires = "nats")]
    remote_workers: Option<usize>,
}

impl ResumeNats {
    /// What `resume` is to do: `Some` with `--nats` (`store` is the kept run's `--store`: an
    /// etcd cluster there is the one whose worker leases the resumed supervisor watches).
    pub(crate) fn split(
        self,
        store: &quorate::durable::StoreAt,
        security: &Security,
    ) -> Option<Split> {
        let (nats, workers) = self.nats.zip(self.remote_workers)?;
        let store = match store {
            quorate::durable::StoreAt::Etcd(url) => Some(url.clone()),
            quorate::durable::StoreAt::File(_) => None,
        };
        Some(Split::Resume {
            nats,
            workers,
            security: security.clone(),
            store,
        })
    }
}

/// How a kept run's supervisor process reaches its workers over NATS (`run --nats ...
/// --store ...`, `resume --nats ...`).
#[cfg_attr(not(feature = "nats"), allow(dead_code))]
pub(crate) enum Split {
    /// A new run: wait for the workers to register.
    Start(Remote),
    /// A resumed run: the workers kept in its record, still bound to the run's stream.
    Resume {
        /// `--nats`.
        nats: String,
        /// `--remote-workers`.
        workers: usize,
        /// TLS and credentials.
        security: Security,
        /// The etcd cluster of the kept run, if it is one.
        store: Option<quorate::state::EtcdUrl>,
    },
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

/// The run's id `remote` gives (`--run`, else a random one), once its flags are checked.
#[cfg(not(feature = "nats"))]
pub(crate) fn run_id(_: &Remote) -> Result<quorate::protocols::RunId, ExitCode> {
    Err(no_feature())
}

/// Runs (or resumes) the supervisor process of the kept run `record`.
#[cfg(not(feature = "nats"))]
pub(crate) fn supervise_kept(
    _: &Path,
    _: &quorate::plan_file::PlanFile,
    _: &RunArgs,
    _: &Split,
    _: &mut quorate::durable::RunRecord,
) -> Result<FileRun, ExitCode> {
    Err(no_feature())
}

/// Runs a worker process.
#[cfg(not(feature = "nats"))]
pub(crate) fn worker(_: &WorkerCli) -> ExitCode {
    no_feature()
}

#[cfg(feature = "nats")]
fn fail(message: String, code: u8) -> ExitCode {
    eprintln!("quorate: {message}");
    ExitCode::from(code)
}

/// The run's id `remote` gives (`--run`, else a random one), once its flags are checked.
#[cfg(feature = "nats")]
pub(crate) fn run_id(remote: &Remote) -> Result<quorate::protocols::RunId, ExitCode> {
    use quorate::process::parse_id;
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
    Ok(run)
}

/// What the run's stream carried, on stderr.
#[cfg(feature = "nats")]
fn print_counts(c: &quorate_nats::transport::RunCounts) {
    eprintln!(
        "quorate: nats stream: stored {}  delivered {}  redelivered {}  held {}  ack pending {}",
        c.stored, c.delivered, c.redelivered, c.held, c.ack_pending
    );
}

/// Runs `plan`'s supervisor over NATS; the finished run, or the exit code after a message.
#[cfg(feature = "nats")]
pub(crate) fn supervise(plan: &Path, args: &RunArgs, remote: Remote) -> Result<FileRun, ExitCode> {
    use quorate::plan_file::PlanFile;
    use quorate::process::{run_remote, RemoteArgs};
    let run = run_id(&remote)?;
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
            print_counts(&done.counts);
            Ok(done.run)
        }
        Err(e) => Err(fail(e.to_string(), e.exit_code())),
    }
}

/// Runs (or resumes) the supervisor process of the kept run `record` (its plan file `file`,
/// named `path`); a new run's supervisor and worker ids go into `record` (and the store).
#[cfg(feature = "nats")]
pub(crate) fn supervise_kept(
    path: &Path,
    file: &quorate::plan_file::PlanFile,
    args: &RunArgs,
    split: &Split,
    record: &mut quorate::durable::RunRecord,
) -> Result<FileRun, ExitCode> {
    use quorate::process::{resume_remote, run_remote_kept, RemoteArgs, ResumeRemote};
    let done = match split {
        Split::Start(remote) => {
            let store = etcd_store(remote.store.as_ref()).map_err(|e| fail(e, EXIT_BAD_INPUT))?;
            let remote = RemoteArgs {
                nats: remote.nats.clone(),
                workers: remote.workers,
                run: record.run_id,
                wait: std::time::Duration::from_millis(remote.wait_ms),
                store,
                security: remote.security.clone(),
            };
            run_remote_kept(path, file, args, &remote, record)
        }
        Split::Resume {
            nats,
            workers,
            security,
            store,
        } => {
            let remote = ResumeRemote {
                nats: nats.clone(),
                workers: *workers,
                security: security.clone(),
                store: store.clone(),
            };
            resume_remote(path, file, args, record, &remote)
        }
    };
    match done {
        Ok(done) => {
            print_counts(&done.counts);
            Ok(done.run)
        }
        Err(e) => Err(fail(e.to_string(), e.exit_code())),
    }
}

/// Runs a worker process.
#[cfg(feature = "nats")]
pub(crate) fn worker(cli: &WorkerCli) -> ExitCode {
    use quorate::process::{parse_id, run_worker, WorkerArgs};
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
    let roles: Vec<String> = cli.roles.iter().map(|r| r.trim().to_string()).collect();
    if let Some(bad) = roles.iter().find(|r| r.is_empty()) {
        return fail(
            format!("--roles: an empty role name ({bad:?}); give ROLE[,ROLE...]"),
            EXIT_BAD_INPUT,
        );
    }
    let args = WorkerArgs {
        security,
        nats: cli.nats.clone(),
        run,
        id,
        plan: cli.plan.clone(),
        wait: std::time::Duration::from_millis(cli.wait_ms),
        store,
        lease: std::time::Duration::from_millis(cli.lease_ms),
        roles,
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
