//! `quorate bench dag --store etcd://... --nats nats://...` at a small size against a real etcd
//! member and a real nats-server (both spawned here): the distributed runs complete every task
//! (read back from etcd), their stream carried exactly the envelopes the run sent (every
//! assignment and every reply stored once, delivered once, none redelivered or left), and the
//! ratios to the raw CAS rate are the ones its own figures give. `--nats` without an etcd store
//! is refused. Needs the cargo features `etcd` and `nats`.

#[path = "../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
mod support;

use etcd_cluster::EtcdCluster;
use quorate::durable::{RunStore, StoreAt};
use quorate::security::Security;
use quorate_nats::server::NatsServer;
use support::{quorate, stdout_json};

const LAYERS: u64 = 3;
const WIDTH: u64 = 4;
const RUNS: u64 = 2;

fn f64_at(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("a number at {key}: {v}"))
}

#[test]
fn the_distributed_runs_complete_over_nats_and_etcd_and_the_stream_carried_exactly_them() {
    let Some(cluster) = EtcdCluster::start(1) else {
        return;
    };
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let store = cluster.url("bench").to_string();
    let (layers, width, runs) = (LAYERS.to_string(), WIDTH.to_string(), RUNS.to_string());
    let out = quorate(&[
        "bench",
        "dag",
        "--layers",
        &layers,
        "--width",
        &width,
        "--workers",
        "2",
        "--runs",
        &runs,
        "--no-warmup",
        "--store",
        &store,
        "--nats",
        &server.url(),
        "--allow-plaintext",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let b = stdout_json(&out);
    let tasks = LAYERS * WIDTH;
    assert_eq!(b["tasks"], tasks);
    let d = &b["distributed"];
    assert_eq!(d["store"], store.as_str());
    assert_eq!(d["workers"], 2);
    assert_eq!(
        d["tasks_per_s_runs"].as_array().map(Vec::len),
        Some(RUNS as usize)
    );
    let tasks_per_s = f64_at(d, "tasks_per_s");
    assert!(tasks_per_s > 0.0, "{d}");

    // Every envelope crossed the server: one assignment per task (no retries, no controls)
    // and one reply per task, each stored once and delivered once.
    let c = &d["carried"];
    assert_eq!(c["report_sent"], tasks, "{c}");
    assert_eq!(c["report_delivered"], tasks, "{c}");
    assert_eq!(c["supervisor_published"], tasks, "{c}");
    assert_eq!(c["workers_published"], tasks, "{c}");
    assert_eq!(c["deduped"], 0, "{c}");
    assert_eq!(c["stored"], 2 * tasks, "{c}");
    assert_eq!(c["delivered"], 2 * tasks, "{c}");
    assert_eq!(c["redelivered"], 0, "{c}");
    assert_eq!(c["held"], 0, "every envelope acked: {c}");
    assert_eq!(c["ack_pending"], 0, "{c}");
    assert_eq!(d["every_run_exact"], true, "{d}");
    // The replies reached the supervisor in inputs of one or more.
    let inputs = d["supervisor_inputs"].as_u64().expect("inputs");
    assert!(inputs >= 1 && inputs <= tasks, "{d}");
    let per_input = f64_at(d, "replies_per_input");
    assert!(
        (per_input - tasks as f64 / inputs as f64).abs() < 1e-9,
        "{d}"
    );

    // The median run is kept on etcd: every task completed, its result there.
    let kept = RunStore::open_at(
        &store.parse::<StoreAt>().expect("an etcd URL"),
        &Security::plaintext(),
    )
    .expect("opens");
    let run = serde_json::from_value(d["run_id"].clone()).expect("a run id");
    let states = kept.task_states(run).expect("states read");
    assert_eq!(states.len() as u64, tasks, "{states:?}");
    assert!(states.values().all(|s| s == "completed"), "{states:?}");
    assert_eq!(kept.results(run).expect("results").len() as u64, tasks);
    // Each task's events and result were written, in fewer transactions than records.
    let writes = f64_at(d, "writes_per_task");
    let commits = f64_at(d, "commits_per_task");
    assert!(writes >= 7.0, "{d}");
    assert!(commits > 0.0 && commits < writes, "{d}");

    // The ratios are the figures' own, against the raw rates measured in the same run.
    let raw = &b["durable"]["raw"];
    let (sequential, concurrent, batched) = (
        f64_at(raw, "sequential_cas_per_s"),
        f64_at(raw, "concurrent_cas_per_s"),
        f64_at(raw, "batched_writes_per_s"),
    );
    assert!(
        sequential > 0.0 && concurrent > 0.0 && batched > 0.0,
        "{raw}"
    );
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
    let ratio = f64_at(d, "ratio_to_sequential_cas");
    assert!(close(ratio, tasks_per_s / sequential), "{d}");
    assert!(close(
        f64_at(d, "ratio_to_concurrent_cas"),
        tasks_per_s / concurrent
    ));
    assert!(close(
        f64_at(d, "writes_ratio_to_batched"),
        tasks_per_s * writes / batched
    ));
    assert_eq!(d["goal_met"], ratio >= 0.5, "{d}");
    assert!(close(
        f64_at(d, "ratio_to_memory"),
        tasks_per_s / f64_at(&b, "tasks_per_s")
    ));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(&server.url()),
        "the NATS address is not written out"
    );
    // (The table's distributed lines: the unit tests of `bench_dag::distributed`.)
}

#[test]
fn nats_without_an_etcd_store_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("b.redb");
    let file = file.to_str().expect("utf-8");
    for args in [
        vec![
            "bench",
            "dag",
            "--store",
            file,
            "--nats",
            "nats://127.0.0.1:1",
        ],
        vec!["bench", "dag", "--nats", "nats://127.0.0.1:1"],
    ] {
        let out = quorate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--store"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    assert!(!std::path::Path::new(file).exists(), "nothing made");
}

#[test]
fn answers_longer_than_an_envelope_string_are_refused_before_anything_runs() {
    let out = quorate(&[
        "bench",
        "dag",
        "--store",
        "etcd://127.0.0.1:1/bench",
        "--nats",
        "nats://127.0.0.1:1",
        "--result-bytes",
        "20000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--result-bytes 20000 with --nats")
            && stderr.contains("at most 16384 bytes"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no run, no figure");
}
