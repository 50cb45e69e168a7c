//! Worker roles with real processes on loopback: two `quorate worker --roles` processes with
//! disjoint roles and a plan whose tasks have those roles: every task runs on a worker serving
//! its role; a plan with a task whose role no registered worker serves is refused (exit 2).

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use quorate_nats::server::NatsServer;

/// Four independent tasks, two of role `fetch` then two of role `write`, each committing one
/// effect (in this order, dispatching in turn without roles would give each worker one of
/// each).
const PLAN: &str = r#"
[run]
workers = 2
budget = { steps = 40, tool_calls = 8, tokens = 1000, cost = 50 }
reserve = { steps = 4 }
capabilities = ["db.get", "db.put"]
deadline_ms = 20000
attempt_timeout_ms = 5000

[[tasks]]
id = "fetch-1"
role = "fetch"
capabilities = ["db.get"]
budget = { steps = 6, tool_calls = 2, tokens = 200, cost = 10 }
script = [
  { do = "call", tool = "db.get", params = { key = "f/1" }, output = 1 },
  { do = "answer", value = 1 },
]

[[tasks]]
id = "fetch-2"
role = "fetch"
capabilities = ["db.get"]
budget = { steps = 6, tool_calls = 2, tokens = 200, cost = 10 }
script = [
  { do = "call", tool = "db.get", params = { key = "f/2" }, output = 2 },
  { do = "answer", value = 2 },
]

[[tasks]]
id = "write-1"
role = "write"
capabilities = ["db.put"]
budget = { steps = 6, tool_calls = 2, tokens = 200, cost = 10 }
script = [
  { do = "call", tool = "db.put", params = { key = "w/1" }, output = 1 },
  { do = "answer", value = 1 },
]

[[tasks]]
id = "write-2"
role = "write"
capabilities = ["db.put"]
budget = { steps = 6, tool_calls = 2, tokens = 200, cost = 10 }
script = [
  { do = "call", tool = "db.put", params = { key = "w/2" }, output = 2 },
  { do = "answer", value = 2 },
]
"#;

const RUN: &str = "0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6c";

fn quorate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorate"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn worker(url: &str, plan: &Path, id: &str, roles: &str) -> Child {
    quorate()
        .args(["worker", "--nats", url, "--run", RUN, "--plan"])
        .arg(plan)
        .args(["--id", id, "--roles", roles, "--wait-ms", "20000"])
        .arg("--allow-plaintext")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts")
}

fn supervisor(url: &str, plan: &Path, trace: &Path) -> Child {
    quorate()
        .arg("run")
        .arg(plan)
        .args(["--json", "--nats", url, "--remote-workers", "2"])
        .args(["--run", RUN, "--wait-ms", "20000", "--allow-plaintext"])
        .arg("--trace")
        .arg(trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("supervisor starts")
}

/// Waits for `child` at most `limit`; its output (killed and failed if it did not exit).
fn finish(mut child: Child, limit: Duration) -> Output {
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

/// The workers in registration order (worker index order), from the supervisor's stderr.
fn registered(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("quorate: worker "))
        .filter(|l| l.contains(" registered ("))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

const FETCHER: &str = "0192f4d3-7a1e-7c3b-9f00-00000000f001";
const WRITER: &str = "0192f4d3-7a1e-7c3b-9f00-00000000a002";

#[test]
fn every_task_runs_on_a_worker_serving_its_role() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = dir.path().join("roles.toml");
    std::fs::write(&plan, PLAN).expect("plan written");
    let trace = dir.path().join("trace.jsonl");
    let url = server.url();
    let workers = [
        (worker(&url, &plan, FETCHER, "fetch"), FETCHER),
        (worker(&url, &plan, WRITER, "write,other"), WRITER),
    ];
    let out = finish(supervisor(&url, &plan, &trace), Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "supervisor: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a report");
    assert_eq!(report["stop_reason"], "completed", "{report}");
    for (w, id) in workers {
        let w = finish(w, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&w.stderr);
        assert_eq!(w.status.code(), Some(0), "worker {id}: {text}");
        assert!(text.contains("2 effects committed here"), "{id}: {text}");
    }
    let order = registered(&stderr);
    assert_eq!(order.len(), 2, "{stderr}");
    let text = std::fs::read_to_string(&trace).expect("trace");
    let dispatched: Vec<(String, usize)> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "dispatched")
        .map(|e| {
            let task = e["task"].as_str().expect("a task").to_string();
            (task, e["worker"].as_u64().expect("a worker index") as usize)
        })
        .collect();
    assert_eq!(dispatched.len(), 4, "{text}");
    for (task, w) in dispatched {
        let expected = if task.starts_with("fetch") {
            FETCHER
        } else {
            WRITER
        };
        assert_eq!(order[w], expected, "task {task} went to worker {w}");
    }
}

#[test]
fn a_task_whose_role_no_worker_serves_is_refused_before_the_run() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let plan = dir.path().join("roles.toml");
    std::fs::write(&plan, PLAN).expect("plan written");
    let url = server.url();
    let mut workers = [
        worker(&url, &plan, FETCHER, "fetch"),
        worker(&url, &plan, WRITER, "fetch,other"),
    ];
    let out = finish(
        supervisor(&url, &plan, &dir.path().join("trace.jsonl")),
        Duration::from_secs(60),
    );
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("task write-1 has role \"write\""),
        "{stderr}"
    );
    assert!(
        !dir.path().join("trace.jsonl").exists()
            || std::fs::read_to_string(dir.path().join("trace.jsonl"))
                .unwrap()
                .lines()
                .all(|l| !l.contains("\"dispatched\"")),
        "nothing was dispatched"
    );
}
