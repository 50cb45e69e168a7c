//! A supervisor process that comes back: `quorate resume RUN --store STORE --nats URL
//! --remote-workers N` continues a run whose supervisor process (`quorate run PLAN --nats URL
//! --remote-workers N --store STORE`) was lost, with the worker processes still running.
//!
//! The kept run is the same as a run in one process (its record, its log, its results, through
//! the same [`Journal`](crate::durable::Journal)); its record also holds the ids of the
//! supervisor and of its workers ([`ProcessRecord`], written before any worker is welcomed). The
//! resumed supervisor takes them back: the workers' consumers accept envelopes from that
//! supervisor id only, and the log names each task's worker by position. The workers never
//! noticed the loss: they keep reading their consumers until the end of the run is announced.
//! The resumed supervisor opens the run's stream as it is (it does not make it anew), makes its
//! own consumer anew (so that what its predecessor read without acking comes again at once,
//! not after `ack_wait`), and welcomes the workers again (one that registered before the crash
//! but was not welcomed yet is waiting for that). What the stream still holds for it from
//! before the crash (replies its predecessor never read, or read without acking) reaches the
//! replayed core like any reply: to an attempt the resumed core dispatched anew it is late, a
//! copy of one it accepted is a duplicate, and it is refused by the same rules as in one
//! process.

use std::path::Path;
use std::time::Duration;

use quorate_protocols::AgentId;

use super::supervisor::{supervise, Nats, Stream};
use super::{ProcessError, RemoteArgs, RemoteRun};
use crate::durable::{ProcessRecord, RunRecord};
use crate::plan_file::PlanFile;
use crate::runner::RunArgs;

/// Test-only: the supervisor process stops reading replies when it has read this many (the
/// last one neither handed to the core nor acked), says so on stderr ([`HALTED`]) and waits
/// there to be killed: a test's SIGKILL then lands between a reply's receipt and its commit.
pub const HALT_AT_REPLY: &str = "QUORATE_HALT_AT_REPLY";

/// The start of the line [`HALT_AT_REPLY`] prints on stderr when it halts.
pub const HALTED: &str = "quorate: halted at reply";

/// How `resume` reaches the run's workers.
#[derive(Clone, Debug)]
pub struct ResumeRemote {
    /// `nats://HOST:PORT`.
    pub nats: String,
    /// `--remote-workers`: must be the number the run was started with.
    pub workers: usize,
    /// TLS and credentials (the resumed supervisor connects as the kept supervisor's agent).
    pub security: crate::security::Security,
    /// The etcd cluster the workers share (the run's `--store`, when it is one), whose leases
    /// the resumed supervisor watches (worker failover).
    pub store: Option<quorate_state::EtcdUrl>,
}

/// Continues the kept run `record` (its plan file `file`, parsed from the record's text, named
/// `path`) as a supervisor process: `args.durable` holds the log and results to resume from,
/// as for a run in one process. Refused before anything is sent if the run did not run over
/// NATS ([`ProcessError::NotAProcessRun`]) or `remote.workers` is not its number of workers
/// ([`ProcessError::WorkersMismatch`]).
pub fn resume_remote(
    path: &Path,
    file: &PlanFile,
    args: &RunArgs,
    record: &RunRecord,
    remote: &ResumeRemote,
) -> Result<RemoteRun, ProcessError> {
    let processes = check(record, remote.workers)?;
    let compiled = file
        .compile(path)
        .map_err(crate::runner::RunFileError::from)?;
    args.approve.check(&[(path, file)])?;
    let nats = Nats::connect(&remote.nats, &remote.security, processes.supervisor)?;
    eprintln!(
        "quorate: run {}: supervisor {} back, with its {} workers, on {}",
        record.run_id,
        processes.supervisor,
        processes.workers.len(),
        remote.nats
    );
    supervise(
        &nats,
        compiled,
        file,
        args,
        record.run_id,
        processes.supervisor,
        processes.workers.clone(),
        processes.roles.clone(),
        Stream::Kept,
        remote.store.as_ref(),
    )
}

/// The ids `record` keeps for a resume with `workers` workers.
///
/// # Errors
/// [`ProcessError::NotAProcessRun`], [`ProcessError::WorkersMismatch`].
pub fn check(record: &RunRecord, workers: usize) -> Result<&ProcessRecord, ProcessError> {
    let processes = record
        .processes
        .as_ref()
        .ok_or(ProcessError::NotAProcessRun { run: record.run_id })?;
    if processes.workers.len() != workers {
        return Err(ProcessError::WorkersMismatch {
            run: record.run_id,
            kept: processes.workers.len(),
            given: workers,
        });
    }
    Ok(processes)
}

/// Sets the supervisor's and the workers' ids in `record` and writes it to the kept run's
/// store (`args.durable`, if any).
pub(super) fn keep_processes(
    args: &RunArgs,
    record: &mut RunRecord,
    supervisor: AgentId,
    workers: &[AgentId],
    roles: &[Vec<String>],
) -> Result<(), ProcessError> {
    // Only a worker given --roles makes the record carry them (older records read as before).
    let roles = if roles.iter().all(Vec::is_empty) {
        Vec::new()
    } else {
        roles.to_vec()
    };
    record.processes = Some(ProcessRecord {
        supervisor,
        workers: workers.to_vec(),
        roles,
    });
    if let Some(d) = &args.durable {
        d.store.put_run(record)?;
    }
    Ok(())
}

/// [`run_remote`](super::run_remote) of a run kept in a store (`args.durable`, whose record is
/// `record`): the ids of the supervisor and of the workers that registered are set in `record`
/// and written to the store before any worker is welcomed, so that [`resume_remote`] can bring
/// the supervisor back.
pub fn run_remote_kept(
    path: &Path,
    file: &PlanFile,
    args: &RunArgs,
    remote: &RemoteArgs,
    record: &mut RunRecord,
) -> Result<RemoteRun, ProcessError> {
    super::supervisor::start(path, file, args, remote, Some(record))
}

/// [`HALT_AT_REPLY`], if set to a count.
pub(super) fn halt_at_reply() -> Option<u64> {
    std::env::var(HALT_AT_REPLY).ok()?.parse().ok()
}

/// Test-only ([`HALT_AT_REPLY`]): says so, then never returns.
pub(super) async fn halt(read: u64) {
    eprintln!("{HALTED} {read} (test hook {HALT_AT_REPLY})");
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::{IdSource, RunId};

    fn record(processes: Option<ProcessRecord>) -> RunRecord {
        RunRecord {
            run_id: RunId::from_u128(1),
            plan_path: "plan.toml".into(),
            plan_text: String::new(),
            started_unix_ms: 0,
            approvals: Vec::new(),
            top_ups: Vec::new(),
            report: None,
            exit_code: None,
            processes,
        }
    }

    #[test]
    fn a_resume_takes_back_the_kept_ids_with_as_many_workers() {
        let mut ids = IdSource::seeded(3);
        let kept = ProcessRecord {
            supervisor: ids.agent_id(),
            workers: vec![ids.agent_id(), ids.agent_id()],
            roles: vec![vec!["alpha".into()], Vec::new()],
        };
        let r = record(Some(kept.clone()));
        assert_eq!(check(&r, 2).expect("two workers"), &kept);
        assert!(matches!(
            check(&r, 3),
            Err(ProcessError::WorkersMismatch {
                kept: 2,
                given: 3,
                ..
            })
        ));
        assert!(matches!(
            check(&record(None), 2),
            Err(ProcessError::NotAProcessRun { .. })
        ));
    }

    #[test]
    fn a_record_without_processes_reads_as_before() {
        // A record written before the field existed (or by a run in one process) has none.
        let mut value = serde_json::to_value(record(None)).expect("encodes");
        assert!(value.get("processes").is_none());
        value.as_object_mut().expect("object").remove("processes");
        let back: RunRecord = serde_json::from_value(value).expect("decodes");
        assert_eq!(back.processes, None);
    }

    #[test]
    fn the_record_keeps_the_workers_roles() {
        let mut ids = IdSource::seeded(4);
        let kept = ProcessRecord {
            supervisor: ids.agent_id(),
            workers: vec![ids.agent_id(), ids.agent_id()],
            roles: vec![vec!["alpha".into()], vec!["beta".into(), "gamma".into()]],
        };
        let value = serde_json::to_value(record(Some(kept.clone()))).expect("encodes");
        let back: RunRecord = serde_json::from_value(value.clone()).expect("decodes");
        assert_eq!(back.processes.as_ref(), Some(&kept));
        // A record written before roles existed: every worker serves every role.
        let mut old = value;
        old["processes"]
            .as_object_mut()
            .expect("object")
            .remove("roles");
        let back: RunRecord = serde_json::from_value(old).expect("decodes");
        assert!(back.processes.expect("kept").roles.is_empty());
    }
}
