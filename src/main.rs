//! The `quorate` command line. docs/cli.md lists every command, flag and exit code.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use quorate::coordinator::chaos::ChaosConfig;
use quorate::plan_file::{PlanFile, PlanWarning};
use quorate::runner::{run_compiled, Approve, FileRun, RunArgs, RunFileError};
use quorate::security::{Security, SecurityArgs};
use quorate::telemetry::Tracing;

/// The runtime allocates many small, short-lived messages; mimalloc serves them at a fraction of
/// the system allocator's cost (`quorate bench dag` measures the difference).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Characters of a task's result the `quorate run` table shows (the whole one is in `--json`).
const RESULT_WIDTH: usize = 40;

/// Exit code for bad input (unreadable or invalid plan, bad flag).
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "quorate",
    version,
    about = "Coordinate many agents: run plans under budgets, envelopes and an execution gate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a plan file on the embedded default (in-memory store, actix, scripted agents).
    ///
    /// Exit codes: 0 completed, 1 failed, 2 bad input, 3 stopped-limit, 4 deadline,
    /// 5 no-progress, 6 cancelled, 7 waiting-approval, 8 the runtime itself failed.
    Run {
        /// The plan file (TOML).
        plan: PathBuf,
        /// Print the run report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Seed for the chaos transport.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Message chaos: dup=P,reorder=P,drop=P,delay=MS[,resend=MS].
        #[arg(long)]
        chaos: Option<ChaosConfig>,
        /// Answer approval requests: all, none, or a comma-separated list of task ids to approve.
        /// Without it, a run that needs approval stops with waiting-approval.
        #[arg(long)]
        approve: Option<Approve>,
        /// Cancel the run after K supervisor steps (dispatches + accepted replies).
        #[arg(long, value_name = "K")]
        cancel_after_steps: Option<u64>,
        /// Write every decision as JSON lines to FILE.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Run the workers on T threads of their own (star topology; 0: every actor on one
        /// thread, which keeps a seeded chaos run reproducible).
        #[arg(long, value_name = "T", default_value_t = 0)]
        worker_threads: usize,
        /// Serve the run's metrics in Prometheus text format over HTTP at ADDR (e.g.
        /// 127.0.0.1:9464) from the start of the run to the exit; the run's counters are
        /// published when it stops (see docs/observability.md).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// After the run (and its report on stdout), keep serving --metrics-addr for MS
        /// milliseconds before exiting, so a scraper sees the final counters.
        #[arg(long, value_name = "MS", requires = "metrics_addr")]
        metrics_hold_ms: Option<u64>,
        /// Export the run's spans over OTLP http/json to the collector at URL (e.g.
        /// http://127.0.0.1:4318; sent to URL/v1/traces). Needs a binary built with the
        /// cargo feature `otlp`.
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// Keep the run in FILE (redb; created if absent), or on the etcd cluster at
        /// etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (a build with the cargo feature `etcd`), so
        /// that `quorate resume` can continue it after a crash, or (star topology) after an
        /// approval stop. With --nats: the supervisor process keeps the run (resume it with
        /// `resume --nats URL --remote-workers N`), and the etcd cluster is the one the worker
        /// processes share (their `--store`), whose leases tell the supervisor which workers
        /// are live (worker failover; a build with the features `etcd` and `nats`).
        #[arg(long, value_name = "STORE")]
        store: Option<quorate::durable::StoreAt>,
        /// Run only the supervisor here and reach its workers over the NATS JetStream server
        /// at URL (nats://HOST:PORT); needs --remote-workers. Built with the feature `nats`.
        #[arg(long, value_name = "URL", requires = "remote_workers")]
        nats: Option<String>,
        /// With --nats: wait for N `quorate worker` processes to register, then run the plan
        /// on them (the plan's `workers` is ignored).
        #[arg(long, value_name = "N", requires = "nats")]
        remote_workers: Option<usize>,
        /// With --nats: the run's id (a uuid, the one the workers are given); random if absent
        /// (printed on stderr).
        #[arg(long, value_name = "RUN", requires = "nats")]
        run: Option<String>,
        /// With --nats: how long to wait for the workers to register (exit 9 when fewer did).
        #[arg(long, value_name = "MS", default_value_t = 60_000)]
        wait_ms: u64,
        /// TLS and credentials for NATS and etcd.
        #[command(flatten)]
        security: SecurityArgs,
    },
    /// Run a worker process for a supervisor started with `quorate run PLAN --nats URL
    /// --remote-workers N`: register, work on the tasks it is assigned with the plan file's
    /// agents and tools, exit 0 when the supervisor announces the end of the run.
    ///
    /// Exit codes: 0 the run ended, 2 bad input (plan file, id, unreachable server), 8 the
    /// transport failed mid-run, 9 not welcomed by a supervisor within --wait-ms.
    Worker(remote::WorkerCli),
    /// Run one peer of a peer-mode plan (topology = "peer") as a process: the peers find each
    /// other on etcd, claim tasks by compare-and-swap there and broadcast over NATS; each
    /// prints its part of the report (docs/distributed.md, "Peer processes").
    ///
    /// Exit codes as `run` (the run's stop reason), 2 bad input (plan file, id, unreachable
    /// server), 8 etcd or NATS failed mid-run or the peer's lease expired, 9 fewer than --peers
    /// peers joined within --wait-ms.
    Peer(remote_peer::PeerCli),
    /// List the runs kept in a store file: id, plan, status, started, tasks by state.
    Runs {
        /// The store: a redb file, or etcd://HOST:PORT[,HOST:PORT...][/PREFIX].
        #[arg(long, value_name = "STORE")]
        store: quorate::durable::StoreAt,
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
        /// TLS and credentials for NATS and etcd.
        #[command(flatten)]
        security: SecurityArgs,
    },
    /// Continue a kept run that was interrupted or stopped waiting-approval, from its log.
    ///
    /// Exit codes as `run`; a run that already stopped otherwise is left as it is: a message on
    /// stderr and the run's own exit code.
    Resume {
        /// The run's id (see `quorate runs`).
        run_id: String,
        /// The store: a redb file, or etcd://HOST:PORT[,HOST:PORT...][/PREFIX].
        #[arg(long, value_name = "STORE")]
        store: quorate::durable::StoreAt,
        /// Answer approval requests (as for `run`); logged as the run's decisions.
        #[arg(long)]
        approve: Option<Approve>,
        /// Grant a task that ran out of its slice (`on_exhausted = "ask"`) a top-up out of the
        /// run's unallocated budget, e.g. enrich=steps:5,tokens:2000 (components: steps,
        /// tool_calls, tokens, cost). Repeat for several tasks. A grant larger than what the
        /// run has left is refused (exit 2) and nothing changes. Logged as a decision.
        #[arg(long, value_name = "TASK=COMPONENT:N,...")]
        grant: Vec<quorate::runner::Grant>,
        /// Refuse the top-up a task asks for: it stops stopped-limit (and the run with it).
        /// Repeat, or separate ids with commas. Logged as a decision.
        #[arg(long, value_name = "TASK", value_delimiter = ',')]
        reject: Vec<String>,
        /// Print the run report as one JSON object.
        #[arg(long)]
        json: bool,
        /// Write this incarnation's decisions as JSON lines to FILE.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// TLS and credentials for NATS and etcd.
        #[command(flatten)]
        security: SecurityArgs,
        #[command(flatten)]
        nats: remote::ResumeNats,
    },
    /// Print the report of a kept run (the JSON of `run --json`) and each task's result, or
    /// write its HTML page (as `quorate report` does for a trace).
    Show {
        /// The run's id.
        run_id: String,
        /// The store: a redb file, or etcd://HOST:PORT[,HOST:PORT...][/PREFIX].
        #[arg(long, value_name = "STORE")]
        store: quorate::durable::StoreAt,
        /// Print one JSON object.
        #[arg(long, conflicts_with = "html")]
        json: bool,
        /// Write the run's self-contained HTML page to FILE (`-`: stdout), from its kept log.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// TLS and credentials for NATS and etcd.
        #[command(flatten)]
        security: SecurityArgs,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Research experiments: topology costs, voting under correlated errors, critical paths.
    #[command(subcommand)]
    Experiment(quorate::experiment::cli::ExperimentCommand),
    /// Run plans over seeds in star and/or peer topology and compare them.
    Eval(quorate::experiment::eval::EvalArgs),
    /// Write one self-contained HTML page about a run from its trace (`quorate run --trace`):
    /// the plan DAG, a timeline per worker, budgets, rejections, the stop reason and each
    /// task's result.
    Report {
        /// The trace (JSON lines).
        trace: PathBuf,
        /// Write the page here (default: stdout).
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Check a plan file and print its tasks in dependency order.
    ///
    /// A task that cannot take a step or make a call its script names is a warning, on
    /// stderr: exit code 0, or 2 with --deny-warnings.
    Check {
        /// The plan file (TOML).
        plan: PathBuf,
        /// Exit with code 2 if the plan has any warning.
        #[arg(long)]
        deny_warnings: bool,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Layered-DAG throughput through the full supervisor path, beside raw actix
    /// request/response measured in the same run.
    Dag {
        /// Number of layers.
        #[arg(long, default_value_t = 20)]
        layers: usize,
        /// Tasks per layer.
        #[arg(long, default_value_t = 50)]
        width: usize,
        /// Workers.
        #[arg(long, default_value_t = 1)]
        workers: usize,
        /// Threads for the workers besides the supervisor's (0: every actor on one thread).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Measured runs; the figures are the median run's (each run has its own baseline).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Measure each run right after its baseline, without the unmeasured warm-up run of
        /// the DAG that otherwise comes first.
        #[arg(long)]
        no_warmup: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Also run the DAG kept at STORE after each measured run (as `quorate run --store`
        /// keeps a run) and report its tasks/s, its ratio to the in-memory path, its writes
        /// and commits per task: in a redb file (it must not exist; it is made anew for each
        /// run; bytes on disk per task), or on etcd://HOST:PORT/PREFIX (with the cluster's raw
        /// CAS rate measured in the same run).
        #[arg(long, value_name = "STORE")]
        store: Option<quorate::durable::StoreAt>,
        /// With --store etcd://...: after each durable run, a distributed run of the same DAG
        /// kept on that cluster, its supervisor and --workers workers (in this process, each
        /// with its own connection and consumer) exchanging every envelope over the NATS
        /// JetStream server at URL (nats://HOST:PORT); its tasks/s beside the cluster's raw
        /// CAS rate. Built with the features `etcd` and `nats`.
        #[arg(long, value_name = "URL", requires = "store")]
        nats: Option<String>,
        /// TLS and credentials for NATS and etcd.
        #[command(flatten)]
        security: SecurityArgs,
    },
}

mod kept;
mod remote;
mod remote_peer;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp_endpoint = match &cli.command {
        Command::Run { otlp_endpoint, .. } => otlp_endpoint.as_deref(),
        _ => None,
    };
    let tracing = match Tracing::init(otlp_endpoint) {
        Ok(tracing) => tracing,
        Err(e) => {
            eprintln!("quorate: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let code = command(cli.command, &tracing);
    tracing.finish();
    code
}

fn command(command: Command, tracing: &Tracing) -> ExitCode {
    match command {
        Command::Check {
            plan,
            deny_warnings,
        } => check(&plan, deny_warnings),
        Command::Report { trace, output } => {
            match quorate::report::write_report(&trace, output.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("quorate: {e}");
                    ExitCode::from(EXIT_BAD_INPUT)
                }
            }
        }
        Command::Runs {
            store,
            json,
            security,
        } => match resolve(&security) {
            Ok(security) => kept::runs(&store, &security, json),
            Err(code) => code,
        },
        Command::Worker(cli) => remote::worker(&cli),
        Command::Peer(cli) => match remote_peer::peer(&cli) {
            Ok(run) => {
                print_run(&run, cli.json, false);
                ExitCode::from(run.output.report.stop_exit_code())
            }
            Err(code) => code,
        },
        Command::Show {
            run_id,
            store,
            json,
            html,
            security,
        } => match (resolve(&security), html) {
            (Err(code), _) => code,
            (Ok(security), Some(page)) => kept::show_html(&run_id, &store, &security, &page),
            (Ok(security), None) => kept::show(&run_id, &store, &security, json),
        },
        Command::Resume {
            run_id,
            store,
            approve,
            grant,
            reject,
            json,
            trace,
            security,
            nats,
        } => {
            let security = match resolve(&security) {
                Ok(security) => security,
                Err(code) => return code,
            };
            kept::resume(
                &run_id,
                &store,
                &security,
                kept::Answers {
                    approve,
                    grant,
                    reject,
                },
                json,
                trace,
                nats.split(&store, &security),
            )
        }
        Command::Experiment(cmd) => quorate::experiment::cli::run(cmd),
        Command::Eval(args) => quorate::experiment::eval::run(args),
        Command::Bench(BenchCommand::Dag {
            layers,
            width,
            workers,
            threads,
            runs,
            no_warmup,
            json,
            store,
            nats,
            security,
        }) => {
            let security = match resolve(&security) {
                Ok(security) => security,
                Err(code) => return code,
            };
            let args = quorate::bench_dag::DagArgs {
                layers,
                width,
                workers,
                threads,
                runs,
                warmup: !no_warmup,
            };
            let checked = args
                .check()
                .and_then(|()| match &store {
                    Some(at) => quorate::bench_dag::check_store(at),
                    None => Ok(()),
                })
                .and_then(|()| quorate::bench_dag::check_nats(store.as_ref(), nats.as_deref()));
            if let Err(e) = checked {
                eprintln!("quorate: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            match quorate::bench_dag::run_distributed(
                args,
                store.as_ref(),
                nats.as_deref(),
                &security,
            ) {
                Ok(b) if json => {
                    quorate::outln!("{}", serde_json::to_string(&b).expect("serializes"));
                    ExitCode::SUCCESS
                }
                Ok(b) => {
                    quorate::out!("{}", b.summary());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("quorate: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Run {
            plan,
            json,
            seed,
            chaos,
            approve,
            cancel_after_steps,
            trace,
            worker_threads,
            metrics_addr,
            metrics_hold_ms,
            otlp_endpoint: _,
            store,
            nats,
            remote_workers,
            run,
            wait_ms,
            security,
        } => {
            let security = match resolve(&security) {
                Ok(security) => security,
                Err(code) => return code,
            };
            if let Some(addr) = metrics_addr {
                if let Err(e) = quorate::telemetry::serve_metrics(addr) {
                    eprintln!("quorate: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            }
            let args = RunArgs {
                seed,
                chaos,
                approve: approve.unwrap_or_default(),
                cancel_after_steps,
                trace,
                worker_threads,
                durable: None,
                top_ups: Default::default(),
            };
            let hold = || {
                if let Some(ms) = metrics_hold_ms {
                    // The run's spans go out now, not after the hold.
                    tracing.flush();
                    let _ = std::io::Write::flush(&mut std::io::stdout());
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                }
            };
            if let (Some(nats), Some(workers)) = (nats, remote_workers) {
                let remote = remote::Remote {
                    nats,
                    workers,
                    run,
                    wait_ms,
                    store: store.clone(),
                    security: security.clone(),
                };
                if let Some(quorate::durable::StoreAt::File(path)) = &store {
                    // Refused before the file is made: the workers share the store of record.
                    eprintln!(
                        "quorate: --store {}: with --nats the store must be an etcd cluster, \
                         etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
                        path.display()
                    );
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
                if let Some(store) = store {
                    // A kept supervisor process: `resume --nats` brings it back.
                    let split = Some(remote::Split::Start(remote));
                    return kept::run(&plan, &store, &security, args, json, &hold, split);
                }
                return match remote::supervise(&plan, &args, remote) {
                    Ok(run) => {
                        print_run(&run, json, false);
                        hold();
                        ExitCode::from(run.output.report.stop_exit_code())
                    }
                    Err(code) => code,
                };
            }
            if let Some(store) = store {
                return kept::run(&plan, &store, &security, args, json, &hold, None);
            }
            match run_plan(&plan, &args) {
                Ok(run) => {
                    print_run(&run, json, args.chaos.is_some());
                    hold();
                    ExitCode::from(run.output.report.stop_exit_code())
                }
                Err(e) => {
                    eprintln!("quorate: {e}");
                    ExitCode::from(run_error_code(&e))
                }
            }
        }
    }
}

/// The connection security the flags give; exit 2 after a message when a password variable is
/// unset or a file is missing.
fn resolve(args: &SecurityArgs) -> Result<Security, ExitCode> {
    args.resolve().map_err(|e| {
        eprintln!("quorate: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    })
}

/// Exit code of a run that could not be carried out: bad input (the plan file, the trace path)
/// is 2; a failure of the runtime itself is 8.
fn run_error_code(e: &RunFileError) -> u8 {
    use quorate::coordinator::RunError;
    match e {
        RunFileError::PlanFile(_)
        | RunFileError::UnknownApproval { .. }
        | RunFileError::Durable(_)
        | RunFileError::TopUp(_)
        | RunFileError::UnknownTopUpTask { .. }
        | RunFileError::TwoTopUpAnswers { .. }
        | RunFileError::NoModelClient
        | RunFileError::Run(
            RunError::Trace { .. }
            | RunError::NoPeers
            | RunError::Config(_)
            | RunError::WorkerRoles(_),
        ) => EXIT_BAD_INPUT,
        // A missing API key variable or a bad model name: the input.
        #[cfg(feature = "llm")]
        RunFileError::ModelTool(_) => EXIT_BAD_INPUT,
        RunFileError::Run(_) => quorate::coordinator::StopReason::EXIT_RUNTIME,
    }
}

/// Loads, compiles and runs `path` as `quorate run` does: the plan's warnings go to stderr
/// before it runs.
fn run_plan(path: &Path, args: &RunArgs) -> Result<FileRun, RunFileError> {
    let file = PlanFile::load(path)?;
    let compiled = file.compile(path)?;
    print_warnings(path, &file.warnings());
    run_compiled(path, &file, compiled, args)
}

fn print_warnings(path: &Path, warnings: &[PlanWarning]) {
    for w in warnings {
        eprintln!("quorate: warning: {}: {w}", path.display());
    }
}

fn check(path: &Path, deny_warnings: bool) -> ExitCode {
    let result = PlanFile::load(path).and_then(|f| {
        let (plan, _) = f.compile(path)?;
        Ok((plan, f.warnings()))
    });
    match result {
        Ok((plan, warnings)) => {
            print_warnings(path, &warnings);
            let verdict = match warnings.len() {
                0 => "valid".to_owned(),
                1 => "valid, 1 warning".to_owned(),
                n => format!("valid, {n} warnings"),
            };
            quorate::outln!("{}: {} tasks, {verdict}", path.display(), plan.len());
            for &i in plan.topological_order() {
                let node = plan.node(i);
                let deps: Vec<String> = node.deps.iter().map(ToString::to_string).collect();
                quorate::outln!(
                    "  {:<24} deps [{}]  budget {}",
                    node.id.to_string(),
                    deps.join(", "),
                    node.budget
                );
            }
            if deny_warnings && !warnings.is_empty() {
                eprintln!("quorate: {}: warnings denied", path.display());
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quorate: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The report as `run --json` prints it.
fn report_json(run: &FileRun) -> serde_json::Value {
    let mut value = serde_json::to_value(&run.output.report).expect("reports serialize");
    value["chaos"] = serde_json::to_value(run.output.chaos).expect("counts serialize");
    value["effects"] = serde_json::json!(run.world.effects().len());
    value
}

/// Prints the report: one JSON object, or the table (docs/cli.md, "Table output"), with the
/// chaos transport's counts when `chaos` was on.
fn print_run(run: &FileRun, json: bool, chaos: bool) {
    let r = &run.output.report;
    if json {
        quorate::outln!("{}", report_json(run));
        return;
    }
    quorate::outln!(
        "run {}  stop: {}",
        r.run_id,
        r.stop_detail.as_deref().unwrap_or("-")
    );
    quorate::outln!(
        "{:<20} {:<16} {:>8} {:>8} {:>8}  result",
        "task",
        "state",
        "attempts",
        "steps",
        "calls"
    );
    for t in &r.tasks {
        quorate::outln!(
            "{:<20} {:<16} {:>8} {:>8} {:>8}  {}",
            t.id,
            t.state.to_string(),
            t.attempts,
            format!("{}/{}", t.spent.steps, t.granted.steps),
            format!("{}/{}", t.spent.tool_calls, t.granted.tool_calls),
            quorate::report::clip(t.result.as_deref(), RESULT_WIDTH),
        );
    }
    for t in &r.tasks {
        if let Some(ask) = &t.top_up {
            quorate::outln!(
                "top-up   {} ran out of {}: needs {} more to go on; spent {} of {}; the run has {} left to grant",
                t.id,
                ask.component,
                ask.needed,
                ask.spent,
                ask.granted,
                ask.left
            );
        }
    }
    let b = &r.budget;
    quorate::outln!(
        "budget   limit {}  reserve {}  granted {}  spent {}  returned {}",
        b.limit,
        b.reserve,
        b.granted,
        b.spent,
        b.returned
    );
    let m = &r.messages;
    // Two directions: what the supervisor sent (assignments, controls) and the workers'
    // replies that reached it. They need not match: one assignment may get several replies (an
    // approval request, a `Quiet`, the answer), and chaos duplicates and re-sends.
    quorate::outln!(
        "messages to workers: sent {}  from workers: delivered {}  rejected: duplicate {} late {} stale {} unauthorized {}  acknowledged {}",
        m.sent,
        m.delivered,
        m.rejected_duplicate,
        m.rejected_late,
        m.rejected_stale,
        m.rejected_unauthorized,
        m.acknowledged
    );
    let a = &r.actions;
    quorate::outln!(
        "actions  executed {}  rejected {}  unknown {}  recovered {}  duplicate effects {}  (world effects {})",
        a.executed,
        a.rejected,
        a.unknown,
        a.recovered,
        a.duplicate_effects,
        run.world.effects().len()
    );
    if chaos {
        let c = &run.output.chaos;
        quorate::outln!(
            "chaos    messages {}  duplicated {}  reordered {}  dropped {} (each re-sent)",
            c.messages,
            c.duplicated,
            c.reordered,
            c.dropped
        );
    }
}
