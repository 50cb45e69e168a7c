//! `quorate run --otlp-endpoint` (cargo feature `otlp`): the binary exports its spans over
//! OTLP http/json to a collector on loopback, here a small HTTP server in the test, and the
//! span tree is the run's: one run span, an attempt span per attempt under it, the tool calls
//! under their attempts.
//!
//! CI runs it with `cargo test -p quorate --features otlp --test otlp_export`.
#![cfg(feature = "otlp")]

mod support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// Serves `POST /v1/traces` on a loopback port: answers each request `200 {}` and sends its
/// path and body on the channel. Runs until the test process ends.
fn collector() -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("bound").port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || serve(stream, &tx));
        }
    });
    (port, rx)
}

/// Answers the requests of one connection (the client may keep it alive for several).
fn serve(stream: TcpStream, tx: &mpsc::Sender<(String, Vec<u8>)>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut out = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().expect("a content length");
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let _ = tx.send((path, body));
        let response =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if out.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// One exported span, with its attributes as strings.
#[derive(Debug)]
struct Span {
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

/// The spans of one OTLP/JSON export request.
fn spans(body: &[u8]) -> Vec<Span> {
    let request: Value = serde_json::from_slice(body).expect("the export is JSON");
    let mut out = Vec::new();
    for resource in request["resourceSpans"].as_array().expect("resourceSpans") {
        for scope in resource["scopeSpans"].as_array().expect("scopeSpans") {
            for span in scope["spans"].as_array().expect("spans") {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let attributes = span["attributes"]
                    .as_array()
                    .map(|list| {
                        list.iter()
                            .map(|a| {
                                let value = &a["value"];
                                let v = value
                                    .get("stringValue")
                                    .or_else(|| value.get("intValue"))
                                    .map(|v| match v {
                                        Value::String(s) => s.clone(),
                                        other => other.to_string(),
                                    })
                                    .unwrap_or_else(|| value.to_string());
                                (text(&a["key"]), v)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Span {
                    name: text(&span["name"]),
                    trace: text(&span["traceId"]),
                    id: text(&span["spanId"]),
                    parent: text(&span["parentSpanId"]),
                    attributes,
                });
            }
        }
    }
    out
}

#[test]
fn the_run_exports_its_span_tree_over_otlp() {
    let (port, received) = collector();
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run", "--json", "--otlp-endpoint"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg(support::plan("duplicate_reply.toml"))
        .output()
        .expect("run quorate");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    let run_id = report["run_id"].as_str().expect("run id");

    // The process sent everything before it exited; collect what came.
    let mut all = Vec::new();
    while let Ok((path, body)) = received.recv_timeout(Duration::from_millis(200)) {
        assert_eq!(path, "/v1/traces");
        all.extend(spans(&body));
    }

    let runs: Vec<&Span> = all.iter().filter(|s| s.name == "quorate.run").collect();
    assert_eq!(runs.len(), 1, "one run span: {all:#?}");
    let run = runs[0];
    assert_eq!(run.attributes["run"], run_id);
    assert_eq!(run.attributes["stop_reason"], "completed");
    assert!(run.parent.is_empty(), "the run span is a root");

    let attempts: Vec<&Span> = all.iter().filter(|s| s.name == "quorate.attempt").collect();
    let expected: u64 = report["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["attempts"].as_u64().expect("attempts"))
        .sum();
    assert_eq!(
        attempts.len() as u64,
        expected,
        "an attempt span per attempt"
    );
    for task in report["tasks"].as_array().expect("tasks") {
        let node = task["id"].as_str().expect("id");
        let mine: Vec<&&Span> = attempts
            .iter()
            .filter(|a| a.attributes["node"] == node)
            .collect();
        assert_eq!(
            mine.len() as u64,
            task["attempts"].as_u64().expect("attempts"),
            "{node}"
        );
        for (i, a) in mine.iter().enumerate() {
            assert_eq!(a.parent, run.id, "{node}'s attempt is under the run");
            assert_eq!(a.trace, run.trace);
            assert_eq!(a.attributes["run"], run_id);
            assert_eq!(a.attributes["attempt"], (i + 1).to_string());
            assert!(!a.attributes["task"].is_empty());
            assert_eq!(a.attributes["outcome"], "answer");
        }
    }

    let calls: Vec<&Span> = all
        .iter()
        .filter(|s| s.name == "quorate.tool_call")
        .collect();
    let executed = report["actions"]["executed"].as_u64().expect("executed");
    assert_eq!((calls.len() as u64, executed), (1, 1), "one call: {all:#?}");
    let call = calls[0];
    let attempt = attempts
        .iter()
        .find(|a| a.id == call.parent)
        .expect("the call is under an attempt");
    assert_eq!(attempt.attributes["node"], "count");
    assert_eq!(call.attributes["tool"], "db.read");
    assert_eq!(call.attributes["outcome"], "answered");
    for key in ["run", "task", "attempt"] {
        assert_eq!(call.attributes[key], attempt.attributes[key], "{key}");
    }
}

#[test]
fn an_endpoint_that_is_not_http_is_bad_input() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["run", "--otlp-endpoint", "127.0.0.1:4318"])
        .arg(support::plan("duplicate_reply.toml"))
        .output()
        .expect("run quorate");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--otlp-endpoint") && stderr.contains("http://"),
        "{stderr}"
    );
}
