//! Worker failover with real processes on loopback (cargo features `etcd` and `nats`): a
//! `quorate run --nats ... --remote-workers 3 --store etcd://...` supervisor and three `quorate
//! worker --store etcd://...` processes, with an etcd member and a nats-server spawned here.
//! The scripted world and the tasks' action books live on etcd, so the effects are read back from
//! there: every action has exactly one effect across the processes, whether a worker was killed
//! mid-task (SIGKILL) or paused past its lease and resumed (SIGSTOP, SIGCONT).
//!
//! The plan (tests/plans/worker_failover.toml) gives `ship`'s first call a 2.5 s answer after
//! its effect commits: the test waits for that effect in etcd, then stops the worker that
//! committed it, so the loss always falls between the commit and the answer.

#[path = "../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use etcd_cluster::EtcdCluster;
use quorate::process::failover::{newest_book, StoredEffect};
use quorate::state::{Etcd, EtcdUrl, Store};
use quorate::workers::StoredBook;
use quorate_nats::server::NatsServer;
use support::Running;

const PLAN: &str = "tests/plans/worker_failover.toml";
/// The effects the plan commits, by tool (each of its five actions once).
const TOOLS: [&str; 5] = [
    "audit.log",
    "audit.log",
    "db.reserve",
    "db.ship",
    "mail.send",
];
const LEASE_MS: &str = "1000";

fn quorate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorate"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    // Plain connections to the test's own loopback servers (tests/processes_rogue.rs runs
    // them with TLS and users).
    c.env("QUORATE_ALLOW_PLAINTEXT", "1");
    c
}

/// The services and the three workers' ids of one run.
struct Setup {
    _cluster: EtcdCluster,
    _nats: NatsServer,
    nats: String,
    store: EtcdUrl,
    etcd: Etcd,
    rt: tokio::runtime::Runtime,
    run: String,
    ids: Vec<String>,
}

impl Setup {
    /// `None` (the test is skipped, with a message) when etcd or nats-server is missing.
    fn start(run: &str) -> Option<Self> {
        let cluster = EtcdCluster::start_in_memory(1)?;
        let nats = NatsServer::start_or_skip()?;
        let store = cluster.url("failover");
        let etcd = Etcd::connect_blocking(&store).expect("etcd client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let ids = (1..=3)
            .map(|i| format!("0192f4d3-7a1e-7c3b-9f00-00000000000{i}"))
            .collect();
        Some(Self {
            nats: nats.url(),
            _cluster: cluster,
            _nats: nats,
            store,
            etcd,
            rt,
            run: run.to_owned(),
            ids,
        })
    }

    fn worker(&self, id: &str) -> Running {
        let child = quorate()
            .args([
                "worker", "--nats", &self.nats, "--run", &self.run, "--plan", PLAN,
            ])
            .args(["--id", id, "--wait-ms", "20000", "--lease-ms", LEASE_MS])
            .args(["--store", &self.store.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("worker starts");
        Running(Some(child))
    }

    fn supervisor(&self) -> Running {
        let child = quorate()
            .args(["run", PLAN, "--json", "--nats", &self.nats])
            .args([
                "--remote-workers",
                "3",
                "--run",
                &self.run,
                "--wait-ms",
                "20000",
            ])
            .args(["--store", &self.store.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("supervisor starts");
        Running(Some(child))
    }

    /// Every effect of the run in etcd, by key.
    fn effects(&self) -> Vec<(String, StoredEffect)> {
        let world = self.etcd.store::<StoredEffect>("world");
        let found = self
            .rt
            .block_on(world.scan(&format!("{}/", self.run)))
            .expect("scan");
        found.into_iter().map(|(k, v)| (k, v.value)).collect()
    }

    /// The effect of `tool`, once it is in etcd (waits up to 20 s).
    fn wait_for_effect(&self, tool: &str) -> StoredEffect {
        let started = Instant::now();
        loop {
            if let Some((_, e)) = self
                .effects()
                .into_iter()
                .find(|(_, e)| e.effect.tool == tool)
            {
                return e;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "no {tool} effect"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The book of `ship` (the task of `effect`), once an attempt of at least `owner` owns it
    /// (waits up to 20 s).
    fn wait_for_owner(&self, effect: &StoredEffect, owner: u32) -> StoredBook {
        let books = self.etcd.store::<StoredBook>("book");
        let run = quorate::process::parse_id(&self.run).expect("a run id");
        let task = effect.effect.action.task;
        let started = Instant::now();
        loop {
            let book = self
                .rt
                .block_on(newest_book(&books, run, task))
                .expect("scan");
            if let Some((key, book)) = book.filter(|(_, b)| b.value.owner >= owner) {
                // Each worker writes its own books only: the new owner's is under its id.
                let writer = key.split('/').next().unwrap_or_default();
                assert!(self.ids.iter().any(|id| id == writer), "{key}");
                assert_ne!(writer, effect.by.to_string(), "{key}");
                return book.value;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "not taken over"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Checks that each of the plan's actions has exactly one effect in etcd (no duplicate
    /// written beside it); the effects by worker id.
    fn assert_exactly_once(&self) -> Vec<String> {
        let effects = self.effects();
        let again: Vec<&String> = effects
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.contains("/again/"))
            .collect();
        assert!(again.is_empty(), "duplicate effects: {again:?}");
        let mut tools: Vec<&str> = effects
            .iter()
            .map(|(_, e)| e.effect.tool.as_str())
            .collect();
        tools.sort_unstable();
        assert_eq!(tools, TOOLS, "{effects:?}");
        let mut actions: Vec<_> = effects.iter().map(|(_, e)| e.effect.action).collect();
        actions.sort();
        actions.dedup();
        assert_eq!(actions.len(), TOOLS.len());
        effects.into_iter().map(|(_, e)| e.by.to_string()).collect()
    }
}

/// Waits for `child` at most `limit`; its output (killed and failed if it did not exit).
fn finish(running: Running, limit: Duration) -> Output {
    let mut child = running.take();
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("a process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The supervisor's report, after checking it completed (exit 0).
fn report(out: &Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "supervisor: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["stop_reason"], "completed", "{report}");
    report
}

/// A task's attempts in the report.
fn attempts(report: &serde_json::Value, id: &str) -> u64 {
    let tasks = report["tasks"].as_array().expect("tasks");
    let task = tasks.iter().find(|t| t["id"] == id).expect("the task");
    task["attempts"].as_u64().expect("attempts")
}

#[test]
fn three_worker_processes_on_etcd_commit_every_effect_once() {
    let Some(s) = Setup::start("0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a01") else {
        return;
    };
    let workers: Vec<Running> = s.ids.iter().map(|id| s.worker(id)).collect();
    let report = report(&finish(s.supervisor(), Duration::from_secs(60)));
    assert_eq!(attempts(&report, "ship"), 1);
    let mut fenced = 0;
    for w in workers {
        let out = finish(w, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "worker: {text}");
        fenced += u64::from(!text.contains("fenced off 0 times"));
    }
    assert_eq!(fenced, 0);
    let by = s.assert_exactly_once();
    let mut distinct = by.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() >= 2,
        "the effects came from one worker: {by:?}"
    );
    assert!(by.iter().all(|w| s.ids.contains(w)), "{by:?}");
}

#[test]
fn a_worker_killed_after_its_effect_committed_is_taken_over_with_one_effect() {
    let Some(s) = Setup::start("0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a02") else {
        return;
    };
    let mut workers: Vec<Option<Running>> = s.ids.iter().map(|id| Some(s.worker(id))).collect();
    let supervisor = s.supervisor();
    let reserved = s.wait_for_effect("db.reserve");
    let lost = s
        .ids
        .iter()
        .position(|id| *id == reserved.by.to_string())
        .expect("a worker of the run committed it");
    let mut victim = workers[lost].take().expect("running").take();
    victim.kill().expect("SIGKILL");
    let killed = Instant::now();
    let _ = victim.wait();
    let book = s.wait_for_owner(&reserved, 2);
    let took_over = killed.elapsed();
    let out = finish(supervisor, Duration::from_secs(60));
    let ended = killed.elapsed();
    let report = report(&out);
    eprintln!(
        "measured: SIGKILL -> book claimed by attempt {}: {} ms; SIGKILL -> run completed: {} ms (lease {LEASE_MS} ms)",
        book.owner,
        took_over.as_millis(),
        ended.as_millis()
    );
    // The lease, not the attempt timeout (30 s), moved the task.
    assert!(took_over < Duration::from_secs(10), "{took_over:?}");
    assert_eq!(attempts(&report, "ship"), 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lease expired"), "{stderr}");
    for w in workers.into_iter().flatten() {
        let out = finish(w, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(0));
    }
    let by = s.assert_exactly_once();
    // The reservation stays the killed worker's (the new attempt queried it, did not redo it);
    // the rest of `ship` ran elsewhere.
    let shipped = s.wait_for_effect("db.ship");
    assert_eq!(reserved, s.wait_for_effect("db.reserve"));
    assert_ne!(shipped.by, reserved.by);
    assert!(by.contains(&s.ids[lost]), "{by:?}");
}

#[test]
fn a_worker_paused_past_its_lease_is_fenced_and_its_late_replies_refused() {
    let Some(s) = Setup::start("0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a03") else {
        return;
    };
    let workers: Vec<Running> = s.ids.iter().map(|id| s.worker(id)).collect();
    let supervisor = s.supervisor();
    let reserved = s.wait_for_effect("db.reserve");
    let paused = s
        .ids
        .iter()
        .position(|id| *id == reserved.by.to_string())
        .expect("a worker of the run committed it");
    workers[paused].signal("STOP");
    let stopped = Instant::now();
    let book = s.wait_for_owner(&reserved, 2);
    eprintln!(
        "measured: SIGSTOP -> book claimed by attempt {}: {} ms (lease {LEASE_MS} ms)",
        book.owner,
        stopped.elapsed().as_millis()
    );
    workers[paused].signal("CONT");
    let out = finish(supervisor, Duration::from_secs(60));
    let report = report(&out);
    assert_eq!(attempts(&report, "ship"), 2);
    let messages = &report["messages"];
    let refused =
        messages["rejected_late"].as_u64().unwrap() + messages["rejected_stale"].as_u64().unwrap();
    assert!(refused >= 1, "no late reply refused: {messages}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("holds a lease again"), "{stderr}");
    for (i, w) in workers.into_iter().enumerate() {
        let out = finish(w, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "worker: {text}");
        if i == paused {
            assert!(
                text.contains("is fenced off: attempt 2 owns its action book"),
                "{text}"
            );
            assert!(!text.contains("fenced off 0 times"), "{text}");
        } else {
            assert!(text.contains("fenced off 0 times"), "{text}");
        }
    }
    s.assert_exactly_once();
}

#[test]
fn a_store_that_is_not_etcd_or_a_zero_lease_is_bad_input() {
    let run = "0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a04";
    let worker = |extra: &[&str]| {
        quorate()
            .args(["worker", "--nats", "nats://127.0.0.1:1", "--run", run])
            .args(["--plan", PLAN])
            .args(extra)
            .output()
            .expect("worker runs")
    };
    let file = worker(&["--store", "runs.redb"]);
    assert_eq!(file.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&file.stderr);
    assert!(stderr.contains("must be an etcd cluster"), "{stderr}");
    let zero = worker(&["--store", "etcd://127.0.0.1:1", "--lease-ms", "0"]);
    assert_eq!(zero.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(stderr.contains("--lease-ms"), "{stderr}");
    let supervisor = quorate()
        .args([
            "run",
            PLAN,
            "--nats",
            "nats://127.0.0.1:1",
            "--remote-workers",
            "1",
        ])
        .args(["--store", "runs.redb"])
        .output()
        .expect("supervisor runs");
    assert_eq!(supervisor.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&supervisor.stderr);
    assert!(stderr.contains("must be an etcd cluster"), "{stderr}");
}

/// A supervisor with `--store` and workers without: refused (exit 2, naming the worker) before
/// any worker is welcomed, instead of taking every worker for lost at once.
#[test]
fn workers_without_a_lease_on_the_supervisors_store_are_refused() {
    let Some(s) = Setup::start("0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a05") else {
        return;
    };
    let unleased = |id: &str| {
        let child = quorate()
            .args(["worker", "--nats", &s.nats, "--run", &s.run, "--plan", PLAN])
            .args(["--id", id, "--wait-ms", "3000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("worker starts");
        Running(Some(child))
    };
    let workers: Vec<Running> = s.ids.iter().map(|id| unleased(id)).collect();
    let out = finish(s.supervisor(), Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds no lease on"), "{stderr}");
    assert!(stderr.contains("with the same --store"), "{stderr}");
    assert!(s.effects().is_empty(), "nothing ran");
    for w in workers {
        // Never welcomed: each gives up after its --wait-ms.
        assert_eq!(finish(w, Duration::from_secs(20)).status.code(), Some(9));
    }
}
