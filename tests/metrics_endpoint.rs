//! `quorate run --metrics-addr`: the binary serves Prometheus text on loopback, and what it
//! serves after the run matches the run's `--json` report.

mod support;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::temp_path;

/// `count` reads once and sends its final reply twice (one duplicate rejected); `audit`, after
/// it, proposes a save it was not delegated: the gate refuses it and the run fails.
const PLAN: &str = r#"
[run]
workers = 1
budget = { steps = 30, tool_calls = 4, tokens = 500, cost = 20 }
reserve = { steps = 2 }
capabilities = ["db.read", "db.save"]
deadline_ms = 10000
call_timeout_ms = 100
attempt_timeout_ms = 2000

[[tasks]]
id = "count"
capabilities = ["db.read"]
budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 5 }
script = [
  { do = "duplicate-reply" },
  { do = "call", tool = "db.read", params = { table = "orders" }, side-effect = "read-only", output = { count = 3 } },
  { do = "answer", value = { count = 3 } },
]

[[tasks]]
id = "audit"
deps = ["count"]
capabilities = ["db.read"]
budget = { steps = 6, tool_calls = 2, tokens = 200, cost = 10 }
script = [
  { do = "call", tool = "db.save", params = { key = "audit/last" }, output = "saved" },
]
"#;

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("bound").port()
}

/// The body of `GET /metrics` at `port` (HTTP/1.0: the server closes after one response, with
/// no chunked encoding); retried until the listener answers or 10 s passed.
fn scrape(port: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut stream) => {
                stream
                    .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                    .expect("send the request");
                let mut response = String::new();
                stream
                    .read_to_string(&mut response)
                    .expect("read the response");
                let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
                assert!(
                    head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
                    "{head}"
                );
                return body.to_string();
            }
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("nothing listens on port {port}: {e}"),
        }
    }
}

/// One sample line: `name{k="v",...} value`.
#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parses the text format: every line is blank, a `#` comment, or a sample; panics otherwise.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line:?}"));
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed: {line:?}"));
                let labels = inner
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|pair| {
                        let (k, v) = pair
                            .split_once('=')
                            .unwrap_or_else(|| panic!("label: {line:?}"));
                        let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                        (
                            k.to_string(),
                            v.unwrap_or_else(|| panic!("unquoted: {line:?}"))
                                .to_string(),
                        )
                    })
                    .collect();
                (name, labels)
            }
            None => (series, Vec::new()),
        };
        let valid_name = name.chars().enumerate().all(|(i, c)| {
            c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
        });
        assert!(!name.is_empty() && valid_name, "bad metric name: {line:?}");
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    samples
}

/// The value of `name` with exactly `labels`, if served.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<u64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value as u64)
}

/// The sum of `name` over every label set.
fn sum(samples: &[Sample], name: &str) -> u64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value as u64)
        .sum()
}

/// Starts `quorate run PLAN --json --metrics-addr 127.0.0.1:PORT --metrics-hold-ms 30000`
/// with `extra` flags and reads its report line: the report comes first, and the endpoint stays
/// up for the hold after it. The caller scrapes, then kills the child.
fn held_run(port: u16, plan: &Path, extra: &[&OsStr]) -> (Child, String) {
    let mut child = support::quorate_command()
        .args(["run", "--json", "--metrics-hold-ms", "30000"])
        .args(extra)
        .arg("--metrics-addr")
        .arg(format!("127.0.0.1:{port}"))
        .arg(plan)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start quorate");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("read the report");
    (child, line)
}

#[test]
fn the_served_counters_match_the_json_report() {
    let plan = temp_path("metrics.toml");
    std::fs::write(&plan, PLAN).expect("write the plan");
    let port = free_port();
    let (mut child, line) = held_run(port, &plan, &[]);
    let served = scrape(port);
    child.kill().expect("end the hold");
    let _ = child.wait();
    let report: serde_json::Value = serde_json::from_str(&line).expect("the report is JSON");
    let samples = parse(&served);
    assert!(
        samples.iter().all(|s| s.name.starts_with("quorate_")),
        "{served}"
    );
    assert!(
        served.contains("# HELP quorate_tasks_total "),
        "described: {served}"
    );
    assert!(
        served.contains("# TYPE quorate_call_duration_seconds histogram"),
        "{served}"
    );
    let n = |v: &serde_json::Value| v.as_u64().expect("a count");

    // Tasks by state: this plan ends with one completed and one failed task.
    let mut states: HashMap<String, u64> = HashMap::new();
    for task in report["tasks"].as_array().expect("tasks") {
        *states
            .entry(task["state"].as_str().expect("state").to_string())
            .or_default() += 1;
    }
    assert_eq!(states.get("completed"), Some(&1), "{line}");
    assert_eq!(states.get("failed"), Some(&1), "{line}");
    for (state, count) in &states {
        assert_eq!(
            value(&samples, "quorate_tasks_total", &[("state", state)]),
            Some(*count),
            "{state}"
        );
    }
    assert_eq!(sum(&samples, "quorate_tasks_total"), 2);
    assert_eq!(
        value(&samples, "quorate_runs_total", &[("stop_reason", "failed")]),
        Some(1)
    );

    // Envelopes: the duplicate reply was rejected, and every reason is served.
    let m = &report["messages"];
    assert_eq!(n(&m["rejected_duplicate"]), 1);
    for reason in ["duplicate", "late", "stale", "unauthorized"] {
        assert_eq!(
            value(
                &samples,
                "quorate_envelopes_rejected_total",
                &[("reason", reason)]
            ),
            Some(n(&m[format!("rejected_{reason}").as_str()])),
            "{reason}"
        );
    }
    assert_eq!(
        value(&samples, "quorate_envelopes_sent_total", &[]),
        Some(n(&m["sent"]))
    );
    assert_eq!(
        value(&samples, "quorate_envelopes_delivered_total", &[]),
        Some(n(&m["delivered"]))
    );

    // Budget flows, component by component.
    let b = &report["budget"];
    assert!(n(&b["spent"]["steps"]) > 0);
    for (metric, component) in [
        ("quorate_budget_steps_total", "steps"),
        ("quorate_budget_tool_calls_total", "tool_calls"),
        ("quorate_budget_tokens_total", "tokens"),
        ("quorate_budget_cost_units_total", "cost"),
    ] {
        for flow in ["granted", "spent", "returned"] {
            assert_eq!(
                value(&samples, metric, &[("flow", flow)]),
                Some(n(&b[flow][component])),
                "{metric} {flow}"
            );
        }
    }

    // Gate decisions: one call executed, one refused for a missing capability.
    let a = &report["actions"];
    assert_eq!((n(&a["executed"]), n(&a["rejected"])), (1, 1));
    assert_eq!(
        value(
            &samples,
            "quorate_gate_decisions_total",
            &[("decision", "execute")]
        ),
        Some(1)
    );
    assert_eq!(
        value(
            &samples,
            "quorate_gate_decisions_total",
            &[("decision", "reject"), ("reason", "missing-capability")]
        ),
        Some(1)
    );

    // The executed call's latency, as a histogram with buckets.
    let calls = [("tool", "db.read"), ("outcome", "answered")];
    assert_eq!(
        value(&samples, "quorate_call_duration_seconds_count", &calls),
        Some(1)
    );
    assert!(samples
        .iter()
        .any(|s| s.name == "quorate_call_duration_seconds_bucket"));
    assert_eq!(
        value(
            &samples,
            "quorate_cas_conflicts_total",
            &[("store", "results")]
        ),
        Some(0)
    );
}

/// `--store` keeps the endpoint up for the hold too, after the report, and serves the run.
#[test]
fn a_kept_run_holds_its_endpoint_after_the_report() {
    let plan = temp_path("kept_metrics.toml");
    std::fs::write(&plan, PLAN).expect("write the plan");
    let port = free_port();
    let store = temp_path("kept_metrics.redb");
    let (mut child, line) = held_run(port, &plan, &["--store".as_ref(), store.as_os_str()]);
    std::thread::sleep(Duration::from_millis(300));
    let running = child.try_wait().expect("the child's status").is_none();
    let served = if running { scrape(port) } else { String::new() };
    child.kill().expect("end the hold");
    let _ = child.wait();
    assert!(running, "the process exited before its hold ran out");
    let report: serde_json::Value = serde_json::from_str(&line).expect("the report is JSON");
    assert_eq!(report["stop_reason"], "failed");
    assert_eq!(
        value(
            &parse(&served),
            "quorate_runs_total",
            &[("stop_reason", "failed")]
        ),
        Some(1)
    );
}

#[test]
fn a_taken_address_and_a_hold_without_an_address_are_bad_input() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("bound").to_string();
    let plan = support::plan("duplicate_reply.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run", "--metrics-addr", &addr])
        .arg(&plan)
        .output()
        .expect("run quorate");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--metrics-addr") && stderr.contains(&addr),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no run without its endpoint");

    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run", "--metrics-hold-ms", "10"])
        .arg(&plan)
        .output()
        .expect("run quorate");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--metrics-addr"));
}

/// The default build has no OTLP exporter: the flag says so instead of being ignored.
#[cfg(not(feature = "otlp"))]
#[test]
fn an_otlp_endpoint_without_the_feature_is_bad_input() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run", "--otlp-endpoint", "http://127.0.0.1:4318"])
        .arg(support::plan("duplicate_reply.toml"))
        .output()
        .expect("run quorate");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("built without OTLP"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing run");
}
