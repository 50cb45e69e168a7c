//! Durable runs on a real etcd member (spawned by the test, data on disk): `quorate run PLAN
//! --store etcd://...` is ended at every journal write (the test-only abort) and by SIGKILL from
//! outside at many points, `quorate resume --store etcd://...` continues it, and every point
//! must end as the uncrashed run did, with every effect exactly once and no task completed
//! before the kill run again; `show` prints the finished run. Bad and unreachable etcd URLs are
//! refused with their exit codes (docs/cli.md). Needs the cargo feature `etcd`.

#[path = "../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Output;

use etcd_cluster::EtcdCluster;
use quorate::durable::{RunStore, StoreAt, CRASH_AFTER_WRITES};
use quorate::protocols::RunId;
use quorate::security::Security;
use support::{arg, dispatched_tasks, plan, temp_path};

/// A shipped plan: three tasks in a chain, three effects (`stage`, `transform`, `save`).
const PLAN: &str = "cancel_mid_run.toml";

fn quorate(args: &[&str], crash_after: Option<u64>) -> Output {
    let mut cmd = support::quorate_command();
    // The member is plain HTTP on loopback: the development flag.
    cmd.args(args).arg("--allow-plaintext");
    if let Some(n) = crash_after {
        cmd.env(CRASH_AFTER_WRITES, n.to_string());
    }
    cmd.output().expect("the binary runs")
}

/// What a run left on etcd under one prefix.
#[derive(Debug)]
struct Kept {
    run: RunId,
    reason: String,
    states: BTreeMap<String, String>,
    /// Effects per action id.
    effects: HashMap<String, usize>,
    writes: u64,
}

fn read(url: &str) -> Kept {
    let at: StoreAt = url.parse().expect("an etcd URL");
    let k = RunStore::open_at(&at, &Security::plaintext()).expect("the store opens");
    let runs = k.runs().expect("runs read");
    assert_eq!(runs.len(), 1, "one run per prefix");
    let record = &runs[0];
    let run = record.run_id;
    let mut effects = HashMap::new();
    for e in k.effects(run).expect("effects") {
        *effects.entry(format!("{:?}", e.action)).or_insert(0) += 1;
    }
    let writes = k.events(run).expect("events").len()
        + k.results(run).expect("results").len()
        + k.intents(run).expect("intents").len()
        + effects.values().sum::<usize>();
    Kept {
        run,
        reason: record.status().to_string(),
        states: k.task_states(run).expect("states"),
        effects,
        writes: writes as u64,
    }
}

/// `quorate run PLAN --store URL --trace TRACE`.
fn run_args<'a>(plan: &'a str, url: &'a str, trace: &'a Path) -> [&'a str; 6] {
    ["run", plan, "--store", url, "--trace", arg(trace)]
}

/// How one kill point ended.
#[derive(Debug, PartialEq)]
enum Point {
    /// The run finished before the kill.
    Finished,
    /// Killed with this many tasks completed, then resumed to the uncrashed outcome.
    Resumed(usize),
}

/// The run kept at `url` ended with `code` (`None`: by a signal). Resumes it (if it did not
/// finish) and checks it against `whole`.
fn resume_and_check(n: u64, code: Option<i32>, url: &str, whole: &Kept) -> Point {
    let before = read(url);
    if code == Some(0) {
        assert_eq!(before.states, whole.states, "point {n}");
        return Point::Finished;
    }
    assert!(code.is_none(), "point {n}: ended by a signal, not {code:?}");
    assert_eq!(before.reason, "interrupted", "point {n}");
    let done_before: Vec<String> = before
        .states
        .iter()
        .filter(|(_, s)| *s == "completed")
        .map(|(t, _)| t.clone())
        .collect();
    let trace = temp_path("resume.jsonl");
    let out = quorate(
        &[
            "resume",
            &before.run.to_string(),
            "--store",
            url,
            "--trace",
            arg(&trace),
            "--json",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "point {n}: {stderr}");
    let after = read(url);
    assert_eq!(after.reason, "completed", "point {n}");
    assert_eq!(after.states, whole.states, "point {n}");
    for (action, count) in &after.effects {
        assert_eq!(*count, 1, "point {n}: action {action} has {count} effects");
    }
    assert_eq!(
        after.effects.len(),
        whole.effects.len(),
        "point {n}: {:?}",
        after.effects
    );
    let again = dispatched_tasks(&trace);
    for task in &done_before {
        assert!(
            !again.contains(task),
            "point {n}: {task} completed before the kill and ran again"
        );
    }
    let _ = std::fs::remove_dir_all(trace.parent().expect("a temp dir"));
    Point::Resumed(done_before.len())
}

/// The uncrashed run under prefix `whole`: completed, three effects; `show` prints it.
fn uncrashed(cluster: &EtcdCluster, plan: &str) -> (Kept, usize) {
    let url = cluster.url("whole").to_string();
    let trace = temp_path("whole.jsonl");
    let out = quorate(&run_args(plan, &url, &trace), None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let whole = read(&url);
    assert_eq!(whole.reason, "completed");
    assert_eq!(whole.states.len(), 3);
    assert!(whole.states.values().all(|s| s == "completed"));
    assert_eq!(whole.effects.len(), 3, "{:?}", whole.effects);
    assert!(whole.effects.values().all(|&c| c == 1));
    let lines = std::fs::read_to_string(&trace)
        .expect("trace written")
        .lines()
        .count();
    let _ = std::fs::remove_dir_all(trace.parent().expect("a temp dir"));
    (whole, lines)
}

#[test]
fn a_run_on_etcd_aborted_at_every_write_resumes_with_each_effect_once() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let plan = plan(PLAN);
    let (whole, _) = uncrashed(&cluster, arg(&plan));
    let mut seen = Vec::new();
    for n in 1..=whole.writes {
        let url = cluster.url(&format!("abort{n}")).to_string();
        let trace = temp_path("abort.jsonl");
        let out = quorate(&run_args(arg(&plan), &url, &trace), Some(n));
        seen.push(resume_and_check(n, out.status.code(), &url, &whole));
        let _ = std::fs::remove_dir_all(trace.parent().expect("a temp dir"));
    }
    let resumed = seen.iter().filter(|p| **p != Point::Finished).count();
    eprintln!("{} abort points, {resumed} resumed", seen.len());
    assert!(
        resumed as u64 * 2 > whole.writes,
        "most points abort the run: {resumed} of {}",
        whole.writes
    );
}

#[test]
fn a_run_on_etcd_killed_with_sigkill_resumes_and_show_prints_it() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let plan = plan(PLAN);
    let (whole, trace_lines) = uncrashed(&cluster, arg(&plan));
    assert!(trace_lines > 10, "{trace_lines} trace lines");
    let mut seen = Vec::new();
    let mut last = String::new();
    for n in 1..=trace_lines {
        let url = cluster.url(&format!("kill{n}")).to_string();
        let trace = temp_path("kill.jsonl");
        let mut child = support::quorate_command()
            .args(run_args(arg(&plan), &url, &trace))
            .arg("--allow-plaintext")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the binary starts");
        let status = loop {
            if let Some(status) = child.try_wait().expect("the child is watched") {
                break status;
            }
            let lines = std::fs::read_to_string(&trace).map_or(0, |t| t.lines().count());
            if lines >= n {
                child.kill().expect("SIGKILL sent");
                break child.wait().expect("the child is reaped");
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        };
        seen.push(resume_and_check(n as u64, status.code(), &url, &whole));
        let _ = std::fs::remove_dir_all(trace.parent().expect("a temp dir"));
        last = url;
    }
    let stages: std::collections::BTreeSet<usize> = seen
        .iter()
        .filter_map(|p| match p {
            Point::Resumed(done) => Some(*done),
            Point::Finished => None,
        })
        .collect();
    eprintln!(
        "{} SIGKILL points, {} killed and resumed, at {stages:?} tasks completed",
        seen.len(),
        seen.iter().filter(|p| **p != Point::Finished).count()
    );
    assert!(stages.len() >= 2, "kills at different stages: {stages:?}");

    // `show` prints the finished run from etcd: its status and each task's result.
    let run = read(&last).run.to_string();
    let out = quorate(&["show", &run, "--store", &last], None);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("run {run}")), "{text}");
    assert!(text.contains("status completed"), "{text}");
    for task in ["stage", "transform", "save"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(task) && l.contains("completed")),
            "{task}: {text}"
        );
    }
    let out = quorate(&["runs", "--store", &last, "--json"], None);
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(runs[0]["run_id"], run.as_str());
    assert_eq!(runs[0]["status"], "completed");
}

#[test]
fn a_bad_etcd_url_is_exit_2_and_an_unreachable_cluster_exit_8() {
    let plan = plan(PLAN);
    for (url, names) in [
        ("etcd://127.0.0.1/q", "no :PORT"),
        ("etcd://127.0.0.1:0/q", "port"),
        ("etcd://127.0.0.1:2379/a//b", "key prefix"),
        ("etcd:///q", "no endpoint"),
        ("nats://127.0.0.1:4222", "not an etcd URL"),
    ] {
        let out = quorate(&["run", arg(&plan), "--store", url], None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.contains(names), "{url}: {stderr}");
        assert!(out.stdout.is_empty(), "{url}: nothing run");
    }
    // Nothing listens on a port just freed: refused at once, nothing run.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("etcd://127.0.0.1:{port}/q");
    for args in [
        vec!["run", arg(&plan), "--store", &url],
        vec!["runs", "--store", &url],
        vec![
            "show",
            "01a234e9-77ce-7659-886a-84382c1bbf1c",
            "--store",
            &url,
        ],
    ] {
        let out = quorate(&args, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(8), "{args:?}: {stderr}");
        assert!(stderr.contains("unavailable"), "{stderr}");
        assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing printed");
    }
}

/// `bench dag --store etcd://...` at a tiny size: the durable path on etcd beside the in-memory
/// one, and the raw CAS rate of the same member measured in the same run, with the ratios
/// computed from the figures it prints.
#[test]
fn bench_dag_on_etcd_prints_the_durable_path_and_the_raw_cas_rate() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let url = cluster.url("bench").to_string();
    let out = quorate(
        &[
            "bench",
            "dag",
            "--layers",
            "2",
            "--width",
            "3",
            "--runs",
            "1",
            "--no-warmup",
            "--store",
            &url,
            "--json",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let b: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let d = &b["durable"];
    assert_eq!(d["store"], url.as_str());
    let tasks_per_s = d["tasks_per_s"].as_f64().expect("durable tasks/s");
    assert!(tasks_per_s > 0.0);
    // Each task's events and result were written (its run-level events come on top).
    let writes = d["writes_per_task"].as_f64().expect("writes per task");
    assert!(writes >= 7.0, "{writes}");
    let commits = d["commits_per_task"].as_f64().expect("commits per task");
    assert!(commits > 0.0 && commits <= writes, "{commits}");
    assert!(d.get("file_bytes").is_none(), "no file on etcd: {d}");
    let raw = &d["raw"];
    let sequential = raw["sequential_cas_per_s"].as_f64().expect("sequential");
    let batched = raw["batched_writes_per_s"].as_f64().expect("batched");
    assert!(sequential > 0.0 && batched > 0.0, "{raw}");
    let ratio = raw["tasks_ratio_to_sequential"].as_f64().expect("ratio");
    assert!((ratio - tasks_per_s / sequential).abs() < 1e-9 * ratio.max(1.0));
    let ratio = raw["writes_ratio_to_batched"].as_f64().expect("ratio");
    assert!((ratio - tasks_per_s * writes / batched).abs() < 1e-9 * ratio.max(1.0));
}
