//! The durable backend across closes and reopens of its file: what was written is there, the
//! version counter goes on, one file keeps its stores apart, and a second open is refused.

use std::path::Path;

use quorate_protocols::{RunId, Version};
use quorate_state::{
    CasOutcome, Commit, DeleteOutcome, FileOp, RedbDb, RedbOptions, RunLog, Seq, Store, StoreError,
    Versioned,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn committed<V: std::fmt::Debug>(outcome: CasOutcome<V>) -> Version {
    match outcome {
        CasOutcome::Committed(v) => v,
        other => panic!("expected a commit, got {other:?}"),
    }
}

fn open(path: &Path, commit: Commit) -> RedbDb {
    RedbDb::open_with(
        path,
        RedbOptions {
            commit,
            ..RedbOptions::default()
        },
    )
    .expect("open")
}

#[test]
fn values_versions_and_logs_survive_a_reopen_and_versions_are_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reopen.redb");
    let run = RunId::from_u128(1);
    let rt = rt();
    let (v1, v2) = rt.block_on(async {
        let db = open(&path, Commit::Durable);
        let store = db.store::<String>("s");
        let log = db.log::<String>("l");
        let v1 = committed(store.cas("a", None, "one".into()).await.unwrap());
        let v2 = committed(store.cas("b", None, "two".into()).await.unwrap());
        assert_eq!(store.delete("b", v2).await.unwrap(), DeleteOutcome::Deleted);
        assert_eq!(log.append(run, "first".into()).await.unwrap(), Seq(0));
        assert_eq!(log.append(run, "second".into()).await.unwrap(), Seq(1));
        (v1, v2)
    });
    rt.block_on(async {
        let db = open(&path, Commit::Durable);
        let store = db.store::<String>("s");
        let log = db.log::<String>("l");
        assert_eq!(
            store.get("a").await.unwrap(),
            Some(Versioned {
                value: "one".to_string(),
                version: v1
            })
        );
        assert_eq!(store.get("b").await.unwrap(), None, "the delete is kept");
        // Recreating the deleted key after a reopen must not hand out its old version (ABA).
        let v3 = committed(store.cas("b", None, "three".into()).await.unwrap());
        assert!(v3 != v1 && v3 != v2, "version reused after reopen: {v3:?}");
        assert!(!store
            .cas("b", Some(v2), "stale".into())
            .await
            .unwrap()
            .is_committed());
        assert_eq!(
            log.read(run, Seq(0), 10).await.unwrap(),
            vec![
                (Seq(0), "first".to_string()),
                (Seq(1), "second".to_string())
            ]
        );
        assert_eq!(log.append(run, "third".into()).await.unwrap(), Seq(2));
        assert_eq!(log.len(run).unwrap(), 3);
    });
}

#[test]
fn deferred_writes_are_durable_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deferred.redb");
    let run = RunId::from_u128(2);
    let rt = rt();
    let v = rt.block_on(async {
        let db = open(&path, Commit::Deferred);
        let store = db.store::<u64>("s");
        let v = committed(store.cas("k", None, 7).await.unwrap());
        let _ = db.log::<u64>("l").append(run, 8).await.unwrap();
        v
    });
    rt.block_on(async {
        let db = open(&path, Commit::Durable);
        let read = db.store::<u64>("s").get("k").await.unwrap().unwrap();
        assert_eq!((read.value, read.version), (7, v));
        assert_eq!(
            db.log::<u64>("l").read(run, Seq(0), 5).await.unwrap(),
            vec![(Seq(0), 8)]
        );
    });
}

#[test]
fn stores_and_logs_of_one_file_are_separate_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir.path().join("tables.redb"), Commit::Durable);
    rt().block_on(async {
        let results = db.store::<serde_json::Value>("results");
        let counters = db.store::<u64>("counters");
        let value = serde_json::json!({"answer": [1, 2.5, null, "x"], "nested": {"ok": true}});
        committed(results.cas("k", None, value.clone()).await.unwrap());
        committed(counters.cas("k", None, 3).await.unwrap());
        assert_eq!(results.get("k").await.unwrap().unwrap().value, value);
        assert_eq!(counters.get("k").await.unwrap().unwrap().value, 3);
        let run = RunId::from_u128(3);
        assert_eq!(db.log::<u64>("a").append(run, 1).await.unwrap(), Seq(0));
        assert_eq!(db.log::<u64>("b").append(run, 2).await.unwrap(), Seq(0));
        // A value of another type under the same table does not decode: a typed error, no panic.
        let wrong = db.store::<u64>("results");
        assert!(matches!(
            wrong.get("k").await,
            Err(StoreError::Corrupt { key, .. }) if key == "k"
        ));
    });
}

#[test]
fn a_second_open_of_an_open_file_is_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.redb");
    let _db = open(&path, Commit::Durable);
    match RedbDb::open(&path) {
        Err(StoreError::File {
            path: named,
            operation,
            ..
        }) => {
            assert_eq!(named, path);
            assert_eq!(operation, FileOp::Open);
        }
        other => panic!("expected a refused open, got {other:?}"),
    }
}

#[test]
fn a_file_that_is_not_a_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.redb");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    assert!(matches!(
        RedbDb::open(&path),
        Err(StoreError::File {
            operation: FileOp::Open,
            ..
        })
    ));
}
