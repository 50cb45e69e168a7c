//! `quorate report` end to end: a traced run through the binary, its page opened in headless
//! Chromium, the rendered DOM checked for every task with its state and for what the page's
//! script builds, and a screenshot taken.
//!
//! Chromium is required (Debian package `chromium`; `.ci/run` installs it): without it these
//! tests fail, they do not skip. `QUORATE_UPDATE_SCREENSHOT=1` also writes the screenshot to
//! `docs/report.png`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A run that shows most of what the page draws: two fetches (one of which proposes a call
/// outside its capabilities, refused at the gate), a reconcile whose result carries markup, a
/// refund that needs approval, and a save whose answer is lost after it committed (unknown,
/// queried, recovered).
const SHOWCASE: &str = r#"
[run]
workers = 3
budget = { steps = 80, tool_calls = 12, tokens = 2000, cost = 100 }
reserve = { steps = 4 }
capabilities = ["web.read", "db.read", "db.save", "payments.refund"]
deadline_ms = 10000
call_timeout_ms = 60
attempt_timeout_ms = 2000

[[tasks]]
id = "fetch-web"
capabilities = ["web.read"]
budget = { steps = 8, tool_calls = 2, tokens = 400, cost = 20 }
acceptance = { checks = [{ kind = "non-empty" }] }
script = [
  { do = "call", tool = "web.read", params = { url = "https://example.org/orders/7" }, side-effect = "read-only", output = { status = "paid", total = 30 }, cost = { tokens = 120, cost = 3 } },
  { do = "answer", value = { status = "paid", total = 30, source = "web" } },
]

[[tasks]]
id = "fetch-db"
capabilities = ["db.read"]
budget = { steps = 8, tool_calls = 3, tokens = 400, cost = 20 }
acceptance = { checks = [{ kind = "non-empty" }] }
script = [
  { do = "call", tool = "db.read", params = { key = "orders/7" }, side-effect = "read-only", output = { status = "paid", total = 30 } },
  { do = "call", tool = "db.delete", params = { key = "orders/7" }, side-effect = "non-idempotent-write", output = "deleted" },
  { do = "answer", value = { status = "paid", total = 30, source = "db" } },
]

[[tasks]]
id = "reconcile"
deps = ["fetch-web", "fetch-db"]
budget = { steps = 8, tool_calls = 0, tokens = 400, cost = 20 }
acceptance = { checks = [{ kind = "field-equals", field = "/agree", value = true }] }
script = [
  { do = "answer", value = { agree = true, total = 30, note = "<script>alert('x')</script>" } },
]

[[tasks]]
id = "refund"
deps = ["reconcile"]
capabilities = ["payments.refund"]
budget = { steps = 6, tool_calls = 2, tokens = 100, cost = 20 }
acceptance = { kinds = ["verified-conclusion"], checks = [{ kind = "read-back-changed", key = "refunds/7" }] }
script = [
  { do = "call", tool = "payments.refund", params = { key = "refunds/7", amount = 30 }, needs-approval = true, side-effect = "non-idempotent-write", output = "refunded" },
]

[[tasks]]
id = "save"
deps = ["reconcile"]
capabilities = ["db.save"]
budget = { steps = 6, tool_calls = 3, tokens = 200, cost = 10 }
acceptance = { kinds = ["verified-conclusion"], checks = [{ kind = "read-back-changed", key = "orders/7" }] }
script = [
  { do = "call", tool = "db.save", params = { key = "orders/7", status = "reconciled" }, outcome = "timeout-after-commit", output = "saved" },
]
"#;

/// Runs the binary with `args`; panics with its stderr unless it exits with `code`.
fn quorate(args: &[&std::ffi::OsStr], code: i32) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(args)
        .output()
        .expect("the binary runs");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The showcase run's trace, its `--json` report and its page.
fn showcase() -> (PathBuf, serde_json::Value, PathBuf) {
    let plan = support::temp_path("showcase.toml");
    std::fs::write(&plan, SHOWCASE).expect("write the plan");
    let trace = plan.with_file_name("showcase.jsonl");
    let page = plan.with_file_name("report.html");
    let out = quorate(
        &[
            "run".as_ref(),
            plan.as_os_str(),
            "--json".as_ref(),
            "--approve".as_ref(),
            "all".as_ref(),
            "--chaos".as_ref(),
            "dup=0.3".as_ref(),
            "--seed".as_ref(),
            "2".as_ref(),
            "--trace".as_ref(),
            trace.as_os_str(),
        ],
        0,
    );
    let report = serde_json::from_slice(&out.stdout).expect("a JSON report");
    quorate(
        &[
            "report".as_ref(),
            trace.as_os_str(),
            "-o".as_ref(),
            page.as_os_str(),
        ],
        0,
    );
    (trace, report, page)
}

/// Runs headless Chromium with `args` on `page`; fails (does not skip) without Chromium.
fn chromium(args: &[&str], page: &Path) -> std::process::Output {
    let url = format!("file://{}", page.display());
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(args)
        .arg(&url)
        .output()
        .unwrap_or_else(|e| {
            panic!("chromium is needed for this test (apt-get install -y chromium): {e}")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_rendered_page_shows_every_task_with_its_state_and_the_scripts_event_log() {
    let (trace, report, page) = showcase();
    let dom = String::from_utf8(chromium(&["--dump-dom"], &page).stdout).expect("UTF-8 DOM");
    let tasks = report["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 5);
    for task in tasks {
        let (id, state) = (
            task["id"].as_str().unwrap(),
            task["state"].as_str().unwrap(),
        );
        assert_eq!(state, "completed", "{id}");
        assert!(
            dom.contains(&format!("data-task=\"{id}\" data-state=\"{state}\"")),
            "{id} is in the table as {state}"
        );
        assert!(
            dom.contains(&format!("<g class=\"node {state}\" data-task=\"{id}\"")),
            "{id} is in the DAG as {state}"
        );
    }
    assert!(
        dom.contains("id=\"stop-reason\">completed<"),
        "the stop reason"
    );
    // Built by the page's script: the filter and one row per event of the trace.
    let events = std::fs::read_to_string(&trace).unwrap().lines().count();
    assert!(dom.contains("<select id=\"event-filter\">"));
    assert!(dom.contains("<div id=\"event-log\">"));
    assert_eq!(dom.matches("<tr class=\"event-row\"").count(), events);
    // The call's story is drawn, and the refused call is listed with its reason.
    for mark in [
        "m-unknown",
        "m-query",
        "m-recovered",
        "m-refused",
        "m-approval",
    ] {
        assert!(dom.contains(&format!("class=\"mark {mark}\"")), "{mark}");
    }
    assert!(dom.contains("<code>db.delete</code>"));
    // The result's markup stayed text: no element came of it.
    assert!(
        !dom.contains("<script>alert"),
        "the result's script is not an element"
    );
    assert!(dom.contains("&lt;script&gt;alert"), "it is shown as text");
}

#[test]
fn a_screenshot_of_the_page_is_taken() {
    let (_, _, page) = showcase();
    let shot = page.with_file_name("report.png");
    let arg = format!("--screenshot={}", shot.display());
    chromium(&[arg.as_str(), "--window-size=1400,1000"], &page);
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert!(
        png.len() > 20_000,
        "more than a blank page: {} bytes",
        png.len()
    );
    if std::env::var_os("QUORATE_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report.png");
        std::fs::write(docs, &png).expect("write docs/report.png");
    }
}

#[test]
fn a_bad_trace_is_bad_input_that_names_its_line() {
    let trace = support::temp_path("bad.jsonl");
    std::fs::write(&trace, "{\"seq\": 0}\n").unwrap();
    let out = quorate(&["report".as_ref(), trace.as_os_str()], 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("line 1 is not a trace event"), "{stderr}");
    let missing = trace.with_file_name("missing.jsonl");
    let out = quorate(&["report".as_ref(), missing.as_os_str()], 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.jsonl"));
}
