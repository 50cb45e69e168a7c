//! Journal writes on etcd that outlive a lost member. A write that the cluster did not answer
//! (the leader died with it in flight: [`StoreError::Unavailable`], *outcome unknown*) is made
//! again, so that the run goes on once the surviving members have elected a new leader. Each
//! retry is safe against a first try that did commit:
//!
//! * a create (an intent, a result) compares `create_revision == 0`: a retry after a commit
//!   finds the key kept and writes nothing (the journal takes "exists" as done: first wins);
//! * the run's record is read again and written over its current version (the same record);
//! * a log append is the one write that is not idempotent by itself (its retry would take the
//!   next free number and add the entries twice). The journal knows where its entries go (one
//!   process drives a run, so the log's length is the number it learnt), reads what is there
//!   after a failure and appends only the entries that are missing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorate_protocols::RunId;
use quorate_state::{EtcdLog, RunLog, Seq, StoreError};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Tries of one journal write before the run gives up on the store (exit 8).
pub(super) const TRIES: u32 = 5;
/// Pause before a retry: long enough for a loopback cluster to elect a leader (about 0.1 s with
/// the test members' 100 ms election timeout), each try itself bounded by the request timeout.
pub(super) const PAUSE: Duration = Duration::from_millis(200);

/// Runs `attempt` (given its try number, from 0) until it succeeds, it fails with something
/// other than [`StoreError::Unavailable`], or [`TRIES`] have failed; counts retries in
/// `retried`.
pub(super) async fn retrying<F, Fut>(retried: &AtomicU64, mut attempt: F) -> Result<(), StoreError>
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    let mut n = 0;
    loop {
        match attempt(n).await {
            Err(StoreError::Unavailable { reason }) if n + 1 < TRIES => {
                eprintln!("quorate: the run's store did not answer ({reason}); trying again");
                retried.fetch_add(1, Ordering::SeqCst);
                n += 1;
                // The journal runs each write on a thread of its own (`block`): sleeping it
                // holds up nothing else.
                std::thread::sleep(PAUSE);
            }
            done => return done,
        }
    }
}

/// Where the next entry of one run's log goes, as far as this journal knows (`u64::MAX`:
/// not known yet, asked of the cluster before the first append).
#[derive(Debug)]
pub(super) struct Tail(AtomicU64);

impl Tail {
    pub(super) fn new() -> Self {
        Self(AtomicU64::new(u64::MAX))
    }

    /// Appends `entries` to `run`'s log in `log` at this tail; `retry`: an earlier try's outcome
    /// is unknown, so the entries already there (equal to ours, in order) are not written again.
    pub(super) async fn append<E>(
        &self,
        log: &EtcdLog<E>,
        run: RunId,
        entries: &[E],
        retry: bool,
    ) -> Result<(), StoreError>
    where
        E: Serialize + DeserializeOwned + Send + Sync,
    {
        let mut next = self.0.load(Ordering::SeqCst);
        if next == u64::MAX {
            next = log.len(run).await?;
            self.0.store(next, Ordering::SeqCst);
        }
        let mut kept = 0;
        if retry {
            let there = log.read(run, Seq(next), entries.len()).await?;
            for ((seq, found), ours) in there.iter().zip(entries) {
                if !same(found, ours) {
                    return Err(StoreError::Corrupt {
                        key: format!("{run}/{}", seq.0),
                        reason: "another process appended to this run's log".into(),
                    });
                }
                kept += 1;
            }
        }
        if kept < entries.len() {
            let seqs = log.append_all(run, &entries[kept..]).await?;
            if seqs.first().is_some_and(|s| s.0 != next + kept as u64) {
                return Err(StoreError::Corrupt {
                    key: format!("{run}/{}", next + kept as u64),
                    reason: "another process appended to this run's log".into(),
                });
            }
        }
        self.0.store(next + entries.len() as u64, Ordering::SeqCst);
        Ok(())
    }
}

/// Two entries are the same record (compared as JSON: the log's types need no `PartialEq`).
fn same<E: Serialize>(a: &E, b: &E) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
#[path = "../../../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;

#[cfg(test)]
mod tests {
    use quorate_protocols::IdSource;
    use quorate_state::Etcd;

    use super::etcd_cluster::EtcdCluster;
    use super::*;

    fn texts(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    /// A write whose answer was lost but which committed (made here by appending the same
    /// entries behind the journal's back), then retried: nothing is added twice; a retry of a
    /// write that committed only in part appends the rest; entries that are not the journal's
    /// own fail the write.
    #[test]
    fn a_retried_append_after_a_commit_adds_nothing_twice() {
        let Some(cluster) = EtcdCluster::start_in_memory(1) else {
            return;
        };
        let etcd = Etcd::connect_blocking(&cluster.url("tail")).expect("connects");
        let log = etcd.log::<String>("events");
        let run = IdSource::new(7, 0).run_id();
        let tail = Tail::new();
        let all = |log: &EtcdLog<String>| -> Vec<String> {
            super::super::block(log.read(run, Seq(0), usize::MAX))
                .expect("reads")
                .into_iter()
                .map(|(_, e)| e)
                .collect()
        };
        let append =
            |v: &[&str], retry: bool| super::super::block(tail.append(&log, run, &texts(v), retry));
        append(&["a", "b"], false).expect("appends");
        // Committed, answer lost: the retry finds both entries its own.
        super::super::block(log.append_all(run, &texts(&["c", "d"]))).expect("appends");
        append(&["c", "d"], true).expect("retried");
        assert_eq!(all(&log), texts(&["a", "b", "c", "d"]));
        append(&["e"], false).expect("appends");
        // Half of it there (an earlier transaction of a long batch): the rest is appended.
        super::super::block(log.append_all(run, &texts(&["f"]))).expect("appends");
        append(&["f", "g"], true).expect("retried");
        assert_eq!(all(&log), texts(&["a", "b", "c", "d", "e", "f", "g"]));
        // Not committed at all: appended by the retry.
        append(&["h"], true).expect("retried");
        assert_eq!(all(&log).len(), 8);
        // Someone else's entry where the journal's next one goes: the write fails.
        super::super::block(log.append_all(run, &texts(&["x"]))).expect("appends");
        let err = append(&["y"], true).expect_err("not this journal's entry");
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert_eq!(all(&log).len(), 9);
    }
}
