//! The durable approval flow end to end, on the binary: a run that stops waiting for an
//! approval is kept, `quorate resume --approve` completes it, a second resume changes nothing,
//! and `--approve` naming an unknown task is bad input.

mod support;

use support::{arg, plan, quorate, stdout_json, temp_path};

#[test]
fn an_approval_stop_is_kept_and_resumed_once() {
    let store = temp_path("approval.redb");
    let plan = plan("approval_required.toml");

    let out = quorate(&["run", arg(&plan), "--store", arg(&store), "--json"]);
    assert_eq!(out.status.code(), Some(7));
    let stopped = stdout_json(&out);
    assert_eq!(stopped["stop_reason"], "waiting-approval");
    assert_eq!(stopped["effects"], 0);
    let id = stopped["run_id"].as_str().expect("a run id").to_string();

    let listed = stdout_json(&quorate(&["runs", "--store", arg(&store), "--json"]));
    assert_eq!(listed[0]["run_id"], id.as_str());
    assert_eq!(listed[0]["status"], "waiting-approval");
    assert_eq!(listed[0]["tasks"]["waiting-approval"], 1);

    // A task the plan does not have: bad input, and the run is left as it was.
    let out = quorate(&["resume", &id, "--store", arg(&store), "--approve", "refnud"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refnud"));
    let listed = stdout_json(&quorate(&["runs", "--store", arg(&store), "--json"]));
    assert_eq!(listed[0]["status"], "waiting-approval");

    let out = quorate(&[
        "resume",
        &id,
        "--store",
        arg(&store),
        "--approve",
        "refund",
        "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = stdout_json(&out);
    assert_eq!(done["stop_reason"], "completed");
    assert_eq!(done["run_id"], id.as_str());
    assert_eq!(done["effects"], 1, "exactly one payment");
    let attempts: Vec<u64> = done["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["attempts"].as_u64().expect("attempts"))
        .collect();
    assert_eq!(
        attempts,
        [1, 2],
        "check is not run again; refund gets a new attempt"
    );

    // The approval is in the log as a decision.
    let kept = quorate::durable::RunStore::open(&store).expect("opens");
    let run = kept.run(&id).expect("the run");
    let decided = kept
        .events(run.run_id)
        .expect("events")
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                quorate::coordinator::EventKind::ApprovalDecided { .. }
            )
        })
        .count();
    assert_eq!(decided, 1);
    assert_eq!(run.approvals.len(), 1);
    assert_eq!(run.approvals[0].approve, "refund");
    drop(kept);

    let shown = stdout_json(&quorate(&["show", &id, "--store", arg(&store), "--json"]));
    assert_eq!(shown["stop_reason"], "completed");
    assert_eq!(shown["results"]["refund"], "refunded");
    assert_eq!(shown["tasks"], done["tasks"]);

    // A second resume of the finished run says so, exits with the run's own code and changes
    // nothing.
    let out = quorate(&["resume", &id, "--store", arg(&store), "--approve", "refund"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already stopped (completed)"));
    assert!(out.stdout.is_empty());
    let again = stdout_json(&quorate(&["show", &id, "--store", arg(&store), "--json"]));
    assert_eq!(again, shown);

    // Its page, from the kept log: both tasks, the plan's edge, the approval and the result.
    let page = store.with_file_name("approval.html");
    let out = quorate(&["show", &id, "--store", arg(&store), "--html", arg(&page)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).expect("the page was written");
    for needle in ["check", "refund", "refunded", "completed", &id] {
        assert!(html.contains(needle), "the page shows {needle}");
    }
    assert!(
        html.contains("class=\"edge"),
        "the kept run-started lists the plan, so the DAG has its edge"
    );
    let _ = std::fs::remove_dir_all(store.parent().expect("a temp dir"));
}

#[test]
fn an_unknown_run_is_bad_input() {
    let store = temp_path("empty.redb");
    for cmd in ["show", "resume"] {
        let out = quorate(&[
            cmd,
            "01a233b3-3512-76df-9428-9cb2478a4c1f",
            "--store",
            arg(&store),
        ]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no run"),
            "{cmd}"
        );
    }
    let _ = std::fs::remove_dir_all(store.parent().expect("a temp dir"));
}
