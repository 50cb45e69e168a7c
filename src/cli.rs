//! The `quorate` command line's commands and flags (clap); docs/cli.md documents each.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use quorate::coordinator::chaos::ChaosConfig;
use quorate::runner::Approve;
use quorate::security::SecurityArgs;

use crate::{remote, remote_peer};

#[derive(Parser, Debug)]
#[command(
    name = "quorate",
    version,
    about = "Coordinate many agents: run plans under budgets, envelopes and an execution gate"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
pub(crate) enum BenchCommand {
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
        /// Size of each task's answer: 0 answers a number (the count of its inputs); N answers
        /// a string of N bytes, made anew for each task (a result of that size through the
        /// store, the run log and every dependent's input).
        #[arg(long, value_name = "N", default_value_t = 0)]
        result_bytes: usize,
        /// What each task's answer cites: `inputs` (a verified conclusion, each citation
        /// resolved by the supervisor; the first layer answers a suggestion) or `nothing` (a
        /// suggestion, which every node accepts: the work of every bench dag before
        /// conclusions had to cite, to compare with a binary of that time)
        #[arg(long, value_enum, default_value_t = quorate::bench_dag::Cites::Inputs)]
        cites: quorate::bench_dag::Cites,
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
