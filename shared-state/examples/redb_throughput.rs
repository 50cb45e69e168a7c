//! CAS and log appends per second on a redb file, with durable commits (one writer, then
//! concurrent writers sharing commits) and with deferred commits and one flush at the end.
//!
//! `cargo run --release -p quorate-state --features redb --example redb_throughput [DIR]`
//! (DIR: where the scratch files go; default the system's temp dir). docs/durable.md has the
//! figures.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use quorate_protocols::RunId;
use quorate_state::{CasOutcome, Commit, RedbDb, RedbOptions, RunLog, Store};

/// What is measured.
#[derive(Clone, Copy)]
enum Op {
    Cas,
    Append,
}

/// Runs `writers` tasks doing `per_writer` ops each on a fresh file; returns ops per second,
/// counting a final flush under deferred commits.
async fn measure(dir: &Path, commit: Commit, op: Op, writers: usize, per_writer: usize) -> f64 {
    let path = dir.join(format!("throughput-{}.redb", scratch_name()));
    let db = RedbDb::open_with(
        &path,
        RedbOptions {
            commit,
            ..RedbOptions::default()
        },
    )
    .expect("open");
    let store = Arc::new(db.store::<u64>("bench"));
    let log = Arc::new(db.log::<u64>("bench"));
    let run = RunId::from_u128(1);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, log) = (store.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("k{w}");
            let mut version = None;
            for i in 0..per_writer as u64 {
                match op {
                    Op::Cas => match store.cas(&key, version, i).await.expect("cas") {
                        CasOutcome::Committed(v) => version = Some(v),
                        other => panic!("one writer per key: {other:?}"),
                    },
                    Op::Append => {
                        log.append(run, i).await.expect("append");
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    db.flush().await.expect("flush");
    let rate = (writers * per_writer) as f64 / start.elapsed().as_secs_f64();
    drop((store, log, db));
    std::fs::remove_file(&path).expect("remove scratch file");
    rate
}

fn scratch_name() -> String {
    format!("redb-throughput-{}", std::process::id())
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map_or_else(std::env::temp_dir, Into::into);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    println!("file in {}", dir.display());
    println!(
        "{:<8} {:<9} {:>7} {:>9} {:>10}",
        "op", "commit", "writers", "ops", "ops/s"
    );
    for (op, name) in [(Op::Cas, "cas"), (Op::Append, "append")] {
        for (commit, mode, writers, per_writer) in [
            (Commit::Durable, "durable", 1, 500),
            (Commit::Durable, "durable", 8, 250),
            (Commit::Durable, "durable", 64, 100),
            (Commit::Deferred, "deferred", 1, 20_000),
            (Commit::Deferred, "deferred", 8, 5_000),
        ] {
            let rate = rt.block_on(measure(&dir, commit, op, writers, per_writer));
            println!(
                "{name:<8} {mode:<9} {writers:>7} {:>9} {rate:>10.0}",
                writers * per_writer
            );
        }
    }
}
