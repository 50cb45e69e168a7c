//! Running a plan's supervisor against workers it reaches through links made by the caller
//! (another process's workers over a network transport): the same supervisor core and actor as
//! [`run_star`](crate::run_star), with the workers' ids and links given instead of started here.

use std::sync::Arc;

use actix::prelude::*;
use quorate_protocols::{Plan, RunId, Sender};
use quorate_state::{MemoryStore, PackedLog};
use quorate_workers::ReportBatch;
use tokio::sync::oneshot;

use crate::run::{
    end_run_span, finish_trace, journaled, open_trace, replay, run_span, write_data, write_resumed,
};
use crate::{
    RunError, RunOptions, RunOutput, SupervisorActor, SupervisorCore, UnauthorizedDelivery,
    WorkerLink, WorkerLiveness,
};

/// Who takes part in a linked run: its id, the supervisor and the workers (in the order of the
/// links [`run_star_linked`]'s `link` returns).
#[derive(Clone, Debug)]
pub struct Participants {
    /// The run.
    pub run: RunId,
    /// The supervisor (role `Supervisor`).
    pub me: Sender,
    /// The workers (role `Worker`), in link order.
    pub workers: Vec<Sender>,
    /// The plan roles each worker serves, in link order (see
    /// [`SupervisorCore::set_worker_roles`]): an empty list, or a worker past the end, serves
    /// every role. More lists than workers is refused ([`RunError::WorkerRoles`]).
    pub roles: Vec<Vec<String>>,
}

/// Runs `plan`'s supervisor on a fresh actix system, its workers reached through the links
/// `link` makes (called once, inside the system, with the recipient the workers' replies must
/// be delivered to). Blocks until the run stops. `options.supervisor.workers` is set to the
/// number of workers given; `options.worker`, `chaos` and `worker_threads` are not used (the
/// workers run elsewhere, with their own settings).
///
/// With `options.durable` the supervisor's events and results go through its journal, and a
/// run given a log to resume from is replayed first, as [`run_star`](crate::run_star) does
/// (the run's id is `who.run`; its action journal is not used: the actions are the
/// workers'). A resumed run needs the same `who` as the run it continues (a `dispatched`
/// event names its worker by position, and the workers know the supervisor by its id).
pub fn run_star_linked(
    plan: Plan,
    options: RunOptions,
    who: Participants,
    link: impl FnOnce(Recipient<ReportBatch>) -> Vec<WorkerLink>,
) -> Result<RunOutput, RunError> {
    run_star_linked_to(plan, options, who, |to| link(to.replies))
}

/// Where a linked run's shell delivers what comes from outside the supervisor process.
#[derive(Clone, Debug)]
pub struct LinkedInputs {
    /// The workers' replies.
    pub replies: Recipient<ReportBatch>,
    /// The workers' leases expiring and coming back (see [`WorkerLiveness`]).
    pub liveness: Recipient<WorkerLiveness>,
    /// Replies the transport refused as unauthorized (see [`UnauthorizedDelivery`]).
    pub refused: Recipient<UnauthorizedDelivery>,
}

/// [`run_star_linked`], with `link` also given where the workers' liveness goes (a shell that
/// watches the workers' leases in the store of record sends [`WorkerLiveness`] there).
pub fn run_star_linked_to(
    plan: Plan,
    mut options: RunOptions,
    who: Participants,
    link: impl FnOnce(LinkedInputs) -> Vec<WorkerLink>,
) -> Result<RunOutput, RunError> {
    options.supervisor.workers = who.workers.len();
    options.supervisor.validate()?;
    let (writer, sink) = open_trace(options.trace.as_deref())?;
    let log = Arc::new(PackedLog::new());
    let results = Arc::new(MemoryStore::with_capacity(plan.len() + options.data.len()));
    write_data(&results, &options.data);
    let durable = options.durable.clone();
    write_resumed(&results, durable.as_ref());
    // A traced or kept run lists its plan's nodes in run-started (what a report page draws).
    let traced = options.trace.is_some() || durable.is_some();
    let system = System::new();
    let (log2, results2) = (log.clone(), results.clone());
    let tasks = plan.len();
    let report = system.block_on(async move {
        let mut ids = quorate_workers::edge::random_ids();
        let span = run_span(who.run, "star", tasks);
        let ctx = Context::<SupervisorActor>::new();
        let links = link(LinkedInputs {
            replies: ctx.address().recipient(),
            liveness: ctx.address().recipient(),
            refused: ctx.address().recipient(),
        });
        let mut core = SupervisorCore::new(
            who.run,
            plan,
            options.supervisor.clone(),
            who.me,
            who.workers,
            ids.fork(),
        );
        core.set_describe_plan(traced);
        for (worker, roles) in who.roles.into_iter().enumerate() {
            core.set_worker_roles(worker, roles)
                .map_err(RunError::WorkerRoles)?;
        }
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
        Ok::<_, RunError>((wait.await.ok(), span))
    });
    drop(system);
    let (report, span) = report?;
    let report = report.ok_or(RunError::NoReport)?;
    end_run_span(span, &report);
    crate::run_metrics::publish_report(&report);
    crate::run_metrics::publish_conflicts("results", results.conflicts());
    let trace_lines = finish_trace(writer, options.trace.as_deref())?;
    Ok(RunOutput {
        report,
        chaos: crate::chaos::ChaosCounts::default(),
        trace_lines,
        log,
        results,
    })
}
