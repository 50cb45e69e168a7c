//! Running a plan in peer mode on actix: `n` peers, each with its own worker, all-to-all links
//! (chaos links when asked), shared CAS stores for claims, terminal states and the budget.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use actix::prelude::*;
use quorate_protocols::{Budget, Plan, Role, RunId, Sender, TaskId, TaskState};
use quorate_workers::{AgentRegistry, ReportMsg, ToolRegistry, WorkerActor};
use tokio::sync::oneshot;

use super::actor::{PeerActor, PeerMsgEnvelope, PeerStores, PeerSummary};
use super::resume::rebuild;
use super::PeerCore;
use crate::chaos::Chaos;
use crate::run::{finish_trace, open_trace};
use crate::{
    BudgetRow, ChaosLink, MessageCounts, RunError, RunOptions, RunOutput, RunReport, StopReason,
    TaskRow,
};

/// Runs `plan` in peer mode: `options.supervisor.workers` peers (at least one:
/// [`RunError::NoPeers`] otherwise; one peer runs every task itself), each with one worker
/// built from `parts()` (called once per peer), on a fresh actix system. Deadline, approval
/// policy and `cancel_after_steps` (per peer) come from `options.supervisor`; chaos applies to
/// every peer -> peer link. Blocks until every peer is done.
///
/// Store preconditions (`key-exists`, `key-absent`, `key-at-version`) are checked by every peer
/// against the shared result store when a task is about to become ready, and `options.data` is
/// written there first, as in star mode. A failed one switches the run to `options.fallback`
/// (once), the peers agreeing on the plan version by CAS on `plan/<run>`. Not in peer mode
/// (yet): `options.worker_threads` is ignored.
pub fn run_peer(
    plan: Plan,
    options: RunOptions,
    parts: impl Fn() -> (AgentRegistry, ToolRegistry),
) -> Result<RunOutput, RunError> {
    let count = options.supervisor.workers;
    if count == 0 {
        return Err(RunError::NoPeers);
    }
    let (writer, sink) = open_trace(options.trace.as_deref())?;
    let stores = PeerStores::new();
    crate::run::write_data(&stores.results, &options.data);
    let chaos = options
        .chaos
        .map(|c| Arc::new(Mutex::new(Chaos::new(c, options.seed))));
    // The run's ids are random (the shell seeds them from the operating system); each peer's
    // core draws from a source forked from this one.
    let mut ids = quorate_workers::edge::random_ids();
    let durable = options.durable.clone();
    let run = durable.as_ref().map_or_else(|| ids.run_id(), |d| d.run);
    // A resumed run: rebuilt from its log and kept records, which fill the shared stores.
    let resumed = match durable.as_ref().and_then(|d| d.resume.as_ref()) {
        Some(from) => {
            let fallback = options.fallback.clone();
            let rebuilt = rebuild(run, plan.clone(), fallback, count, from, || ids.task_id())?;
            stores.restore(run, &rebuilt, &from.results);
            Some(rebuilt)
        }
        None => {
            PeerCore::open_root(&plan, &stores.budget, &PeerStores::budget_key(run));
            None
        }
    };
    let task_ids: Vec<TaskId> = match &resumed {
        Some(r) => r.tasks.clone(),
        None => (0..plan.len()).map(|_| ids.task_id()).collect(),
    };
    // A traced or kept run lists its plan's nodes in run-started (what a report page draws).
    let traced = options.trace.is_some() || durable.is_some();
    let run_span = crate::run::run_span(run, "peer", plan.len());
    let system = System::new();
    let run_span2 = run_span.clone();
    let (stores2, chaos2, plan2, ids2) = (
        stores.clone(),
        chaos.clone(),
        plan.clone(),
        task_ids.clone(),
    );
    let summaries = system.block_on(async move {
        let peers: Vec<Sender> = (0..count)
            .map(|_| Sender {
                agent: ids.agent_id(),
                role: Role::Peer,
            })
            .collect();
        let contexts: Vec<Context<PeerActor>> = (0..count).map(|_| Context::new()).collect();
        let addrs: Vec<Addr<PeerActor>> = contexts.iter().map(Context::address).collect();
        let started = Instant::now();
        let mut waits = Vec::with_capacity(count);
        for (i, ctx) in contexts.into_iter().enumerate() {
            let others = addrs
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, a)| -> Recipient<PeerMsgEnvelope> {
                    match &chaos2 {
                        Some(c) => ChaosLink::new(a.clone().recipient(), c.clone())
                            .start()
                            .recipient(),
                        None => a.clone().recipient(),
                    }
                })
                .collect();
            let (agents, tools) = parts();
            let worker_id = ids.agent_id();
            let reports: Recipient<ReportMsg> = addrs[i].clone().recipient();
            let worker =
                WorkerActor::new(worker_id, options.worker.clone(), agents, tools, reports)
                    .with_store(stores2.results.clone())
                    .with_run_span(run_span2.clone());
            let worker = match &durable {
                Some(d) => worker.with_journal(d.actions.clone(), &d.restored_actions),
                None => worker,
            }
            .start();
            let worker_sender = Sender {
                agent: worker_id,
                role: Role::Worker,
            };
            let config = options.supervisor.clone();
            let mut core = match &resumed {
                Some(from) => PeerCore::resume(
                    run,
                    from,
                    config,
                    i,
                    peers.clone(),
                    worker_sender,
                    ids.fork(),
                ),
                None => PeerCore::new(
                    run,
                    plan2.clone(),
                    config,
                    i,
                    peers.clone(),
                    worker_sender,
                    ids2.clone(),
                    ids.fork(),
                ),
            };
            core.set_describe_plan(traced);
            if core.plan_version() == 1 {
                // (A run that switched already has no fallback left, and its plan numbers
                // the nodes otherwise.)
                if let Some(fallback) = &options.fallback {
                    core.set_fallback_plan(fallback.clone());
                }
                for (node, texts) in &options.evidence_text {
                    core.set_evidence_text(*node, texts.clone());
                }
            }
            let (done, wait) = oneshot::channel();
            waits.push(wait);
            let actor = PeerActor::new(
                core,
                others,
                worker.clone().recipient(),
                worker.recipient(),
                stores2.clone(),
                sink.clone(),
                started,
                done,
            );
            ctx.run(match &durable {
                Some(d) => actor.with_journal(d.journal.clone()),
                None => actor,
            });
        }
        drop(sink);
        let mut out = Vec::with_capacity(count);
        for wait in waits {
            out.push(wait.await.ok()?);
        }
        Some(out)
    });
    drop(system);
    let summaries = summaries.ok_or(RunError::NoReport)?;
    let trace_lines = finish_trace(writer, options.trace.as_deref())?;
    let chaos = chaos
        .map(|c| ChaosLink::<ReportMsg>::counts(&c))
        .unwrap_or_default();
    let report = build_report(run, &stores, &summaries);
    crate::run::end_run_span(run_span, &report);
    crate::run_metrics::publish_report(&report);
    for (store, conflicts) in [
        ("results", stores.results.conflicts()),
        ("claims", stores.claims.conflicts()),
        ("states", stores.states.conflicts()),
        ("budget", stores.budget.conflicts()),
    ] {
        crate::run_metrics::publish_conflicts(store, conflicts);
    }
    Ok(RunOutput {
        report,
        chaos,
        trace_lines,
        log: stores.log,
        results: stores.results,
    })
}

/// The star's report shape, from the committed records of the plan the peers ended on, the
/// shared root account and every peer's counters (summed).
fn build_report(run: RunId, stores: &PeerStores, peers: &[PeerSummary]) -> RunReport {
    let reason: Option<StopReason> = peers.first().map(|p| p.reason.clone());
    debug_assert!(peers.iter().all(|p| Some(&p.reason) == reason.as_ref()));
    let (plan, plan_version) = &peers.first().expect("at least one peer").plan;
    let mut granted_total = Budget::ZERO;
    let tasks = (0..plan.len() as u32)
        .map(|i| {
            let id = plan.node(i).id.clone();
            let state = stores
                .states
                .get_now(&PeerStores::state_key(run, id.as_str()))
                .map_or(TaskState::Pending, |v| v.value.state);
            let (attempts, granted, spent) = peers
                .iter()
                .find_map(|p| p.executions[i as usize])
                .unwrap_or((0, Budget::ZERO, Budget::ZERO));
            granted_total = granted_total.saturating_add(&granted);
            let result = stores
                .results
                .get_now(&crate::run::result_key(run, id.as_str()))
                .filter(|_| state == TaskState::Completed)
                .map(|v| v.value);
            TaskRow {
                id,
                state,
                attempts,
                granted,
                spent,
                result,
                top_up: None,
            }
        })
        .collect();
    let root = stores
        .budget
        .get_now(&PeerStores::budget_key(run))
        .map(|v| v.value)
        .expect("the root account was opened");
    let mut messages = MessageCounts::default();
    let mut actions = quorate_protocols::wire::ActionCounts::default();
    for p in peers {
        messages += p.messages;
        actions += p.actions;
    }
    RunReport {
        run_id: run,
        stop_reason: reason.as_ref().map(|s| s.name().to_string()),
        stop_detail: reason.as_ref().map(ToString::to_string),
        plan_version: *plan_version,
        tasks,
        budget: BudgetRow {
            limit: root.limit,
            reserve: root.reserve,
            granted: granted_total,
            spent: root.spent().unwrap_or(root.limit),
            returned: root.returned,
        },
        messages,
        actions,
        stop: reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::{NodeSpec, PlanSpec};

    #[test]
    fn no_peers_is_refused_before_anything_runs() {
        let spec = PlanSpec {
            budget: Budget::steps(10),
            nodes: vec![NodeSpec::named("a").with_budget(Budget::steps(2))],
            ..PlanSpec::default()
        };
        let plan = spec.validate().expect("plan");
        let mut options = RunOptions::default();
        options.supervisor.workers = 0;
        let out = run_peer(plan, options, Default::default);
        assert!(matches!(out, Err(RunError::NoPeers)), "{:?}", out.err());
    }
}
