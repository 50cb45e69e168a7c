//! `quorate bench dag`: layered-DAG throughput through the full supervisor path, beside a raw
//! actix request/response baseline measured in the same process.
//!
//! The DAG has `layers` x `width` tasks; node `i` of layer `l` depends on nodes `i` and
//! `(i + 1) mod width` of layer `l - 1`. Every task goes through the whole path: plan validation,
//! budget slice from the root account, an envelope with fresh ids, the worker core (agent loop,
//! step charged on the task's own account), a reply envelope, the reply rules (dedupe, attempt,
//! version, sender), the acceptance check, a CAS commit of the result, and trace events into the
//! run log. The agent is trivial (it answers at once), so the figure is the runtime's overhead.

use std::io::IsTerminal;
use std::time::Instant;

use actix::prelude::*;
use indicatif::ProgressDrawTarget;
use quorate_coordinator::{run_star, ApprovalPolicy, RunOptions, SupervisorConfig};
use quorate_protocols::{Acceptance, Budget, EvidenceRef, NodeId, NodeSpec, PlanSpec, ResultKind};
use quorate_workers::{Agent, AgentContext, AgentRegistry, Proposal, ToolRegistry, WorkerConfig};
use serde::Serialize;

mod distributed;
mod durable;
#[cfg(feature = "nats")]
mod nats;
mod progress;
mod summary;
pub use distributed::{Carried, DistributedBench, GOAL};
pub use durable::{check_store, DurableBench, RawCas, CONCURRENT};
use durable::{raw_cas, run_durable};
use progress::Progress;

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DagArgs {
    /// Layers.
    pub layers: usize,
    /// Tasks per layer.
    pub width: usize,
    /// Workers.
    pub workers: usize,
    /// Threads for the workers besides the supervisor's (`0`: all on one thread).
    pub threads: usize,
    /// Measured runs (the figures are medians; the machine is shared and noisy).
    pub runs: usize,
    /// Run the DAG once, unmeasured, right before each measured run. The baseline before each
    /// run leaves the caches, branch predictors and allocator in its own state, and a run of
    /// 1000 tasks lasts about a millisecond: without a warm-up it measures the cold start.
    pub warmup: bool,
    /// Size of each task's answer: `0` answers a number (the count of the task's inputs); `n`
    /// answers a string of `n` bytes, made anew for each task, so that a result of that size
    /// travels the whole path (the result store, the run log, every dependent's input).
    pub result_bytes: usize,
    /// What each task's answer cites.
    pub cites: Cites,
}

/// What each task's answer cites (`bench dag --cites`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Cites {
    /// Its inputs: a verified conclusion, whose every citation the supervisor resolves (the
    /// first layer, with no inputs, answers a suggestion, which its nodes accept).
    #[default]
    Inputs,
    /// Nothing: a suggestion, which every node accepts. The work of every `bench dag` before
    /// conclusions had to cite (commit 6487880): the same-workload comparison with a binary of
    /// that time.
    Nothing,
}

impl DagArgs {
    /// Refuses a zero where the bench needs at least one: `--layers`, `--width`, `--workers`
    /// and `--runs` (zero runs would be no figure, not one run).
    ///
    /// ```
    /// use quorate::bench_dag::DagArgs;
    /// let args = DagArgs {
    ///     layers: 2, width: 3, workers: 1, threads: 0, runs: 1, warmup: true, result_bytes: 0,
    ///     cites: Default::default(),
    /// };
    /// assert!(args.check().is_ok());
    /// assert_eq!(
    ///     DagArgs { width: 0, ..args }.check().unwrap_err(),
    ///     "--layers, --width, --workers and --runs must be at least 1 (--width is 0)"
    /// );
    /// ```
    pub fn check(&self) -> Result<(), String> {
        let zero = [
            ("--layers", self.layers),
            ("--width", self.width),
            ("--workers", self.workers),
            ("--runs", self.runs),
        ]
        .into_iter()
        .find(|&(_, n)| n == 0);
        match zero {
            Some((flag, _)) => Err(format!(
                "--layers, --width, --workers and --runs must be at least 1 ({flag} is 0)"
            )),
            None => Ok(()),
        }
    }
}

/// Result of `bench dag`: the median run (by tasks/s), each run measured beside its own baseline.
#[derive(Clone, Debug, Serialize)]
pub struct DagBench {
    /// Layers.
    pub layers: usize,
    /// Width.
    pub width: usize,
    /// Workers.
    pub workers: usize,
    /// Worker threads besides the supervisor's.
    pub threads: usize,
    /// Tasks per run.
    pub tasks: usize,
    /// Bytes of each task's answer (`0`: a number; see [`DagArgs::result_bytes`]).
    pub result_bytes: usize,
    /// What each task's answer cites.
    pub cites: Cites,
    /// Wall time of the median run (actors started to report), seconds.
    pub elapsed_s: f64,
    /// Tasks per second of the median run.
    pub tasks_per_s: f64,
    /// Tasks per second of every run, in order.
    pub tasks_per_s_runs: Vec<f64>,
    /// The baseline measured before every run, in order.
    pub baseline_round_trips_per_s_runs: Vec<f64>,
    /// Raw actix request/response round trips per second (one actor awaiting another on one
    /// thread), measured in the same process right before the median run.
    pub baseline_round_trips_per_s: f64,
    /// `tasks_per_s / baseline_round_trips_per_s` of the median run.
    pub ratio: f64,
    /// Whether each measured run followed an unmeasured warm-up run.
    pub warmup: bool,
    /// Tasks per second of the process's first run of the DAG, right after the first baseline
    /// (the DAG's code paths and the memory it needs are used for the first time; actix, tokio
    /// and the allocator have just served the baseline); a warm-up run when `warmup`, else the
    /// first measured run.
    pub first_run_tasks_per_s: f64,
    /// Peak resident memory growth during the process's first run of the DAG divided by tasks
    /// (Linux `VmHWM`), bytes; the plan itself is built before and not counted.
    pub peak_rss_bytes_per_task: Option<f64>,
    /// With `--store STORE`: the durable path measured beside the in-memory one, in the same
    /// process (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub durable: Option<DurableBench>,
    /// With `--nats URL` (and an etcd `--store`): the distributed path, supervisor and workers
    /// exchanging every envelope over NATS JetStream, measured beside the others in the same
    /// process (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distributed: Option<DistributedBench>,
}

/// The bench's agent for answers of `bytes` bytes (`0`: a number) that cite `cites`. Each
/// answers how many inputs its task has (or a string of that many bytes): a verified conclusion
/// citing them, or, in the first layer (no inputs, nothing recorded to cite) and with
/// [`Cites::Nothing`], a suggestion, which those nodes accept (see [`layered_plan`]). The
/// numeric ones hold nothing, so creating one per attempt allocates nothing.
pub fn answer_agent(bytes: usize, cites: Cites) -> Box<dyn Agent> {
    match (bytes, cites) {
        (0, Cites::Inputs) => Box::new(Count::<true>),
        (0, Cites::Nothing) => Box::new(Count::<false>),
        (bytes, cites) => Box::new(Text { bytes, cites }),
    }
}

/// Answers its number of inputs, citing them if `CITE`.
struct Count<const CITE: bool>;

/// Answers a string of `bytes` bytes.
struct Text {
    bytes: usize,
    cites: Cites,
}

impl<const CITE: bool> Agent for Count<CITE> {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let cites = if CITE { Cites::Inputs } else { Cites::Nothing };
        answer(ctx, ctx.inputs.len().into(), cites)
    }
}

impl Agent for Text {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        answer(ctx, "x".repeat(self.bytes).into(), self.cites)
    }
}

/// Finishes with `value`, citing what `cites` says: a verified conclusion if that is anything,
/// else a suggestion.
fn answer(ctx: &AgentContext<'_>, value: quorate_protocols::Payload, cites: Cites) -> Proposal {
    let evidence: Vec<EvidenceRef> = match cites {
        Cites::Inputs => ctx
            .inputs
            .iter()
            .map(|i| EvidenceRef::Input {
                node: i.node.clone(),
            })
            .collect(),
        Cites::Nothing => Vec::new(),
    };
    let kind = if evidence.is_empty() {
        ResultKind::Suggestion
    } else {
        ResultKind::VerifiedConclusion
    };
    Proposal::Finish {
        kind,
        value,
        evidence,
    }
}

/// The layered plan, its nodes accepting the answers of [`answer_agent`] with `cites`: with
/// [`Cites::Inputs`] the first layer's nodes accept suggestions, with [`Cites::Nothing`] every
/// node does.
pub fn layered_plan(layers: usize, width: usize, cites: Cites) -> PlanSpec {
    let suggestions = Acceptance {
        kinds: vec![ResultKind::Suggestion],
        ..Acceptance::default()
    };
    let per_task = Budget::steps(2);
    let mut nodes = Vec::with_capacity(layers * width);
    for l in 0..layers {
        for i in 0..width {
            let mut n = NodeSpec::named(&format!("l{l}n{i}")).with_budget(per_task);
            if l > 0 {
                let mut deps = vec![NodeId::new(format!("l{}n{i}", l - 1)).expect("valid id")];
                let j = (i + 1) % width;
                if j != i {
                    deps.push(NodeId::new(format!("l{}n{j}", l - 1)).expect("valid id"));
                }
                n.deps = deps;
            }
            if l == 0 || cites == Cites::Nothing {
                n = n.with_acceptance(suggestions.clone());
            }
            nodes.push(n);
        }
    }
    let total = (layers * width) as u64 * 2 + 1;
    PlanSpec {
        budget: Budget::steps(total),
        reserve: Budget::steps(1),
        nodes,
        ..PlanSpec::default()
    }
}

#[derive(Message)]
#[rtype(result = "u64")]
struct Ping(u64);

struct Pong;

impl Actor for Pong {
    type Context = Context<Self>;
}

impl Handler<Ping> for Pong {
    type Result = u64;
    fn handle(&mut self, msg: Ping, _: &mut Self::Context) -> u64 {
        msg.0 + 1
    }
}

/// Raw actix request/response: one actor awaits `send` to another, `n` times, on one arbiter.
pub fn actix_round_trips_per_s(n: u64) -> f64 {
    let system = System::new();
    system.block_on(async move {
        let pong = Pong.start();
        let start = Instant::now();
        let mut acc = 0u64;
        for i in 0..n {
            acc = acc.wrapping_add(pong.send(Ping(i)).await.expect("pong answers"));
        }
        let s = start.elapsed().as_secs_f64();
        std::hint::black_box(acc);
        n as f64 / s
    })
}

fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The index of the median of `values` (the upper one of an even count); `None` if empty.
///
/// ```
/// use quorate::bench_dag::median_index;
/// assert_eq!(median_index(&[5.0, 1.0, 3.0]), Some(2));
/// assert_eq!(median_index(&[4.0, 1.0, 3.0, 2.0]), Some(2));
/// assert_eq!(median_index(&[]), None);
/// ```
#[must_use]
pub fn median_index(values: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    order.get(values.len() / 2).copied()
}

/// Runs the benchmark: per run, the baseline and then the DAG. Arguments that fail
/// [`DagArgs::check`] are an error.
pub fn run(args: DagArgs) -> Result<DagBench, String> {
    run_stored(args, None, &crate::security::Security::default())
}

/// [`run_distributed`] without NATS.
pub fn run_stored(
    args: DagArgs,
    store: Option<&crate::durable::StoreAt>,
    security: &crate::security::Security,
) -> Result<DagBench, String> {
    run_distributed(args, store, None, security)
}

/// Refuses `--nats` without an etcd `--store` (the distributed runs are kept on etcd, and
/// measured against its raw CAS rate), with answers (`result_bytes`) longer than an envelope's
/// strings may be, and in a build without the cargo feature `nats`.
pub fn check_nats(
    store: Option<&crate::durable::StoreAt>,
    nats: Option<&str>,
    result_bytes: usize,
) -> Result<(), String> {
    if nats.is_none() {
        return Ok(());
    }
    if !matches!(store, Some(crate::durable::StoreAt::Etcd(_))) {
        return Err("--nats needs --store etcd://HOST:PORT/PREFIX: the distributed runs are kept on etcd and measured against its raw CAS rate".into());
    }
    // Refused now, not after the in-memory and durable runs: a worker or the supervisor would
    // refuse the envelope that carries such an answer.
    let max = quorate_protocols::Limits::default().max_string;
    if result_bytes > max {
        return Err(format!(
            "--result-bytes {result_bytes} with --nats: an answer travels in an envelope, whose strings are at most {max} bytes"
        ));
    }
    if cfg!(feature = "nats") {
        Ok(())
    } else {
        Err("--nats needs a quorate built with the cargo feature `nats` (cargo build --features etcd,nats)".into())
    }
}

/// [`run`], and with `store`, after each measured run the same DAG kept at `store`: in a fresh
/// redb file (removed and created again for each run; it must not exist before: the bench does
/// not overwrite a file it did not make; the last durable run's file is left), or on an etcd
/// cluster (each run under a run id of its own); with `nats` (an etcd store only, see
/// [`check_nats`]) then a distributed run, its envelopes over the NATS server at `nats`
/// ([`DistributedBench`]); on etcd, last, the cluster's raw CAS rate. `security` is how every
/// etcd and NATS connection is made (the bench's supervisor and workers all connect with the
/// same credentials: a development server, or a user allowed everything).
pub fn run_distributed(
    args: DagArgs,
    store: Option<&crate::durable::StoreAt>,
    nats: Option<&str>,
    security: &crate::security::Security,
) -> Result<DagBench, String> {
    use crate::durable::{RunStore, StoreAt};
    args.check()?;
    if let Some(at) = store {
        check_store(at)?;
    }
    check_nats(store, nats, args.result_bytes)?;
    let spec = layered_plan(args.layers, args.width, args.cites);
    let tasks = spec.nodes.len();
    let plan = spec.validate().map_err(|e| e.to_string())?;
    let mut samples = Vec::new();
    // The process's first run of the DAG: its tasks/s and its peak memory growth per task.
    let mut first: Option<(f64, Option<f64>)> = None;
    // The plan is the input, built before the run: neither its memory nor its freeing is
    // counted (each run gets a shared handle; this one outlives them).
    let mut once = || -> Result<f64, String> {
        let rss_before = first.is_none().then(peak_rss_bytes).flatten();
        let elapsed = run_once(plan.clone(), args)?;
        if first.is_none() {
            let rss = rss_before
                .zip(peak_rss_bytes())
                .map(|(b, a)| a.saturating_sub(b) as f64 / tasks as f64);
            first = Some((tasks as f64 / elapsed, rss));
        }
        Ok(elapsed)
    };
    let etcd = matches!(store, Some(StoreAt::Etcd(_)));
    let phases = args.runs
        * (if args.warmup { 3 } else { 2 }
            + usize::from(store.is_some())
            + usize::from(nats.is_some())
            + usize::from(etcd));
    // (run, file bytes) of each durable run; the raw CAS rates of each run (etcd); each
    // distributed run (NATS).
    let mut durable = Vec::new();
    let mut raw = Vec::new();
    let mut nats_runs = Vec::new();
    let terminal = std::io::stderr().is_terminal();
    let mut progress = Progress::new(phases as u64, terminal.then(ProgressDrawTarget::stderr));
    for run in 1..=args.runs {
        let of = args.runs;
        progress.phase(Instant::now(), format!("run {run}/{of}: baseline"));
        let baseline = actix_round_trips_per_s(200_000);
        if args.warmup {
            progress.phase(Instant::now(), format!("run {run}/{of}: warm-up"));
            once()?;
        }
        progress.phase(Instant::now(), format!("run {run}/{of}: measured"));
        let elapsed = once()?;
        samples.push((elapsed, tasks as f64 / elapsed, baseline));
        let Some(at) = store else { continue };
        progress.phase(Instant::now(), format!("run {run}/{of}: durable"));
        let start = Instant::now();
        if let StoreAt::File(path) = at {
            let _ = std::fs::remove_file(path);
        }
        let kept = RunStore::open_at(at, security).map_err(|e| format!("{at}: {e}"))?;
        let done = run_durable(plan.clone(), args, kept, start)?;
        let bytes = match at {
            StoreAt::File(path) => Some(
                std::fs::metadata(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?
                    .len(),
            ),
            StoreAt::Etcd(_) => None,
        };
        durable.push((done, bytes));
        if let Some(url) = nats {
            progress.phase(Instant::now(), format!("run {run}/{of}: distributed"));
            let kept = RunStore::open_at(at, security).map_err(|e| format!("{at}: {e}"))?;
            nats_runs.push(run_nats(plan.clone(), args, &kept, url, security)?);
        }
        if etcd {
            progress.phase(Instant::now(), format!("run {run}/{of}: raw etcd CAS"));
            raw.push(raw_cas(at, security)?);
        }
    }
    progress.finish();
    let (first_run_tasks_per_s, peak_rss_bytes_per_task) = first.expect("at least one run");
    // The median run by tasks/s; its figures are reported together, so they belong to one run.
    let rates: Vec<f64> = samples.iter().map(|s| s.1).collect();
    let median = median_index(&rates).expect("at least one run");
    let (elapsed_s, tasks_per_s, baseline) = samples[median];
    let durable = store.map(|at| {
        let rates: Vec<f64> = durable
            .iter()
            .map(|d| tasks as f64 / d.0.elapsed_s)
            .collect();
        let m = median_index(&rates).expect("a durable run per run");
        let (run, file_bytes) = &durable[m];
        let writes_per_task = run.writes as f64 / tasks as f64;
        let raw = median_index(&raw.iter().map(|r| r.sequential).collect::<Vec<_>>()).map(|r| {
            let r: durable::RawRates = raw[r];
            RawCas {
                sequential_cas_per_s: r.sequential,
                concurrent_cas_per_s: r.concurrent,
                batched_writes_per_s: r.batched,
                tasks_ratio_to_sequential: rates[m] / r.sequential,
                writes_ratio_to_batched: rates[m] * writes_per_task / r.batched,
            }
        });
        DurableBench {
            store: at.to_string(),
            tasks_per_s: rates[m],
            ratio_to_memory: rates[m] / tasks_per_s,
            writes_per_task,
            commits_per_task: run.commits as f64 / tasks as f64,
            bytes_per_task: file_bytes.map(|b| b as f64 / tasks as f64),
            file_bytes: *file_bytes,
            tasks_per_s_runs: rates,
            raw,
        }
    });
    let distributed = durable.as_ref().and_then(|d| {
        let raw = d.raw.as_ref()?;
        distributed::summarize(
            d.store.clone(),
            args.workers,
            tasks,
            &nats_runs,
            raw,
            tasks_per_s,
        )
    });
    Ok(DagBench {
        layers: args.layers,
        width: args.width,
        workers: args.workers,
        threads: args.threads,
        tasks,
        result_bytes: args.result_bytes,
        cites: args.cites,
        elapsed_s,
        tasks_per_s,
        tasks_per_s_runs: samples.iter().map(|s| s.1).collect(),
        baseline_round_trips_per_s_runs: samples.iter().map(|s| s.2).collect(),
        baseline_round_trips_per_s: baseline,
        ratio: tasks_per_s / baseline,
        warmup: args.warmup,
        first_run_tasks_per_s,
        peak_rss_bytes_per_task,
        durable,
        distributed,
    })
}

#[cfg(feature = "nats")]
fn run_nats(
    plan: quorate_protocols::Plan,
    args: DagArgs,
    kept: &crate::durable::RunStore,
    url: &str,
    security: &crate::security::Security,
) -> Result<distributed::DistributedRun, String> {
    nats::run_distributed(plan, args, kept, url, security)
}

/// Refused before: [`check_nats`].
#[cfg(not(feature = "nats"))]
fn run_nats(
    _: quorate_protocols::Plan,
    _: DagArgs,
    _: &crate::durable::RunStore,
    _: &str,
    _: &crate::security::Security,
) -> Result<distributed::DistributedRun, String> {
    Err("--nats needs a quorate built with the cargo feature `nats`".into())
}

/// One run of the DAG; its wall time in seconds. A run that does not complete is an error.
fn run_once(plan: quorate_protocols::Plan, args: DagArgs) -> Result<f64, String> {
    run_with(plan, args, None)
}

fn run_with(
    plan: quorate_protocols::Plan,
    args: DagArgs,
    durable: Option<quorate_coordinator::Durable>,
) -> Result<f64, String> {
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers: args.workers,
            attempt_timeout_ms: 600_000,
            approvals: ApprovalPolicy::None,
            ..SupervisorConfig::default()
        },
        worker: WorkerConfig::default(),
        worker_threads: args.threads,
        durable,
        ..RunOptions::default()
    };
    let start = Instant::now();
    let out = run_star(plan, options, || {
        (
            AgentRegistry::new().with_fallback(move |_: &quorate_workers::Assignment| {
                answer_agent(args.result_bytes, args.cites)
            }),
            ToolRegistry::new(),
        )
    })
    .map_err(|e| e.to_string())?;
    let elapsed = start.elapsed().as_secs_f64();
    if out.report.stop_reason.as_deref() != Some("completed") {
        return Err(format!(
            "the DAG run did not complete ({}); its throughput would mean nothing",
            out.report.stop_detail.clone().unwrap_or_default()
        ));
    }
    Ok(elapsed)
}
