//! Crash test with real processes: a child process writes to a redb file and prints every write
//! it saw confirmed; the parent kills it (SIGKILL) at many points, each time reopening the file
//! and checking that it opens, that every confirmed write is there (under `Commit::Deferred`:
//! every write confirmed before a completed flush), that no value is half-written or foreign,
//! that the log is gap-free and in order, and that no version was handed out twice.
//!
//! One binary plays both parts (`harness = false`): with `CHILD_FILE` set, `main` is the child.
//!
//! The child runs `TASKS` tasks. Task `t` alone writes key `k<t>` (CAS, sometimes a delete),
//! appends to one run's log, and increments the shared key `counter` with CAS-retry. Before each
//! write it prints what it attempts (`TRY`, `TRYDEL`, `TRYLOG`), after it what was confirmed
//! (`CAS`, `DEL`, `LOG`, `CNT`), one flushed line each. Values are derived from
//! (generation, task, i), so the parent can tell a torn or mixed value from an attempted one.

mod model;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use model::{log_rec, rec, Line, Model, Rec, RUN, TASKS};
use quorate_state::{CasOutcome, Commit, DeleteOutcome, RedbDb, RedbOptions, RunLog, Store};

const CHILD_FILE: &str = "QUORATE_REDB_CRASH_FILE";
const CHILD_GEN: &str = "QUORATE_REDB_CRASH_GEN";
const CHILD_MODE: &str = "QUORATE_REDB_CRASH_MODE";

fn main() {
    if let Ok(file) = std::env::var(CHILD_FILE) {
        child(&file);
        return;
    }
    // 24 kill points on durable commits, 12 on deferred commits with flushes.
    let (durable, durable_writes) = crash_runs(Commit::Durable, 24);
    let (deferred, deferred_writes) = crash_runs(Commit::Deferred, 12);
    println!(
        "redb_crash: ok: {durable} kill points with durable commits ({durable_writes} confirmed \
         writes), {deferred} with deferred commits ({deferred_writes}); the file checked after \
         each"
    );
}

/// After how many confirmed lines child `k` is killed: spread over 3..=150.
fn kill_after(k: usize) -> usize {
    3 + (k * 67) % 148
}

/// Runs `kills` children one after another on one file, killing each, checking after each.
/// Returns the kills and the confirmed writes checked.
fn crash_runs(commit: Commit, kills: usize) -> (usize, usize) {
    let mut writes = 0;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crash.redb");
    let mut model = Model::new(commit == Commit::Deferred);
    for k in 0..kills {
        let generation = u32::try_from(k + 1).expect("few generations");
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .env(CHILD_FILE, &path)
            .env(CHILD_GEN, generation.to_string())
            .env(
                CHILD_MODE,
                if commit == Commit::Durable {
                    "durable"
                } else {
                    "deferred"
                },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = Vec::new();
        let mut confirmed = 0;
        let mut killed = false;
        for line in BufReader::new(stdout).lines() {
            let line = Line::parse(&line.expect("child output"));
            confirmed += usize::from(line.is_confirmation());
            lines.push(line);
            if !killed && confirmed >= kill_after(k) {
                // std's Child::kill sends SIGKILL on Unix. Lines already in the pipe were
                // confirmed before the kill: keep reading to the end.
                child.kill().expect("kill the child");
                killed = true;
            }
        }
        let status = child.wait().expect("wait for the child");
        assert!(
            killed,
            "child {generation} ended by itself ({status}) after {confirmed} confirmed writes"
        );
        let db = RedbDb::open(&path).unwrap_or_else(|e| {
            panic!("the file does not open after kill {generation}: {e}");
        });
        model.check(&db, generation, &lines);
        writes += confirmed;
    }
    (kills, writes)
}

/// The child: writes until killed.
fn child(file: &str) {
    let generation: u32 = std::env::var(CHILD_GEN)
        .expect("generation")
        .parse()
        .expect("generation is a number");
    let commit = match std::env::var(CHILD_MODE).as_deref() {
        Ok("deferred") => Commit::Deferred,
        _ => Commit::Durable,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let db = RedbDb::open_with(
        file,
        RedbOptions {
            commit,
            ..RedbOptions::default()
        },
    )
    .expect("child opens the file");
    rt.block_on(async move {
        let counters = db.store::<u64>("counter");
        if counters.get("counter").await.expect("read").is_none() {
            match counters.cas("counter", None, 0).await.expect("create") {
                CasOutcome::Committed(v) => say(&format!("CNT {} 0", v.raw())),
                other => panic!("nobody else creates the counter: {other:?}"),
            }
        }
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            tasks.push(tokio::spawn(writer(db.clone(), generation, task)));
        }
        if commit == Commit::Deferred {
            tasks.push(tokio::spawn(flusher(db.clone())));
        }
        for task in tasks {
            task.await.expect("child task panicked");
        }
    });
}

/// One line to the parent, flushed at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("write to the parent");
    out.flush().expect("flush to the parent");
}

async fn writer(db: RedbDb, generation: u32, task: u32) {
    let store = db.store::<Rec>("crash");
    let counters = db.store::<u64>("counter");
    let log = db.log::<Rec>("crash");
    let key = format!("k{task}");
    let mut current = store
        .get(&key)
        .await
        .expect("read own key")
        .map(|v| v.version);
    for i in 0u64.. {
        match current {
            Some(version) if i % 9 == 8 => {
                say(&format!("TRYDEL {key}"));
                match store.delete(&key, version).await.expect("delete") {
                    DeleteOutcome::Deleted => say(&format!("DEL {key}")),
                    other => panic!("only task {task} writes {key}: {other:?}"),
                }
                current = None;
            }
            _ => {
                say(&format!("TRY {key} {generation} {task} {i}"));
                match store
                    .cas(&key, current, rec(generation, task, i))
                    .await
                    .expect("cas")
                {
                    CasOutcome::Committed(v) => {
                        say(&format!("CAS {key} {} {generation} {task} {i}", v.raw()));
                        current = Some(v);
                    }
                    other => panic!("only task {task} writes {key}: {other:?}"),
                }
            }
        }
        say(&format!("TRYLOG {generation} {task} {i}"));
        let seq = log
            .append(RUN, log_rec(generation, task, i))
            .await
            .expect("append");
        say(&format!("LOG {} {generation} {task} {i}", seq.0));
        let mut cur = counters
            .get("counter")
            .await
            .expect("read")
            .expect("counter exists");
        loop {
            match counters
                .cas("counter", Some(cur.version), cur.value + 1)
                .await
                .expect("cas")
            {
                CasOutcome::Committed(v) => {
                    say(&format!("CNT {} {}", v.raw(), cur.value + 1));
                    break;
                }
                CasOutcome::Conflict { current } => cur = current.expect("never deleted"),
            }
        }
    }
}

async fn flusher(db: RedbDb) {
    for n in 0u64.. {
        say(&format!("FLUSHING {n}"));
        db.flush().await.expect("flush");
        say(&format!("FLUSHED {n}"));
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}
