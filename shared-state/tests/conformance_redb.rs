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
