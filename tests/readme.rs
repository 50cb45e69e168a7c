//! The README's plan file in brief, run as the README says: `check` accepts it, `run` stops
//! waiting for approval (exit 7), and `run --approve save` completes it with the write recovered
//! after its lost answer (one effect), and `report` turns its trace into a page. The Rust block
//! of the README is a doctest of the crate.

mod support;

use support::{quorate, stdout_json, temp_path};

/// The first ```toml block of the README.
fn readme_plan() -> String {
    let readme = include_str!("../README.md");
    let start = readme
        .find("```toml\n")
        .expect("the README has a toml block")
        + "```toml\n".len();
    let len = readme[start..].find("```").expect("the toml block ends");
    readme[start..start + len].to_string()
}

#[test]
fn the_readme_plan_checks_waits_for_approval_and_completes_once_approved() {
    let path = temp_path("readme_plan.toml");
    std::fs::write(&path, readme_plan()).expect("plan written");
    let path = path.to_str().expect("utf-8 path");

    let check = quorate(&["check", path]);
    assert!(
        check.status.success(),
        "check refused the README's plan: {}",
        String::from_utf8_lossy(&check.stderr)
    );

    let waiting = quorate(&["run", path, "--json"]);
    assert_eq!(waiting.status.code(), Some(7));
    assert_eq!(stdout_json(&waiting)["stop_reason"], "waiting-approval");

    let trace = temp_path("readme_plan.jsonl");
    let trace = trace.to_str().expect("utf-8 path");
    let approved = quorate(&["run", path, "--json", "--approve", "save", "--trace", trace]);
    assert_eq!(approved.status.code(), Some(0));
    let report = stdout_json(&approved);
    assert_eq!(report["stop_reason"], "completed");
    assert_eq!(report["actions"]["unknown"], 1, "the lost answer: {report}");
    assert_eq!(
        report["actions"]["recovered"], 1,
        "recovered by query: {report}"
    );
    assert_eq!(report["actions"]["duplicate_effects"], 0);

    let page = temp_path("readme_report.html");
    let page_path = page.to_str().expect("utf-8 path");
    let written = quorate(&["report", trace, "-o", page_path]);
    assert!(
        written.status.success(),
        "report refused the trace: {}",
        String::from_utf8_lossy(&written.stderr)
    );
    let html = std::fs::read_to_string(&page).expect("the page was written");
    for task in ["gather", "save"] {
        assert!(html.contains(task), "the page names task {task}");
    }
}
