//! Running a plan on actix: a supervisor, `k` workers, optional chaos links between them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use actix::prelude::*;
use quorate_protocols::{Plan, Role, RunId, Sender};
use quorate_state::{MemoryStore, PackedLog};
use quorate_workers::{
    AgentRegistry, Replies, ReportBatch, ReportMsg, ToolRegistry, WorkerActor, WorkerConfig,
};
use tokio::sync::oneshot;

use crate::chaos::{Chaos, ChaosConfig, ChaosCounts};
use crate::trace::TraceWriter;
use crate::{
    ChaosLink, Event, RunReport, SupervisorActor, SupervisorConfig, SupervisorCore, WorkerLink,
};

/// How to run a plan.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The supervisor's settings (workers, deadline, approvals...).
    pub supervisor: SupervisorConfig,
    /// Every worker's settings (call timeout, no-progress limit).
    pub worker: WorkerConfig,
    /// Message chaos between supervisor and workers, in both directions.
    pub chaos: Option<ChaosConfig>,
    /// Seed for the chaos decisions.
    pub seed: u64,
    /// Write the JSONL trace here.
    pub trace: Option<PathBuf>,
    /// Evidence text handed to tasks, by node index (data only).
    pub evidence_text: Vec<(u32, Vec<String>)>,
    /// Keys written to the run's store before it starts.
    pub data: Vec<(String, serde_json::Value)>,
    /// The run's store (accepted results, `data`, and the keys store preconditions name),
    /// shared with whoever else holds it: tools that read or write the records a task's
    /// preconditions guard, or another writer. `None` (the default): a fresh one (star runs).
    pub store: Option<Arc<MemoryStore<quorate_protocols::Payload>>>,
    /// The plan version to switch to when a store precondition fails.
    pub fallback: Option<quorate_protocols::PlanSpec>,
    /// Threads (actix arbiters) the workers run on, besides the supervisor's; workers are spread
    /// over them round-robin. `0` (the default) runs every actor on the supervisor's thread,
    /// which keeps a seeded chaos run reproducible: with more threads the order in which
    /// messages meet the chaos (and so its decisions) depends on thread timing.
    pub worker_threads: usize,
    /// A durable run (star topology only): its id, where its supervisor and workers keep what
    /// a crash must not lose, and what to resume from.
    pub durable: Option<Durable>,
}

/// How a star run is kept past the process (`quorate run --store`).
#[derive(Clone, Debug)]
pub struct Durable {
    /// The run's id (chosen by the caller, who records the run before it starts).
    pub run: RunId,
    /// The supervisor's events and results.
    pub journal: Arc<dyn crate::RunJournal>,
    /// The workers' action intents.
    pub actions: Arc<dyn quorate_workers::ActionJournal>,
    /// The actions a crashed process sent to tools (restored as `outcome-unknown`).
    pub restored_actions: Arc<Vec<quorate_workers::ActionIntent>>,
    /// The log and results to resume from; `None` starts the run afresh.
    pub resume: Option<crate::ResumeFrom>,
}

/// Everything a finished run leaves behind.
#[derive(Debug)]
pub struct RunOutput {
    /// The report.
    pub report: RunReport,
    /// What the chaos transport did (all zero without chaos).
    pub chaos: ChaosCounts,
    /// Lines written to the trace file.
    pub trace_lines: u64,
    /// The run log (every event).
    pub log: Arc<PackedLog<Event>>,
    /// Accepted results by key `result/<run>/<node>`.
    pub results: Arc<MemoryStore<quorate_protocols::Payload>>,
}

impl RunOutput {
    /// The accepted result of task `node`, if it completed (shared with the store, not
    /// copied; it reads as a `serde_json::Value`).
    #[must_use]
    pub fn result(&self, node: &str) -> Option<quorate_protocols::Payload> {
        self.results
            .get_now(&result_key(self.report.run_id, node))
            .map(|v| v.value)
    }
}

/// A run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The trace file could not be written.
    #[error("trace file {path}: {source}")]
    Trace {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The actor system stopped before the run reported.
    #[error("the supervisor stopped without a report")]
    NoReport,
    /// The stored log could not be replayed.
    #[error("cannot resume: {0}")]
    Resume(#[from] crate::ResumeError),
    /// The actix runtime failed.
    #[error("actix runtime: {0}")]
    Runtime(std::io::Error),
    /// A peer-mode run was asked for no peers (`workers = 0`): nobody would run a task.
    #[error("a peer-mode run needs at least one peer (workers = 0)")]
    NoPeers,
    /// The supervisor's settings cannot run (e.g. no worker).
    #[error("cannot run: {0}")]
    Config(#[from] crate::ConfigError),
    /// Roles given for a worker the run does not have ([`Participants::roles`](crate::Participants::roles)).
    #[error("worker roles: {0}")]
    WorkerRoles(crate::InputRefused),
}

/// Runs `plan` in star topology: one supervisor, `options.supervisor.workers` workers built from
/// `parts()` (agents and tools; called once per worker), on a fresh actix system. Blocks until
/// the run stops. Settings it cannot run with are refused before anything starts
/// ([`RunError::Config`]: no worker).
///
/// `parts()` runs once per worker: state that tools must share across workers (the system they
/// act on, an effect log) has to be created outside and cloned in (an `Arc`), or each worker
/// gets its own copy.
pub fn run_star(
    plan: Plan,
    options: RunOptions,
    parts: impl Fn() -> (AgentRegistry, ToolRegistry),
) -> Result<RunOutput, RunError> {
    options.supervisor.validate()?;
    let (writer, sink) = open_trace(options.trace.as_deref())?;
    let log = Arc::new(PackedLog::new());
    let results = options
        .store
        .clone()
        .unwrap_or_else(|| Arc::new(MemoryStore::with_capacity(plan.len() + options.data.len())));
    let durable = options.durable.clone();
    write_data(&results, &options.data);
    write_resumed(&results, durable.as_ref());
    let chaos = options
        .chaos
        .map(|c| Arc::new(Mutex::new(Chaos::new(c, options.seed))));
    // A traced or kept run lists its plan's nodes in run-started (what a report page draws).
    let traced = options.trace.is_some() || durable.is_some();
    let system = System::new();
    let (log2, results2, chaos2) = (log.clone(), results.clone(), chaos.clone());
    let tasks = plan.len();
    let report = system.block_on(async move {
        // The run's ids are random (the shell seeds them from the operating system); the
        // supervisor core draws from a source forked from this one.
        let mut ids = quorate_workers::edge::random_ids();
        let run = durable.as_ref().map_or_else(|| ids.run_id(), |d| d.run);
        let run_span = run_span(run, "star", tasks);
        let me = Sender {
            agent: ids.agent_id(),
            role: Role::Supervisor,
        };
        let count = options.supervisor.workers;
        let senders: Vec<Sender> = (0..count)
            .map(|_| Sender {
                agent: ids.agent_id(),
                role: Role::Worker,
            })
            .collect();
        let ctx = Context::<SupervisorActor>::new();
        let supervisor = ctx.address();
        let reports: Recipient<ReportBatch> = match &chaos2 {
            Some(c) => ChaosLink::new(supervisor.clone().recipient(), c.clone())
                .start()
                .recipient(),
            None => supervisor.clone().recipient(),
        };
        let arbiters: Vec<Arbiter> = (0..options.worker_threads)
            .map(|_| Arbiter::new())
            .collect();
        let links = senders
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (agents, tools) = parts();
                let worker = WorkerActor::with_replies(
                    s.agent,
                    options.worker.clone(),
                    agents,
                    tools,
                    Replies::Batched(reports.clone()),
                )
                .with_store(results2.clone())
                .with_run_span(run_span.clone());
                let worker = match &durable {
                    Some(d) => worker.with_journal(d.actions.clone(), &d.restored_actions),
                    None => worker,
                };
                let worker = match arbiters.get(i % arbiters.len().max(1)) {
                    Some(arbiter) => WorkerActor::start_in_arbiter(&arbiter.handle(), |_| worker),
                    None => worker.start(),
                };
                match &chaos2 {
                    Some(c) => WorkerLink {
                        assign: ChaosLink::new(worker.clone().recipient(), c.clone())
                            .start()
                            .recipient(),
                        control: ChaosLink::new(worker.recipient(), c.clone())
                            .start()
                            .recipient(),
                    },
                    None => WorkerLink {
                        assign: worker.clone().recipient(),
                        control: worker.recipient(),
                    },
                }
            })
            .collect();
        let mut core = SupervisorCore::new(
            run,
            plan,
            options.supervisor.clone(),
            me,
            senders,
            ids.fork(),
        );
        // A trace is read without the plan file at hand: it names the nodes and their deps.
        core.set_describe_plan(traced);
        for (node, texts) in options.evidence_text {
            core.set_evidence_text(node, texts);
        }
        if let Some(fallback) = options.fallback {
            core.set_fallback_plan(fallback);
        }
        replay(&mut core, durable.as_ref(), &results2)?;
        let (done, wait) = oneshot::channel();
        let actor = SupervisorActor::new(core, links, results2, log2, sink, done);
        ctx.run(journaled(actor, durable.as_ref()));
        let report = wait.await.ok();
        for arbiter in &arbiters {
            arbiter.stop();
        }
        Ok::<_, RunError>((report, arbiters, run_span))
    });
    let (report, arbiters, run_span) = report?;
    for arbiter in arbiters {
        // A worker thread that panicked has nothing left to report.
        let _ = arbiter.join();
    }
    drop(system);
    let report = report.ok_or(RunError::NoReport)?;
    end_run_span(run_span, &report);
    crate::run_metrics::publish_report(&report);
    crate::run_metrics::publish_conflicts("results", results.conflicts());
    let trace_lines = finish_trace(writer, options.trace.as_deref())?;
    let chaos = chaos
        .map(|c| ChaosLink::<ReportMsg>::counts(&c))
        .unwrap_or_default();
    Ok(RunOutput {
        report,
        chaos,
        trace_lines,
        log,
        results,
    })
}

/// Writes the results a durable run resumes from into its fresh result store (after its
/// `[data]`): what [`replay`] reads the completed tasks' results from.
pub(crate) fn write_resumed(
    store: &MemoryStore<quorate_protocols::Payload>,
    durable: Option<&Durable>,
) {
    if let Some(from) = durable.and_then(|d| d.resume.as_ref()) {
        write_data(store, &from.results);
    }
}

/// Replays the log a durable run resumes from into its fresh `core` (nothing for a new run),
/// reading completed tasks' results from `results` (see [`write_resumed`]).
pub(crate) fn replay(
    core: &mut SupervisorCore,
    durable: Option<&Durable>,
    results: &MemoryStore<quorate_protocols::Payload>,
) -> Result<(), crate::ResumeError> {
    match durable.and_then(|d| d.resume.as_ref()) {
        Some(from) => core.replay(&from.events, |key| results.get_now(key).map(|v| v.value)),
        None => Ok(()),
    }
}

/// The supervisor `actor` writing through a durable run's journal (unchanged for a run that
/// is not kept).
pub(crate) fn journaled(actor: SupervisorActor, durable: Option<&Durable>) -> SupervisorActor {
    match durable {
        Some(d) => actor.with_journal(d.journal.clone()),
        None => actor,
    }
}

/// The span of run `run` ([`quorate_workers::telemetry::RUN_SPAN`]): the parent of every
/// attempt's span; [`end_run_span`] records the stop reason and closes it.
pub(crate) fn run_span(run: RunId, topology: &'static str, tasks: usize) -> tracing::Span {
    tracing::info_span!(
        quorate_workers::telemetry::RUN_SPAN,
        run = %run,
        topology,
        tasks,
        stop_reason = tracing::field::Empty,
    )
}

/// Records the stop reason of `report` on the run's span and closes it.
pub(crate) fn end_run_span(span: tracing::Span, report: &RunReport) {
    if let Some(reason) = &report.stop_reason {
        span.record("stop_reason", reason.as_str());
    }
}

/// Writes a run's `[data]` into its fresh result store before it starts (what store
/// preconditions check); every key is absent, so each create commits.
pub(crate) fn write_data(
    store: &MemoryStore<quorate_protocols::Payload>,
    data: &[(String, serde_json::Value)],
) {
    for (key, value) in data {
        let _ = store.cas_now(key, None, value.clone().into());
    }
}

/// The store key of node `node`'s accepted result in run `run`: `result/<run>/<node>`.
#[must_use]
pub fn result_key(run: quorate_protocols::RunId, node: &str) -> String {
    format!("result/{run}/{node}")
}

/// Opens the JSONL trace at `path`, if any: the writer (to finish) and the sink (for the shells).
pub(crate) fn open_trace(
    path: Option<&std::path::Path>,
) -> Result<(Option<TraceWriter>, Option<crate::trace::TraceSink>), RunError> {
    match path {
        Some(path) => {
            let (w, s) = TraceWriter::create(path).map_err(|source| RunError::Trace {
                path: path.to_path_buf(),
                source,
            })?;
            Ok((Some(w), Some(s)))
        }
        None => Ok((None, None)),
    }
}

/// Waits until the trace is written; returns its number of lines (0 without a trace).
pub(crate) fn finish_trace(
    writer: Option<TraceWriter>,
    path: Option<&std::path::Path>,
) -> Result<u64, RunError> {
    match writer {
        Some(w) => w.finish().map_err(|source| RunError::Trace {
            path: path.map(std::path::Path::to_path_buf).unwrap_or_default(),
            source,
        }),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::{NodeSpec, PlanSpec};

    /// No worker is refused before anything runs, instead of quietly running with one.
    #[test]
    fn a_star_run_without_workers_is_refused() {
        let plan = PlanSpec {
            nodes: vec![NodeSpec::named("a")],
            ..PlanSpec::default()
        }
        .validate()
        .expect("valid plan");
        let options = RunOptions {
            supervisor: crate::SupervisorConfig {
                workers: 0,
                ..crate::SupervisorConfig::default()
            },
            ..RunOptions::default()
        };
        let out = run_star(plan, options, || {
            (AgentRegistry::new(), ToolRegistry::new())
        });
        assert!(
            matches!(out, Err(RunError::Config(crate::ConfigError::NoWorkers))),
            "{:?}",
            out.map(|o| o.report.stop_reason)
        );
    }
}
