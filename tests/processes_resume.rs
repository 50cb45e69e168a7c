//! A supervisor process kept on etcd, with real processes on loopback (etcd and nats-server
//! spawned by the test): `quorate run PLAN --nats URL --remote-workers 2 --store etcd://...`
//! and two `quorate worker` processes. The supervisor is lost mid-run at several points (SIGKILL
//! after tasks were assigned; SIGKILL after a reply was read from its consumer and before it
//! was handed to the core and committed; the journal's test-only abort right after a commit),
//! then `quorate resume RUN --store ... --nats URL --remote-workers 2` finishes the run with the
//! workers still running: stop reason completed, every task completed, no task completed before
//! the loss dispatched again, and the workers' worlds together hold each effect once. A second
//! test loses one member of a 3-member etcd cluster (the leader) during such a run, which
//! completes. Needs the cargo features `etcd` and `nats`.

#[path = "../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use etcd_cluster::EtcdCluster;
use quorate::durable::{RunStore, StoreAt, CRASH_AFTER_WRITES};
use quorate::process::{HALTED, HALT_AT_REPLY};
use quorate::security::Security;
use quorate_nats::server::NatsServer;
use support::{arg, temp_path};

/// Tasks per chain; the plan has two chains, so both workers are busy.
const CHAIN: usize = 3;
/// Tasks of the plan.
const TASKS: usize = 2 * CHAIN;
/// How long each tool call takes to answer.
const LATENCY_MS: u64 = 80;
/// Worker processes.
const WORKERS: usize = 2;

/// Two chains `a0 -> a1 -> a2` and `b0 -> b1 -> b2`, each task calling `db.step` once
/// (answering after [`LATENCY_MS`]): one effect per task.
fn plan() -> PathBuf {
    let mut text = format!(
        "[run]\nworkers = {WORKERS}\n\
         budget = {{ steps = {steps}, tool_calls = {calls}, tokens = 10000, cost = 500 }}\n\
         reserve = {{ steps = 4 }}\ncapabilities = [\"db.step\"]\ndeadline_ms = 60000\n\
         call_timeout_ms = 2000\nattempt_timeout_ms = 20000\n",
        steps = TASKS * 6 + 10,
        calls = TASKS * 2 + 2,
    );
    for chain in ["a", "b"] {
        for i in 0..CHAIN {
            let deps = if i == 0 {
                String::new()
            } else {
                format!("deps = [\"{chain}{}\"]\n", i - 1)
            };
            text.push_str(&format!(
                "\n[[tasks]]\nid = \"{chain}{i}\"\n{deps}capabilities = [\"db.step\"]\n\
                 budget = {{ steps = 6, tool_calls = 2, tokens = 200, cost = 10 }}\n\
                 script = [\n  {{ do = \"call\", tool = \"db.step\", \
                 params = {{ key = \"steps/{chain}{i}\" }}, output = {{ n = {i} }}, \
                 latency-ms = {LATENCY_MS} }},\n  {{ do = \"answer\", value = {{ n = {i} }} }},\n]\n"
            ));
        }
    }
    let path = temp_path("chains.toml");
    std::fs::write(&path, text).expect("plan written");
    path
}

/// A child process with its stderr in a file.
struct Proc {
    child: Child,
    stderr: PathBuf,
}

impl Proc {
    fn spawn(args: &[&str], env: &[(&str, String)], tag: &str) -> Self {
        let stderr = temp_path(&format!("{tag}.stderr"));
        let mut cmd = support::quorate_command();
        // Plain connections to the test's own loopback servers.
        cmd.env("QUORATE_ALLOW_PLAINTEXT", "1");
        cmd.args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        Self {
            child: cmd.spawn().expect("the binary starts"),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("watched").is_none()
    }

    /// Waits at most `limit` for the exit; its status and stdout.
    fn finish(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let started = Instant::now();
        while self.running() {
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("a process did not exit within {limit:?}: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut stdout = String::new();
        if let Some(mut pipe) = self.child.stdout.take() {
            pipe.read_to_string(&mut stdout).expect("stdout read");
        }
        let status = self.child.wait().expect("waited");
        (status, stdout, self.stderr())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Killed by PID if a failed assertion left it running.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The worker processes, on the supervisor's etcd cluster as their store of record (the
/// supervisor watches their leases there: worker failover).
fn workers(nats: &str, run: &str, plan: &Path, store: &str) -> Vec<Proc> {
    (0..WORKERS)
        .map(|i| {
            Proc::spawn(
                &[
                    "worker",
                    "--nats",
                    nats,
                    "--run",
                    run,
                    "--plan",
                    arg(plan),
                    "--store",
                    store,
                ],
                &[],
                &format!("worker{i}"),
            )
        })
        .collect()
}

fn supervisor(
    nats: &str,
    run: &str,
    plan: &Path,
    store: &str,
    trace: &Path,
    env: &[(&str, String)],
) -> Proc {
    Proc::spawn(
        &[
            "run",
            arg(plan),
            "--nats",
            nats,
            "--remote-workers",
            &WORKERS.to_string(),
            "--run",
            run,
            "--store",
            store,
            "--trace",
            arg(trace),
            "--json",
        ],
        env,
        "supervisor",
    )
}

/// Events of kind `kind` in the trace at `path`, by task.
fn traced(path: &Path, kind: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == kind)
        .filter_map(|e| e["task"].as_str().map(str::to_string))
        .collect()
}

/// Tasks that completed in the trace at `path`.
fn completed(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "transition" && e["to"] == "completed")
        .filter_map(|e| e["task"].as_str().map(str::to_string))
        .collect()
}

/// The number after `label` in `text`.
fn figure(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} in {text}"))
        + label.len();
    text[at..]
        .split_whitespace()
        .next()
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("a number after {label:?} in {text}"))
}

/// Waits until `done()` or panics after `limit`, naming `what`.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Where the first supervisor process is lost.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// SIGKILL once this many tasks were dispatched.
    Assigned(usize),
    /// SIGKILL once it read this many replies (the last neither handled nor acked).
    Reply(u64),
    /// The journal's test-only abort right after this many writes.
    Journal(u64),
}

/// The ends of both workers: the effects their worlds committed together.
fn workers_effects(workers: Vec<Proc>) -> u64 {
    let mut effects = 0;
    for w in workers {
        let (status, _, stderr) = w.finish(Duration::from_secs(30));
        assert_eq!(status.code(), Some(0), "worker: {stderr}");
        effects += figure(&stderr, "handled, ");
    }
    effects
}

/// One run with its supervisor lost at `loss`, then resumed.
fn lose_the_supervisor(loss: Loss) {
    let Some(nats) = NatsServer::start_or_skip() else {
        return;
    };
    let Some(etcd) = EtcdCluster::start_in_memory(1) else {
        return;
    };
    let url = nats.url();
    let store = etcd.url("resume").to_string();
    let plan = plan();
    let trace = temp_path("first.jsonl");
    let run = quorate_workers::edge::random_ids().run_id().to_string();
    let mut workers = workers(&url, &run, &plan, &store);
    let env: Vec<(&str, String)> = match loss {
        Loss::Assigned(_) => Vec::new(),
        Loss::Reply(n) => vec![(HALT_AT_REPLY, n.to_string())],
        Loss::Journal(n) => vec![(CRASH_AFTER_WRITES, n.to_string())],
    };
    let mut first = supervisor(&url, &run, &plan, &store, &trace, &env);
    let limit = Duration::from_secs(30);
    match loss {
        Loss::Assigned(n) => {
            wait_until(limit, "tasks dispatched", || {
                assert!(first.running(), "the run ended first: {}", first.stderr());
                traced(&trace, "dispatched").len() >= n
            });
            first.child.kill().expect("SIGKILL");
        }
        Loss::Reply(_) => {
            wait_until(limit, "the halt", || {
                assert!(first.running(), "the run ended first: {}", first.stderr());
                first.stderr().contains(HALTED)
            });
            first.child.kill().expect("SIGKILL");
        }
        Loss::Journal(_) => wait_until(limit, "the abort", || !first.running()),
    }
    let (status, _, stderr) = first.finish(Duration::from_secs(5));
    // Ended by a signal (SIGKILL, or SIGABRT from the journal's abort), not by an exit.
    assert_eq!(status.code(), None, "{loss:?}: {stderr}");
    for w in &mut workers {
        assert!(w.running(), "{loss:?}: a worker left with its supervisor");
    }

    let at: StoreAt = store.parse().expect("an etcd URL");
    let kept = RunStore::open_at(&at, &Security::plaintext()).expect("the store opens");
    let record = kept.run(&run).expect("the run is kept");
    // What the store says completed (the trace may be ahead of the journal: a completion
    // traced but not committed before the loss is not one).
    let before: Vec<String> = kept
        .task_states(record.run_id)
        .expect("states")
        .into_iter()
        .filter(|(_, s)| s == "completed")
        .map(|(t, _)| t)
        .collect();
    assert!(
        before.len() < TASKS,
        "{loss:?}: the supervisor was lost mid-run ({before:?})"
    );
    assert_eq!(record.status(), "interrupted");
    let processes = record
        .processes
        .clone()
        .expect("the supervisor's ids are kept");
    assert_eq!(processes.workers.len(), WORKERS);

    let again = temp_path("again.jsonl");
    let resumed = Proc::spawn(
        &[
            "resume",
            &run,
            "--store",
            &store,
            "--nats",
            &url,
            "--remote-workers",
            &WORKERS.to_string(),
            "--json",
            "--trace",
            arg(&again),
        ],
        &[],
        "resumed",
    );
    let (status, stdout, stderr) = resumed.finish(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{loss:?}: {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["stop_reason"], "completed", "{loss:?}");

    let refused = report["messages"]["rejected_late"]
        .as_u64()
        .expect("a count")
        + report["messages"]["rejected_duplicate"]
            .as_u64()
            .expect("a count");
    if let Loss::Reply(_) = loss {
        // The reply read but not acked reaches the resumed core at once (its supervisor's
        // consumer is made anew), for an attempt it replaced: refused.
        assert!(refused >= 1, "{loss:?}: {}", report["messages"]);
    }

    // No task completed before the loss was dispatched again.
    let redone: Vec<String> = traced(&again, "dispatched")
        .into_iter()
        .filter(|t| before.contains(t))
        .collect();
    assert!(redone.is_empty(), "{loss:?}: dispatched again: {redone:?}");

    // Each effect exactly once, over both workers' worlds.
    assert_eq!(workers_effects(workers), TASKS as u64, "{loss:?}");

    let record = kept.run(&run).expect("the run is kept");
    assert_eq!(record.status(), "completed");
    assert_eq!(record.processes, Some(processes), "the same ids");
    let states = kept.task_states(record.run_id).expect("states");
    assert_eq!(states.len(), TASKS);
    assert!(states.values().all(|s| s == "completed"), "{states:?}");
    eprintln!(
        "{loss:?}: lost with {} of {TASKS} tasks completed; the resumed run's messages {}; {}",
        before.len(),
        report["messages"],
        stderr
            .lines()
            .find(|l| l.contains("nats stream"))
            .unwrap_or("-"),
    );
}

#[test]
fn a_supervisor_killed_after_tasks_were_assigned_is_resumed() {
    lose_the_supervisor(Loss::Assigned(3));
}

#[test]
fn a_supervisor_killed_between_a_reply_and_its_commit_is_resumed() {
    lose_the_supervisor(Loss::Reply(3));
}

#[test]
fn a_supervisor_aborted_right_after_a_journal_commit_is_resumed() {
    lose_the_supervisor(Loss::Journal(12));
}

#[test]
fn a_process_run_completes_when_the_etcd_leader_is_lost() {
    let Some(nats) = NatsServer::start_or_skip() else {
        return;
    };
    let Some(mut cluster) = EtcdCluster::start_in_memory(3) else {
        return;
    };
    // A settled leader first (the same one for a second): an election right after the start
    // (a member that came up late, on a loaded machine) is not the loss under test.
    let (mut settled, mut since) = (None, Instant::now());
    wait_until(Duration::from_secs(20), "a settled leader", || {
        let now = cluster.leader();
        if now != settled || now.is_none() {
            (settled, since) = (now, Instant::now());
        }
        since.elapsed() >= Duration::from_secs(1)
    });
    let url = nats.url();
    let store = cluster.url("lost").to_string();
    let plan = plan();
    let trace = temp_path("lost.jsonl");
    let run = quorate_workers::edge::random_ids().run_id().to_string();
    let workers = workers(&url, &run, &plan, &store);
    let mut sup = supervisor(&url, &run, &plan, &store, &trace, &[]);
    wait_until(
        Duration::from_secs(30),
        "a third of the tasks dispatched",
        || {
            assert!(sup.running(), "the run ended first: {}", sup.stderr());
            traced(&trace, "dispatched").len() >= TASKS / 3
        },
    );
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let before = completed(&trace).len();
    let (status, stdout, stderr) = sup.finish(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(before < TASKS, "the member was lost mid-run");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["stop_reason"], "completed");
    assert_eq!(workers_effects(workers), TASKS as u64);
    let at: StoreAt = store.parse().expect("an etcd URL");
    let kept = RunStore::open_at(&at, &Security::plaintext()).expect("the store opens");
    let record = kept.run(&run).expect("the run is kept");
    assert_eq!(record.status(), "completed");
    let states = kept.task_states(record.run_id).expect("states");
    assert_eq!(states.len(), TASKS);
    assert!(states.values().all(|s| s == "completed"), "{states:?}");
}

#[test]
fn a_resume_with_another_number_of_workers_is_refused() {
    let Some(etcd) = EtcdCluster::start_in_memory(1) else {
        return;
    };
    let Some(nats) = NatsServer::start_or_skip() else {
        return;
    };
    let store = etcd.url("refused").to_string();
    let url = nats.url();
    let plan = plan();
    let trace = temp_path("refused.jsonl");
    let run = quorate_workers::edge::random_ids().run_id().to_string();
    let _workers = workers(&url, &run, &plan, &store);
    let env = vec![(HALT_AT_REPLY, "1".to_string())];
    let mut first = supervisor(&url, &run, &plan, &store, &trace, &env);
    wait_until(Duration::from_secs(30), "the halt", || {
        first.stderr().contains(HALTED)
    });
    first.child.kill().expect("SIGKILL");
    let _ = first.finish(Duration::from_secs(5));
    let resume = |extra: &[&str]| {
        support::quorate_command()
            .env("QUORATE_ALLOW_PLAINTEXT", "1")
            .args(["resume", &run, "--store", &store])
            .args(extra)
            .output()
            .expect("runs")
    };
    let out = resume(&["--nats", &url, "--remote-workers", "3"]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("has 2 worker processes"), "{text}");
    // Without --nats: its workers are processes of their own, not started here.
    let out = resume(&[]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("resume it with --nats"), "{text}");
}
