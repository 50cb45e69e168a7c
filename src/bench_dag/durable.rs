//! `bench dag --store FILE`: the durable runs, each kept in a fresh redb file, and their
//! figures.

use std::time::Instant;

use serde::Serialize;

use super::DagArgs;

/// `bench dag --store FILE`: each measured run of the DAG in memory is followed by a run of the
/// same DAG kept in a fresh redb file at FILE (as `quorate run --store` keeps a run).
#[derive(Clone, Debug, Serialize)]
pub struct DurableBench {
    /// The file.
    pub store: String,
    /// Tasks per second of the median durable run.
    pub tasks_per_s: f64,
    /// Tasks per second of every durable run, in order.
    pub tasks_per_s_runs: Vec<f64>,
    /// Durable tasks/s over in-memory tasks/s, each the median of its runs.
    pub ratio_to_memory: f64,
    /// The file's size after the median durable run divided by the tasks, bytes.
    pub bytes_per_task: f64,
    /// The file's size after the median durable run, bytes.
    pub file_bytes: u64,
}

/// Refuses a `--store` path that exists: the bench removes and creates its file for every run,
/// and does not remove a file it did not make.
pub fn check_store(path: &std::path::Path) -> Result<(), String> {
    if path.exists() {
        return Err(format!(
            "{}: exists; bench dag --store needs a path it can create (and remove between runs)",
            path.display()
        ));
    }
    Ok(())
}

/// One run of the DAG kept in a new redb file at `path`, through the journal `quorate run
/// --store` uses ([`crate::durable::Journal`]); its wall time (file open to report, the file
/// closed after it) in seconds.
pub(super) fn run_durable(
    plan: quorate_protocols::Plan,
    args: DagArgs,
    path: &std::path::Path,
) -> Result<f64, String> {
    let start = Instant::now();
    let kept = crate::durable::RunStore::open(path).map_err(|e| e.to_string())?;
    let run = quorate_workers::edge::random_ids().run_id();
    let journal = std::sync::Arc::new(kept.journal(run));
    let durable = quorate_coordinator::Durable {
        run,
        journal: journal.clone(),
        actions: journal,
        restored_actions: std::sync::Arc::new(Vec::new()),
        resume: None,
    };
    drop(kept);
    super::run_with(plan, args, Some(durable))?;
    // Every handle went with the run: the file is closed, its last commit on disk.
    Ok(start.elapsed().as_secs_f64())
}
