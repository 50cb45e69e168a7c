//! `quorate eval PLANS... [--seeds N] [--chaos ...] [--topology star|peer|both]`: runs a set of
//! plans over seeds, in one or both topologies, and reports what an architecture comparison
//! needs.
//!
//! Every (plan, topology, seed) is one run of [`crate::runner::run_plan_file`]. Both topologies
//! run the same parsed plan file with the same `[run]` budget (only `run.topology` differs: it is
//! set on the typed plan, which is never written back to TOML). Every run stays in the
//! denominator, whatever it stopped on: a run that hit a limit, a deadline or no progress is a
//! run that did not succeed, not a run that is left out. A run the runtime refused with an error
//! is counted with stop reason `error`.
//!
//! Per topology:
//!
//! * **success**: stop reason `completed` *and* the run's spent budget within the plan's limit
//!   (every component).
//! * **wrong side-effect rate**: share of runs with at least one wrong side effect. A committed
//!   effect (in the scripted tools' world) is *wrong* when it repeats an effect already committed
//!   in the same run: the same action id again, or the same tool with the same parameters under
//!   another action id (the same logical write done twice). The world does not say which plan
//!   task an action belonged to (task ids are per attempt), so "an effect of a task that did not
//!   complete" cannot be told apart and is not counted.
//! * **duplicate actions**: effects beyond the first per action id, counted in the world, plus
//!   the runtime's own `actions.duplicate_effects` (reported separately; both must stay 0).
//! * **outcome unknown**: `actions.unknown / actions.executed` summed over the runs.
//! * **stop reasons**: count per stop reason.
//! * **latency**: wall-clock time of each run (compile and run), p50/p95/p99 by nearest rank,
//!   each reported only when the run count supports it ([`supported_percentile`]: p95 needs at
//!   least 20 runs, p99 at least 100); with fewer runs the field is `null` and the table says
//!   how many runs it needs instead of printing what would only be the maximum.
//! * **uncertainty**: the success rate and the wrong side-effect rate carry 95% Wilson intervals.
//!
//! Exit codes: 0 done (whatever the runs stopped on), 2 bad input (a plan that does not load or
//! compile, `--seeds 0`, an output file that cannot be written).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use quorate_coordinator::chaos::ChaosConfig;
use serde::Serialize;

use super::output::{is_stdout, progress, write_csv, write_json};
use super::stats::wilson95;
use crate::plan_file::{PlanFile, Topology};
use crate::runner::{run_plan_file, Approve, FileRun, RunArgs};

const EXIT_BAD_INPUT: u8 = 2;

/// Which topologies `eval` runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TopologyChoice {
    /// Supervisor + workers.
    Star,
    /// All-to-all peers.
    Peer,
    /// Both, same plans, seeds and budget.
    #[default]
    Both,
}

impl TopologyChoice {
    fn topologies(self) -> Vec<Topology> {
        match self {
            TopologyChoice::Star => vec![Topology::Star],
            TopologyChoice::Peer => vec![Topology::Peer],
            TopologyChoice::Both => vec![Topology::Star, Topology::Peer],
        }
    }
}

/// Arguments of `quorate eval`.
#[derive(clap::Args, Debug, Clone)]
pub struct EvalArgs {
    /// Plan files (TOML).
    #[arg(required = true)]
    pub plans: Vec<PathBuf>,
    /// Seeds per plan and topology (seeds 0..N).
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// Message chaos for every run: dup=P,reorder=P,drop=P,delay=MS[,resend=MS].
    #[arg(long)]
    pub chaos: Option<ChaosConfig>,
    /// Topologies to run.
    #[arg(long, value_enum, default_value_t = TopologyChoice::Both)]
    pub topology: TopologyChoice,
    /// Answer approval requests: all, none, or task ids (as `quorate run`).
    #[arg(long)]
    pub approve: Option<Approve>,
    /// Write the report (summaries and every run) as JSON to FILE; `-` prints it instead of
    /// the table.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV row per run to FILE; `-` prints it instead of the table.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

/// One (plan, topology, seed) run.
#[derive(Clone, Debug, Serialize)]
pub struct EvalRun {
    /// The plan file as given.
    pub plan: String,
    /// `star` or `peer`.
    pub topology: String,
    /// Chaos seed.
    pub seed: u64,
    /// Stop reason (`error` when the runtime refused the run).
    pub stop_reason: String,
    /// Completed and within budget.
    pub success: bool,
    /// Spent within the plan's limit.
    pub within_budget: bool,
    /// Tool calls that ran.
    pub executed: u64,
    /// Calls whose outcome became unknown.
    pub unknown: u64,
    /// Unknown outcomes recovered by query.
    pub recovered: u64,
    /// Proposals the gate refused.
    pub rejected: u64,
    /// The runtime's duplicate-effect counter.
    pub duplicate_effects_reported: u64,
    /// Effects beyond the first per action id, counted in the world.
    pub duplicate_effects_world: u64,
    /// Wrong side effects (see the module docs).
    pub wrong_effects: u64,
    /// Effects committed in the world.
    pub effects: u64,
    /// Wall-clock latency, milliseconds.
    pub latency_ms: f64,
    /// Error text when the run was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Aggregate of one topology.
#[derive(Clone, Debug, Serialize)]
pub struct TopologySummary {
    /// `star` or `peer`.
    pub topology: String,
    /// Runs (every run, limit-hit ones included).
    pub runs: u64,
    /// Successful runs.
    pub successes: u64,
    /// `successes / runs`.
    pub success_rate: f64,
    /// 95% Wilson interval of the success rate.
    pub success_ci: (f64, f64),
    /// Runs with at least one wrong side effect.
    pub runs_with_wrong_effects: u64,
    /// `runs_with_wrong_effects / runs`.
    pub wrong_side_effect_rate: f64,
    /// 95% Wilson interval of the wrong side-effect rate.
    pub wrong_side_effect_ci: (f64, f64),
    /// Duplicate actions: world duplicates plus the runtime's counter.
    pub duplicate_actions: u64,
    /// Executed tool calls.
    pub executed: u64,
    /// Outcome-unknown calls.
    pub unknown: u64,
    /// `unknown / executed` (0 when nothing executed).
    pub unknown_share: f64,
    /// Runs per stop reason.
    pub stop_reasons: BTreeMap<String, u64>,
    /// Median latency, milliseconds (`None` under 2 runs: see [`supported_percentile`]).
    pub latency_p50_ms: Option<f64>,
    /// p95 (`None` under 20 runs: see [`supported_percentile`]).
    pub latency_p95_ms: Option<f64>,
    /// p99 (`None` under 100 runs).
    pub latency_p99_ms: Option<f64>,
    /// The slowest run, milliseconds.
    pub latency_max_ms: f64,
}

/// The whole evaluation.
#[derive(Clone, Debug, Serialize)]
pub struct EvalReport {
    /// Plans as given.
    pub plans: Vec<String>,
    /// Seeds per plan and topology.
    pub seeds: u64,
    /// Chaos settings.
    pub chaos: Option<ChaosConfig>,
    /// One per topology run.
    pub summaries: Vec<TopologySummary>,
    /// Every run.
    pub runs: Vec<EvalRun>,
}

fn topology_name(t: Topology) -> &'static str {
    match t {
        Topology::Star => "star",
        Topology::Peer => "peer",
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
#[must_use]
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The nearest-rank percentile `p` of sorted values, or `None` when there are fewer than
/// [`runs_needed`]`(p)` values: below that the rank is the largest value, so "p99" of 10 runs
/// would only be their maximum. p50 needs 2 runs, p95 20, p99 100.
#[must_use]
pub fn supported_percentile(sorted: &[f64], p: f64) -> Option<f64> {
    (sorted.len() >= runs_needed(p)).then(|| percentile(sorted, p))
}

/// Runs needed before [`supported_percentile`] reports percentile `p`: `ceil(100 / (100 - p))`.
#[must_use]
pub fn runs_needed(p: f64) -> usize {
    ((100.0 / (100.0 - p)).ceil() as usize).max(1)
}

/// The plan file to run in `topology`: the parsed file with `run.topology` set on the typed
/// value (never re-serialised: a plan whose scripts hold values TOML cannot write back, such as
/// the delegation plans' unit variants, runs as it was read).
fn plan_for(file: &PlanFile, topology: Topology) -> PlanFile {
    let mut copy = file.clone();
    copy.run.topology = topology;
    copy
}

fn measure(plan: &str, topology: Topology, seed: u64, run: &FileRun, latency_ms: f64) -> EvalRun {
    let r = &run.output.report;
    let effects = run.world.effects();
    let mut per_action: HashMap<String, u64> = HashMap::new();
    let mut per_write: HashMap<(String, String), u64> = HashMap::new();
    for e in &effects {
        *per_action.entry(e.action.to_string()).or_default() += 1;
        *per_write
            .entry((e.tool.clone(), e.params.to_string()))
            .or_default() += 1;
    }
    fn extra<K>(m: &HashMap<K, u64>) -> u64 {
        m.values().map(|&c| c.saturating_sub(1)).sum()
    }
    let duplicate_effects_world = extra(&per_action);
    let repeated_writes = extra(&per_write);
    let stop_reason = r.stop_reason.clone().unwrap_or_else(|| "none".into());
    let within_budget = r.budget.spent.fits_within(&r.budget.limit);
    EvalRun {
        plan: plan.to_owned(),
        topology: topology_name(topology).to_owned(),
        seed,
        success: stop_reason == "completed" && within_budget,
        stop_reason,
        within_budget,
        executed: r.actions.executed,
        unknown: r.actions.unknown,
        recovered: r.actions.recovered,
        rejected: r.actions.rejected,
        duplicate_effects_reported: r.actions.duplicate_effects,
        duplicate_effects_world,
        // A second effect under one action id is also a repeated write (same tool, same
        // parameters), so `repeated_writes` already counts it.
        wrong_effects: repeated_writes,
        effects: effects.len() as u64,
        latency_ms,
        error: None,
    }
}

/// Aggregates the runs of one topology.
#[must_use]
pub fn summarize(topology: &str, runs: &[&EvalRun]) -> TopologySummary {
    let n = runs.len() as u64;
    let rate = |k: u64| if n == 0 { 0.0 } else { k as f64 / n as f64 };
    let successes = runs.iter().filter(|r| r.success).count() as u64;
    let wrong = runs.iter().filter(|r| r.wrong_effects > 0).count() as u64;
    let executed: u64 = runs.iter().map(|r| r.executed).sum();
    let unknown: u64 = runs.iter().map(|r| r.unknown).sum();
    let mut stop_reasons = BTreeMap::new();
    for r in runs {
        *stop_reasons.entry(r.stop_reason.clone()).or_insert(0) += 1;
    }
    let mut lat: Vec<f64> = runs.iter().map(|r| r.latency_ms).collect();
    lat.sort_by(f64::total_cmp);
    TopologySummary {
        topology: topology.to_owned(),
        runs: n,
        successes,
        success_rate: rate(successes),
        success_ci: wilson95(successes, n),
        runs_with_wrong_effects: wrong,
        wrong_side_effect_rate: rate(wrong),
        wrong_side_effect_ci: wilson95(wrong, n),
        duplicate_actions: runs
            .iter()
            .map(|r| r.duplicate_effects_world + r.duplicate_effects_reported)
            .sum(),
        executed,
        unknown,
        unknown_share: if executed == 0 {
            0.0
        } else {
            unknown as f64 / executed as f64
        },
        stop_reasons,
        latency_p50_ms: supported_percentile(&lat, 50.0),
        latency_p95_ms: supported_percentile(&lat, 95.0),
        latency_p99_ms: supported_percentile(&lat, 99.0),
        latency_max_ms: lat.last().copied().unwrap_or(0.0),
    }
}

/// Runs the evaluation. Errors are bad input (a plan that does not load or compile, no seeds).
pub fn evaluate(args: &EvalArgs) -> Result<EvalReport, String> {
    if args.seeds == 0 {
        return Err("--seeds must be at least 1".into());
    }
    if args.plans.is_empty() {
        return Err("eval needs at least one plan file".into());
    }
    let mut files = Vec::with_capacity(args.plans.len());
    for path in &args.plans {
        let file = PlanFile::load(path).map_err(|e| e.to_string())?;
        file.compile(path).map_err(|e| e.to_string())?;
        files.push(file);
    }
    // Every id must name a task of one of the plans; each run gets the ids of its own plan.
    let approve = args.approve.clone().unwrap_or_default();
    let named: Vec<(&Path, &PlanFile)> = args
        .plans
        .iter()
        .map(PathBuf::as_path)
        .zip(files.iter())
        .collect();
    approve.check(&named).map_err(|e| e.to_string())?;
    let topologies = args.topology.topologies();
    let total = args.plans.len() as u64 * topologies.len() as u64 * args.seeds;
    let bar = progress(total, "eval");
    let mut runs = Vec::new();
    for (path, file) in args.plans.iter().zip(&files) {
        for &topology in &topologies {
            let copy = plan_for(file, topology);
            copy.compile(path)
                .map_err(|e| format!("{} in {}: {e}", path.display(), topology_name(topology)))?;
            for seed in 0..args.seeds {
                let run_args = RunArgs {
                    seed,
                    chaos: args.chaos,
                    approve: approve.for_file(file),
                    cancel_after_steps: None,
                    trace: None,
                    worker_threads: 0,
                    durable: None,
                    top_ups: Default::default(),
                };
                let name = path.display().to_string();
                let start = Instant::now();
                let result = run_plan_file(path, &copy, &run_args);
                let latency_ms = start.elapsed().as_secs_f64() * 1000.0;
                runs.push(match result {
                    Ok(run) => measure(&name, topology, seed, &run, latency_ms),
                    Err(e) => EvalRun {
                        plan: name,
                        topology: topology_name(topology).to_owned(),
                        seed,
                        stop_reason: "error".into(),
                        success: false,
                        within_budget: false,
                        executed: 0,
                        unknown: 0,
                        recovered: 0,
                        rejected: 0,
                        duplicate_effects_reported: 0,
                        duplicate_effects_world: 0,
                        wrong_effects: 0,
                        effects: 0,
                        latency_ms,
                        error: Some(e.to_string()),
                    },
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let summaries = topologies
        .iter()
        .map(|&t| {
            let name = topology_name(t);
            let of: Vec<&EvalRun> = runs.iter().filter(|r| r.topology == name).collect();
            summarize(name, &of)
        })
        .collect();
    Ok(EvalReport {
        plans: args.plans.iter().map(|p| p.display().to_string()).collect(),
        seeds: args.seeds,
        chaos: args.chaos,
        summaries,
        runs,
    })
}

fn ms(value: Option<f64>, p: f64) -> String {
    value.map_or_else(|| format!("n<{}", runs_needed(p)), |v| format!("{v:.1}"))
}

/// The summary table.
#[must_use]
pub fn table(report: &EvalReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} plans x {} seeds per topology; same plan budget in every topology",
        report.plans.len(),
        report.seeds
    );
    let _ = writeln!(
        s,
        "{:<9} {:>5} {:>24} {:>20} {:>6} {:>14} {:>9} {:>9} {:>9} {:>9}  stop reasons",
        "topology",
        "runs",
        "success [95% CI]",
        "wrong-effect [CI]",
        "dups",
        "unknown/exec",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "max ms"
    );
    for t in &report.summaries {
        let stops: Vec<String> = t
            .stop_reasons
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "{:<9} {:>5} {:>24} {:>20} {:>6} {:>14} {:>9} {:>9} {:>9} {:>9.1}  {}",
            t.topology,
            t.runs,
            format!(
                "{}/{} {:.0}% [{:.0}, {:.0}]",
                t.successes,
                t.runs,
                100.0 * t.success_rate,
                100.0 * t.success_ci.0,
                100.0 * t.success_ci.1
            ),
            format!(
                "{:.1}% [{:.0}, {:.0}]",
                100.0 * t.wrong_side_effect_rate,
                100.0 * t.wrong_side_effect_ci.0,
                100.0 * t.wrong_side_effect_ci.1
            ),
            t.duplicate_actions,
            format!(
                "{}/{} {:.1}%",
                t.unknown,
                t.executed,
                100.0 * t.unknown_share
            ),
            ms(t.latency_p50_ms, 50.0),
            ms(t.latency_p95_ms, 95.0),
            ms(t.latency_p99_ms, 99.0),
            t.latency_max_ms,
            stops.join(", ")
        );
    }
    if report
        .summaries
        .iter()
        .any(|t| t.latency_p99_ms.is_none() && t.runs > 0)
    {
        let _ = writeln!(
            s,
            "(percentiles by nearest rank; p95 needs >= {} runs, p99 >= {}: fewer are shown as \"n<N\", \
             not as the maximum)",
            runs_needed(95.0),
            runs_needed(99.0)
        );
    }
    for r in report.runs.iter().filter(|r| r.error.is_some()) {
        let _ = writeln!(
            s,
            "error: {} {} seed {}: {}",
            r.plan,
            r.topology,
            r.seed,
            r.error.as_deref().unwrap_or_default()
        );
    }
    s
}

const CSV_HEADER: [&str; 16] = [
    "plan",
    "topology",
    "seed",
    "stop_reason",
    "success",
    "within_budget",
    "executed",
    "unknown",
    "recovered",
    "rejected",
    "duplicate_effects_reported",
    "duplicate_effects_world",
    "wrong_effects",
    "effects",
    "latency_ms",
    "error",
];

fn csv_rows(report: &EvalReport) -> Vec<Vec<String>> {
    report
        .runs
        .iter()
        .map(|r| {
            vec![
                r.plan.clone(),
                r.topology.clone(),
                r.seed.to_string(),
                r.stop_reason.clone(),
                r.success.to_string(),
                r.within_budget.to_string(),
                r.executed.to_string(),
                r.unknown.to_string(),
                r.recovered.to_string(),
                r.rejected.to_string(),
                r.duplicate_effects_reported.to_string(),
                r.duplicate_effects_world.to_string(),
                r.wrong_effects.to_string(),
                r.effects.to_string(),
                format!("{:.3}", r.latency_ms),
                r.error.clone().unwrap_or_default(),
            ]
        })
        .collect()
}

/// `quorate eval`.
pub fn run(args: EvalArgs) -> ExitCode {
    let bad = |m: String| {
        eprintln!("quorate: {m}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let json_out = args.json.as_deref().is_some_and(is_stdout);
    let csv_out = args.csv.as_deref().is_some_and(is_stdout);
    if json_out && csv_out {
        return bad("only one of --json and --csv can be `-` (stdout)".into());
    }
    let report = match evaluate(&args) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    if let Some(path) = &args.csv {
        if let Err(e) = write_csv(path, &CSV_HEADER, &csv_rows(&report)) {
            return bad(e.to_string());
        }
    }
    match &args.json {
        Some(path) if is_stdout(path) => crate::outln!(
            "{}",
            serde_json::to_string(&report).expect("the report serializes")
        ),
        Some(path) => {
            if let Err(e) = write_json(path, &report) {
                return bad(e.to_string());
            }
        }
        None => {}
    }
    if !json_out && !csv_out {
        crate::out!("{}", table(&report));
    }
    ExitCode::SUCCESS
}
