//! The durable backend passes the conformance suite, in both commit modes.
//!
//! The suite checks semantics, not durability (tests/redb_crash.rs does that), so the file goes
//! to a memory file system where there is one: a durable commit's fsync there is free, and the
//! suite's contended counter (one commit per increment) runs in a second instead of fifteen.

use std::sync::atomic::{AtomicUsize, Ordering};

use quorate_state::{conformance, Commit, RedbDb, RedbOptions};

fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

fn suite(commit: Commit) {
    let dir = scratch_dir();
    let options = RedbOptions {
        commit,
        ..RedbOptions::default()
    };
    let db = RedbDb::open_with(dir.path().join("conformance.redb"), options).expect("open");
    // Every check gets a fresh table on the one file, as it would get a fresh store.
    let n = AtomicUsize::new(0);
    let name = || format!("t{}", n.fetch_add(1, Ordering::Relaxed));
    conformance::run_all(
        || db.store(&name()),
        || db.store(&name()),
        || db.log(&name()),
    );
}

#[test]
fn redb_backend_passes_the_conformance_suite() {
    suite(Commit::Durable);
}

#[test]
fn redb_backend_passes_the_conformance_suite_with_deferred_commits() {
    suite(Commit::Deferred);
}

/// `cas_all` and `append_all` queue their writes together: the outcomes are those of the same
/// writes made one after the other, in order.
#[test]
fn batched_writes_are_the_writes_in_order() {
    use quorate_protocols::RunId;
    use quorate_state::{CasOutcome, RunLog, Seq, Store};

    let dir = scratch_dir();
    let db = RedbDb::open(dir.path().join("batched.redb")).expect("open");
    let store = db.store::<u32>("kv").with_commit(Commit::Deferred);
    let log = db.log::<String>("log").with_commit(Commit::Deferred);
    let run = RunId::from_u128(3);
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(async {
            let out = store
                .cas_all([
                    ("a".to_string(), None, 1),
                    ("b".to_string(), None, 2),
                    // Sees the write before it: `a` exists now.
                    ("a".to_string(), None, 3),
                ])
                .await
                .expect("written");
            let CasOutcome::Committed(va) = out[0] else {
                panic!("{out:?}")
            };
            assert!(matches!(out[1], CasOutcome::Committed(vb) if vb.raw() > va.raw()));
            assert!(
                matches!(&out[2], CasOutcome::Conflict { current: Some(c) } if c.value == 1 && c.version == va)
            );
            log.append(run, "first".to_string()).await.expect("appended");
            let entries: Vec<String> = (0..300).map(|i| format!("e{i}")).collect();
            let seqs = log.append_all(run, &entries).await.expect("appended");
            assert_eq!(seqs, (1..=300).map(Seq).collect::<Vec<_>>());
            db.flush().await.expect("flushed");
            let read = log.read(run, Seq(1), usize::MAX).await.expect("read");
            assert_eq!(read.into_iter().map(|(_, e)| e).collect::<Vec<_>>(), entries);
            assert_eq!(store.get("b").await.expect("read").map(|v| v.value), Some(2));
        });
}
