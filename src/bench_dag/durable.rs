//! `bench dag --store STORE`: the durable runs, each kept in a fresh redb file or on an etcd
//! cluster, and their figures; on etcd, the raw CAS rate of the same cluster beside them.

use std::time::Instant;

use serde::Serialize;

use super::DagArgs;
use crate::durable::{RunStore, StoreAt};

/// `bench dag --store STORE`: each measured run of the DAG in memory is followed by a run of
/// the same DAG kept at STORE (as `quorate run --store` keeps a run): in a fresh redb file, or
/// on an etcd cluster (then followed by the cluster's raw CAS rate, [`RawCas`]).
#[derive(Clone, Debug, Serialize)]
pub struct DurableBench {
    /// The store (a file, or an etcd URL).
    pub store: String,
    /// Tasks per second of the median durable run.
    pub tasks_per_s: f64,
    /// Tasks per second of every durable run, in order.
    pub tasks_per_s_runs: Vec<f64>,
    /// Durable tasks/s over in-memory tasks/s, each the median of its runs.
    pub ratio_to_memory: f64,
    /// Records the median durable run wrote (events, results, intents, effects) per task.
    pub writes_per_task: f64,
    /// Durable commits of the median durable run (redb commits, or etcd transactions) per task.
    pub commits_per_task: f64,
    /// A file: its size after the median durable run divided by the tasks, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_task: Option<f64>,
    /// A file: its size after the median durable run, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_bytes: Option<u64>,
    /// etcd: the raw CAS rate of the cluster, measured in the same process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawCas>,
}

/// The raw CAS rate of an etcd cluster (one etcd transaction per CAS, or 100 per transaction),
/// the median of one measure per run, and the durable path against it.
#[derive(Clone, Debug, Serialize)]
pub struct RawCas {
    /// Sequential creates, each awaited before the next: CAS per second.
    pub sequential_cas_per_s: f64,
    /// Creates from [`CONCURRENT`] tasks at once, each awaiting its own in turn: CAS per second.
    pub concurrent_cas_per_s: f64,
    /// Creates in batches of 100 per transaction (`EtcdStore::cas_all`): writes per second.
    pub batched_writes_per_s: f64,
    /// Durable tasks/s over sequential CAS/s (the goal: at least 0.5).
    pub tasks_ratio_to_sequential: f64,
    /// The durable path's writes/s (tasks/s x writes per task) over batched writes/s.
    pub writes_ratio_to_batched: f64,
}

/// Refuses a `--store` path that exists: the bench removes and creates its file for every run,
/// and does not remove a file it did not make. An etcd store is not checked here (each run
/// writes under its own run id).
pub fn check_store(store: &StoreAt) -> Result<(), String> {
    match store {
        StoreAt::File(path) if path.exists() => Err(format!(
            "{}: exists; bench dag --store needs a path it can create (and remove between runs)",
            path.display()
        )),
        _ => Ok(()),
    }
}

/// One durable run's figures: wall time in seconds, records written, durable commits.
pub(super) struct DurableRun {
    pub(super) elapsed_s: f64,
    pub(super) writes: u64,
    pub(super) commits: u64,
}

/// One run of the DAG kept on `kept` (a new file, or the cluster), through the journal
/// `quorate run --store` uses ([`crate::durable::Journal`]); its wall time (from the store
/// opened to the report, a file closed after it).
pub(super) fn run_durable(
    plan: quorate_protocols::Plan,
    args: DagArgs,
    kept: RunStore,
    start: Instant,
) -> Result<DurableRun, String> {
    let run = quorate_workers::edge::random_ids().run_id();
    let journal = std::sync::Arc::new(kept.journal(run));
    let durable = quorate_coordinator::Durable {
        run,
        journal: journal.clone(),
        actions: journal.clone(),
        restored_actions: std::sync::Arc::new(Vec::new()),
        resume: None,
    };
    drop(kept);
    super::run_with(plan, args, Some(durable))?;
    // Every handle of the run went with it: a file is closed, its last commit on disk.
    Ok(DurableRun {
        elapsed_s: start.elapsed().as_secs_f64(),
        writes: journal.writes(),
        commits: journal.commits(),
    })
}

/// Tasks that make creates at once in the concurrent raw measure ([`RawCas::concurrent_cas_per_s`]).
pub const CONCURRENT: usize = 16;

/// One measure of a cluster's raw CAS rate.
#[derive(Clone, Copy, Debug)]
pub(super) struct RawRates {
    pub(super) sequential: f64,
    pub(super) concurrent: f64,
    pub(super) batched: f64,
}

/// The raw CAS rate of the cluster at `store`: 300 sequential creates, [`CONCURRENT`] tasks of
/// 50 creates each, and 20 batches of 100 creates (one transaction each).
#[cfg(feature = "etcd")]
pub(super) fn raw_cas(
    store: &StoreAt,
    security: &crate::security::Security,
) -> Result<RawRates, String> {
    const SEQUENTIAL: usize = 300;
    const EACH: usize = 50;
    const BATCHES: usize = 20;
    let StoreAt::Etcd(url) = store else {
        return Err("the raw CAS rate is measured on etcd only".into());
    };
    let etcd = crate::durable::connect_etcd(url, security).map_err(|e| e.to_string())?;
    let raw: quorate_state::EtcdStore<u64> = etcd.store("bench-raw");
    let id = quorate_workers::edge::random_ids().run_id();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        use quorate_state::Store;
        let start = Instant::now();
        for i in 0..SEQUENTIAL {
            let done = raw.cas(&format!("{id}/s{i}"), None, i as u64).await;
            if !done.map_err(|e| e.to_string())?.is_committed() {
                return Err(format!("raw CAS {i} found its fresh key taken"));
            }
        }
        let sequential = SEQUENTIAL as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..CONCURRENT {
            let raw = raw.clone();
            tasks.spawn(async move {
                for i in 0..EACH {
                    let done = raw.cas(&format!("{id}/c{t}/{i}"), None, i as u64).await;
                    if !done.map_err(|e| e.to_string())?.is_committed() {
                        return Err(format!("raw CAS {t}/{i} found its fresh key taken"));
                    }
                }
                Ok::<_, String>(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.map_err(|e| e.to_string())??;
        }
        let concurrent = (CONCURRENT * EACH) as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for b in 0..BATCHES {
            let writes = (0..100).map(|i| (format!("{id}/b{b}/{i}"), None, i));
            let done = raw.cas_all(writes).await.map_err(|e| e.to_string())?;
            if !done.iter().all(quorate_state::CasOutcome::is_committed) {
                return Err(format!("raw batch {b} found a fresh key taken"));
            }
        }
        let batched = (BATCHES * 100) as f64 / start.elapsed().as_secs_f64();
        Ok(RawRates {
            sequential,
            concurrent,
            batched,
        })
    })
}

/// Without the feature there is no etcd store to measure (`StoreAt` refuses etcd URLs).
#[cfg(not(feature = "etcd"))]
pub(super) fn raw_cas(
    _store: &StoreAt,
    _security: &crate::security::Security,
) -> Result<RawRates, String> {
    Err("this quorate was built without the cargo feature `etcd`".into())
}
