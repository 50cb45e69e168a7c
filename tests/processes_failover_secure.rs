//! Worker failover under least privilege (issues 16 and 21), everything over TLS on loopback
//! with certificates made at test time and a user per agent (tests/secure): a supervisor process
//! and workers `a` and `b`, each with its own etcd user whose role writes only its own books and
//! claims (and the tools' world), run tests/plans/worker_failover.toml; the worker that committed
//! `ship`'s reservation is killed (SIGKILL) before it answered. The other worker takes the task
//! over: it reads the lost worker's book, writes the import under its own prefix, fenced by the
//! attempt the supervisor wrote to `kv/fence/`, and the run completes with every effect once.

mod secure;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorate::process::failover::{fence_key, newest_book, StoredEffect};
use quorate::workers::StoredBook;
use quorate_state::Store;
use secure::{
    finish, quorate, runtime, Running, SecureEtcd, SecureNats, TestCerts, A, AGENTS, B, SUP,
};

const PLAN: &str = "tests/plans/worker_failover.toml";
const RUN: &str = "0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a21";

/// `cmd` as agent `i`: TLS, its etcd user and its NATS user.
fn as_agent(etcd: &SecureEtcd, nats: &SecureNats, mut cmd: Command, i: usize) -> Running {
    etcd.as_user(&mut cmd, i);
    nats.user_of(&mut cmd, i);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the process starts");
    Running(Some(child))
}

#[test]
fn a_worker_killed_mid_task_is_taken_over_by_one_that_writes_only_its_own_keys() {
    let certs = Arc::new(TestCerts::make(&[secure::CLIENT_CN]));
    let Some(etcd) = SecureEtcd::start_with(certs.clone()) else {
        return;
    };
    let Some(nats) = SecureNats::start_with(certs) else {
        return;
    };
    let store = etcd.url();
    let worker = |i: usize| {
        let mut cmd = quorate();
        cmd.args([
            "worker",
            "--nats",
            &nats.url(),
            "--run",
            RUN,
            "--plan",
            PLAN,
        ])
        .args([
            "--wait-ms",
            "20000",
            "--lease-ms",
            "1000",
            "--store",
            &store,
        ]);
        as_agent(&etcd, &nats, cmd, i)
    };
    let mut workers = [Some(worker(A)), Some(worker(B))];
    let mut cmd = quorate();
    cmd.args(["run", PLAN, "--json", "--nats", &nats.url()])
        .args(["--remote-workers", "2", "--run", RUN, "--wait-ms", "20000"])
        .args(["--store", &store]);
    let supervisor = as_agent(&etcd, &nats, cmd, SUP);

    let rt = runtime();
    // The test reads as the supervisor (who reads everything).
    let observer = rt.block_on(etcd.connect(Some(SUP))).expect("connects");
    let world = observer.store::<StoredEffect>("world");
    let effects = || {
        rt.block_on(world.scan(&format!("{RUN}/")))
            .expect("scan")
            .into_iter()
            .map(|(k, v)| (k, v.value))
            .collect::<Vec<_>>()
    };
    let started = Instant::now();
    let reserved = loop {
        if let Some((_, e)) = effects()
            .into_iter()
            .find(|(_, e)| e.effect.tool == "db.reserve")
        {
            break e;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no reservation"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let lost = [A, B]
        .into_iter()
        .find(|&i| AGENTS[i] == reserved.by)
        .expect("a or b committed it");
    let survivor = if lost == A { B } else { A };
    let mut victim = workers[lost - A].take().expect("running").take();
    victim.kill().expect("SIGKILL");
    let _ = victim.wait();

    let out = finish(supervisor.take(), Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "supervisor: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["stop_reason"], "completed", "{report}");
    let ship = report["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["id"] == "ship")
        .expect("ship");
    assert_eq!(ship["attempts"], 2, "{report}");
    let out = finish(
        workers[survivor - A].take().expect("running").take(),
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "worker: {text}");
    assert!(!text.contains("permission denied"), "{text}");

    // Every effect once; the reservation stays the lost worker's.
    let all = effects();
    assert!(all.iter().all(|(k, _)| !k.contains("/again/")), "{all:?}");
    let mut tools: Vec<&str> = all.iter().map(|(_, e)| e.effect.tool.as_str()).collect();
    tools.sort_unstable();
    assert_eq!(
        tools,
        [
            "audit.log",
            "audit.log",
            "db.reserve",
            "db.ship",
            "mail.send"
        ]
    );
    let task = reserved.effect.action.task;
    let run = quorate::process::parse_id(RUN).expect("a run id");
    // The newest book is the survivor's, under its own prefix, written by attempt 2, which the
    // supervisor's fence names.
    let books = observer.store::<StoredBook>("book");
    let (key, book) = rt
        .block_on(newest_book(&books, run, task))
        .expect("scan")
        .expect("a book");
    assert!(key.starts_with(&AGENTS[survivor].to_string()), "{key}");
    assert_eq!(book.value.owner, 2);
    let fence = rt
        .block_on(observer.store::<u32>("fence").get(&fence_key(run, task)))
        .expect("read")
        .expect("the supervisor wrote the fence");
    assert_eq!(fence.value, 2);
}
