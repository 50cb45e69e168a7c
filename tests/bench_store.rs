//! `quorate bench dag --store FILE` at a tiny size: it measures the durable path beside the
//! in-memory one and prints both, with the bytes on disk per task; an existing FILE is refused.
//! (Most of its time is the raw actix baseline of 200 000 round trips, in a debug build.)

mod support;

use support::{arg, quorate, stdout_json, temp_path};

#[test]
fn bench_dag_with_a_store_prints_both_paths() {
    let store = temp_path("bench.redb");
    let tiny = [
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
        arg(&store),
    ];
    let mut json_args = tiny.to_vec();
    json_args.push("--json");
    let out = quorate(&json_args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = stdout_json(&out);
    assert_eq!(b["tasks"], 6);
    assert!(b["tasks_per_s"].as_f64() > Some(0.0));
    let d = &b["durable"];
    assert_eq!(d["store"], arg(&store));
    assert_eq!(d["tasks_per_s_runs"].as_array().map(Vec::len), Some(1));
    let (durable, memory) = (
        d["tasks_per_s"].as_f64().expect("durable tasks/s"),
        b["tasks_per_s"].as_f64().expect("tasks/s"),
    );
    assert!(durable > 0.0);
    let ratio = d["ratio_to_memory"].as_f64().expect("ratio");
    assert!((ratio - durable / memory).abs() < 1e-9 * ratio.max(1.0));
    // The file of the last run is left: its size is what was measured, per task.
    let file = std::fs::metadata(&store).expect("the file is left").len();
    assert!(file > 0);
    assert!(d["bytes_per_task"].as_f64() > Some(0.0));
    assert_eq!(
        d["bytes_per_task"].as_f64(),
        Some(d["file_bytes"].as_f64().expect("bytes") / 6.0)
    );

    // The file exists now: refused, not overwritten.
    let out = quorate(&tiny);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    assert_eq!(std::fs::metadata(&store).expect("still there").len(), file);
    // (The table's `durable` line: `DagBench::summary`'s doctest.)
    let _ = std::fs::remove_dir_all(store.parent().expect("a temp dir"));
}
