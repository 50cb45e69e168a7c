//! The process split over NATS with real processes on loopback: a `quorate run --nats ...
//! --remote-workers 3` supervisor and three `quorate worker` processes complete a shipped plan
//! with the same report as the in-process run, every envelope through the run's stream.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use quorate_nats::server::NatsServer;

const PLAN: &str = "examples/plans/cancel_mid_run.toml";

fn quorate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorate"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

fn worker(url: &str, run: &str) -> Child {
    worker_of(url, run, PLAN)
}

fn worker_of(url: &str, run: &str, plan: &str) -> Child {
    quorate()
        .args([
            "worker",
            "--nats",
            url,
            "--run",
            run,
            "--plan",
            plan,
            "--wait-ms",
            "20000",
            "--allow-plaintext",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts")
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

/// The report without what differs between two runs of the same plan: the run's id and the
/// effects of the process's own world (a supervisor process has none: they are the workers').
fn comparable(stdout: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(stdout).expect("one JSON object");
    let o = v.as_object_mut().expect("an object");
    o.remove("run_id");
    o.remove("effects");
    v
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

#[test]
fn a_supervisor_and_three_worker_processes_complete_a_plan_over_nats() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(PLAN).is_file());
    let url = server.url();
    let run = "0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6b";
    let workers: Vec<Child> = (0..3).map(|_| worker(&url, run)).collect();
    let supervisor = quorate()
        .args([
            "run",
            PLAN,
            "--json",
            "--nats",
            &url,
            "--remote-workers",
            "3",
        ])
        .args(["--run", run, "--wait-ms", "20000", "--allow-plaintext"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("supervisor starts");
    let out = finish(supervisor, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "supervisor: {stderr}");
    let mut effects = 0;
    let mut handled = 0;
    for w in workers {
        let w = finish(w, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&w.stderr).to_string();
        assert_eq!(w.status.code(), Some(0), "worker: {text}");
        effects += figure(&text, "handled, ");
        handled += figure(&text, "run ended; ");
    }
    let remote = comparable(&out.stdout);
    let local = quorate()
        .args(["run", PLAN, "--json"])
        .output()
        .expect("in-process run");
    assert_eq!(local.status.code(), Some(0));
    let local_effects = serde_json::from_slice::<serde_json::Value>(&local.stdout).unwrap()
        ["effects"]
        .as_u64()
        .unwrap();
    assert_eq!(
        remote,
        comparable(&local.stdout),
        "same report as in process"
    );
    assert_eq!(remote["stop_reason"], "completed");
    // The workers' worlds together committed what the in-process world did.
    assert_eq!(effects, local_effects);
    // Every envelope went through the stream: the supervisor's assignments and controls and
    // the workers' replies, each stored once and delivered once.
    let sent = remote["messages"]["sent"].as_u64().unwrap();
    let delivered = remote["messages"]["delivered"].as_u64().unwrap();
    assert_eq!(
        handled, sent,
        "the workers handled every envelope sent to them"
    );
    assert_eq!(figure(&stderr, "stored "), sent + delivered, "{stderr}");
    assert_eq!(figure(&stderr, "delivered "), sent + delivered, "{stderr}");
    assert_eq!(figure(&stderr, "held "), 0, "{stderr}");
    assert_eq!(figure(&stderr, "ack pending "), 0, "{stderr}");
}

#[test]
fn a_supervisor_without_enough_workers_stops_with_exit_9() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let out = quorate()
        .args([
            "run",
            PLAN,
            "--nats",
            &server.url(),
            "--remote-workers",
            "2",
        ])
        .args(["--wait-ms", "300", "--allow-plaintext"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains("0 of 2 workers registered"), "{stderr}");
}

#[test]
fn an_unreachable_server_is_bad_input() {
    let out = quorate()
        .args(["worker", "--nats", "nats://127.0.0.1:1", "--run"])
        .args(["0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6b", "--plan", PLAN])
        .arg("--allow-plaintext")
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The NATS server cut off from every process for 3 s mid-run (stopped, then continued: the
/// connections stay open and nothing reaches anyone meanwhile), shorter than the plan's attempt
/// timeout: the run completes late, with each of its 5 effects once and the report of a run
/// without the outage.
#[test]
fn a_nats_outage_mid_run_delays_the_run_and_loses_or_repeats_nothing() {
    const SLOW: &str = "tests/plans/worker_failover.toml";
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let url = server.url();
    let run = "0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6c";
    let workers: Vec<Child> = (0..3).map(|_| worker_of(&url, run, SLOW)).collect();
    let started = Instant::now();
    let supervisor = quorate()
        .args([
            "run",
            SLOW,
            "--json",
            "--nats",
            &url,
            "--remote-workers",
            "3",
        ])
        .args(["--run", run, "--wait-ms", "20000", "--allow-plaintext"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("supervisor starts");
    // `ship`'s reservation answers 2.5 s after the run starts: its reply, and the next
    // assignments, fall in the outage.
    std::thread::sleep(Duration::from_millis(1500));
    signal(server.pid(), "STOP");
    std::thread::sleep(Duration::from_secs(3));
    signal(server.pid(), "CONT");
    let out = finish(supervisor, Duration::from_secs(90));
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "supervisor: {stderr}");
    let mut effects = 0;
    for w in workers {
        let w = finish(w, Duration::from_secs(20));
        let text = String::from_utf8_lossy(&w.stderr).to_string();
        assert_eq!(w.status.code(), Some(0), "worker: {text}");
        effects += figure(&text, "handled, ");
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["stop_reason"], "completed", "{report:#}");
    assert_eq!(effects, 5, "each of the plan's five effects once");
    for t in report["tasks"].as_array().expect("tasks") {
        assert_eq!(t["attempts"], 1, "no task ran twice: {t:#}");
    }
    assert_eq!(report["messages"]["rejected_duplicate"], 0, "{report:#}");
    eprintln!("the run took {took:?} with a 3 s outage");
}
