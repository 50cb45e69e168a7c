//! A durable run on a real 3-member etcd cluster (spawned by the test on loopback) loses one
//! member to SIGKILL while it runs: a follower in one case, the current leader in the other.
//! `quorate run PLAN --store etcd://m1,m2,m3/PREFIX` must finish the run (exit 0) with every
//! effect exactly once, every task completed, and `show` must print it. Needs the cargo
//! feature `etcd`.

#[path = "../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use etcd_cluster::EtcdCluster;
use quorate::durable::{RunStore, StoreAt};
use quorate::security::Security;
use support::{arg, temp_path};

/// Tasks of the generated plan (a chain), each with one tool call.
const TASKS: usize = 8;
/// How long each tool call takes to answer: the run lasts at least `TASKS` times this.
const LATENCY_MS: u64 = 60;

/// A chain of [`TASKS`] tasks, each calling `db.step` once (answering after [`LATENCY_MS`]) and
/// answering with its number: one effect per task, long enough to lose a member in the middle.
fn chain_plan() -> PathBuf {
    let mut text = format!(
        "[run]\nworkers = 2\n\
         budget = {{ steps = {steps}, tool_calls = {calls}, tokens = 10000, cost = 500 }}\n\
         reserve = {{ steps = 4 }}\ncapabilities = [\"db.step\"]\ndeadline_ms = 25000\n\
         call_timeout_ms = 1000\nattempt_timeout_ms = 10000\n",
        steps = TASKS * 6 + 10,
        calls = TASKS * 2 + 2,
    );
    for i in 0..TASKS {
        let deps = if i == 0 {
            String::new()
        } else {
            format!("deps = [\"t{}\"]\n", i - 1)
        };
        text.push_str(&format!(
            "\n[[tasks]]\nid = \"t{i}\"\n{deps}capabilities = [\"db.step\"]\n\
             budget = {{ steps = 6, tool_calls = 2, tokens = 200, cost = 10 }}\n\
             script = [\n  {{ do = \"call\", tool = \"db.step\", params = {{ key = \"steps/{i}\" }}, \
             output = {{ n = {i} }}, latency-ms = {LATENCY_MS} }},\n  \
             {{ do = \"answer\", value = {{ n = {i} }} }},\n]\n"
        ));
    }
    let path = temp_path("chain.toml");
    std::fs::write(&path, text).expect("plan written");
    path
}

/// Which member the test kills.
#[derive(Clone, Copy, Debug)]
enum Victim {
    Follower,
    Leader,
}

/// Runs the chain on a fresh 3-member cluster, kills `victim` once `TASKS / 3` tasks were
/// dispatched, and checks the run completed with each effect once. Returns the time from the
/// kill until the surviving members agreed on a leader again.
fn lose_a_member(victim: Victim) -> Option<Duration> {
    let mut cluster = EtcdCluster::start_in_memory(3)?;
    assert_eq!(cluster.len(), 3);
    let url = cluster.url("lost").to_string();
    let plan = chain_plan();
    let trace = temp_path("trace.jsonl");
    let err = temp_path("stderr.txt");
    let started = Instant::now();
    let mut child = support::quorate_command()
        .args(["run", arg(&plan), "--store", &url, "--trace", arg(&trace)])
        .arg("--allow-plaintext")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("the binary starts");

    // Kill the member once a third of the tasks were dispatched: the run is in the middle.
    while dispatched(&trace) < TASKS / 3 {
        assert!(
            child.try_wait().expect("watched").is_none(),
            "the run ended before the kill"
        );
        assert!(started.elapsed() < Duration::from_secs(20), "no progress");
        std::thread::sleep(Duration::from_millis(2));
    }
    let leader = cluster.leader().expect("a leader before the kill");
    let killed = match victim {
        Victim::Leader => leader,
        Victim::Follower => (leader + 1) % 3,
    };
    cluster.kill(killed);
    let killed_at = Instant::now();
    let before = dispatched(&trace);
    let elected = loop {
        match cluster.leader() {
            Some(now) if now != killed => break killed_at.elapsed(),
            _ => {}
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(10),
            "no new leader"
        );
        std::thread::sleep(Duration::from_millis(1));
    };

    let status = loop {
        if let Some(status) = child.try_wait().expect("watched") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{victim:?}: the run hangs: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{victim:?}: {stderr}");
    assert!(
        before < TASKS,
        "{victim:?}: the member died mid-run ({before} of {TASKS} dispatched)"
    );
    // Each write the lost leader left without an answer was made again (and named on stderr).
    let retried = stderr.matches("trying again").count();
    assert_eq!(stderr.lines().count(), retried, "{victim:?}: {stderr}");
    eprintln!(
        "{victim:?} (member {killed}) killed after {before} of {TASKS} tasks dispatched; \
         a leader again after {elected:?}; {retried} journal writes retried; run took {:?}",
        started.elapsed()
    );

    // Everything kept on the surviving members: each task completed, each effect once.
    let at: StoreAt = url.parse().expect("an etcd URL");
    let kept = RunStore::open_at(&at, &Security::plaintext()).expect("the store opens");
    let runs = kept.runs().expect("runs read");
    assert_eq!(runs.len(), 1);
    let run = runs[0].run_id;
    assert_eq!(runs[0].status().to_string(), "completed");
    let states = kept.task_states(run).expect("states");
    assert_eq!(states.len(), TASKS);
    assert!(states.values().all(|s| s == "completed"), "{states:?}");
    let mut effects: HashMap<String, usize> = HashMap::new();
    for e in kept.effects(run).expect("effects") {
        *effects.entry(format!("{:?}", e.action)).or_insert(0) += 1;
    }
    assert_eq!(effects.len(), TASKS, "{effects:?}");
    assert!(effects.values().all(|&n| n == 1), "{effects:?}");
    // The log has no entry twice (a retried append after an unknown outcome adds none).
    let events = kept.events(run).expect("events");
    let mut seen = std::collections::HashSet::new();
    for e in &events {
        let text = serde_json::to_string(e).expect("an event encodes");
        assert!(seen.insert(text.clone()), "{victim:?}: event twice: {text}");
    }

    let out = support::quorate_command()
        .args(["show", &run.to_string(), "--store", &url])
        .arg("--allow-plaintext")
        .output()
        .expect("show runs");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("status completed"), "{text}");
    for i in 0..TASKS {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("t{i} ")) && l.contains("completed")),
            "t{i}: {text}"
        );
    }
    for p in [&plan, &trace, &err] {
        let _ = std::fs::remove_dir_all(p.parent().expect("a temp dir"));
    }
    Some(elected)
}

/// Tasks the trace at `path` dispatched so far.
fn dispatched(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "dispatched")
        .count()
}

#[test]
fn a_run_on_three_members_completes_when_a_follower_is_killed() {
    lose_a_member(Victim::Follower);
}

#[test]
fn a_run_on_three_members_completes_when_the_leader_is_killed() {
    lose_a_member(Victim::Leader);
}
