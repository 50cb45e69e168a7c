//! A budget that asks instead of stopping, end to end on the binary: a task that runs out of
//! its slice parks the run (exit 7) with its request in `--json`; `quorate resume --grant`
//! completes it within the run's budget; a grant larger than what is left is bad input and
//! changes nothing; `--reject` ends the task `stopped-limit`; a second resume of a finished
//! run says so.

mod support;

use support::{arg, plan, quorate, stdout_json, temp_path};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `quorate resume ID --store F` with `rest` after it.
fn resume(id: &str, store: &std::path::Path, rest: &[&str]) -> std::process::Output {
    let mut args = vec!["resume", id, "--store", arg(store)];
    args.extend_from_slice(rest);
    quorate(&args)
}

/// `run budget_ask.toml --store F --json`: exit 7, the request in the JSON; the run's id.
fn asking(store: &std::path::Path) -> String {
    let out = quorate(&[
        "run",
        arg(&plan("budget_ask.toml")),
        "--store",
        arg(store),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert!(stderr(&out).contains("--grant"), "{}", stderr(&out));
    let stopped = stdout_json(&out);
    assert_eq!(stopped["stop_reason"], "waiting-approval");
    assert_eq!(stopped["stop_detail"], "waiting-approval at enrich");
    let enrich = &stopped["tasks"][2];
    assert_eq!(enrich["id"], "enrich");
    assert_eq!(enrich["state"], "waiting-approval");
    let ask = &enrich["top_up"];
    assert_eq!(ask["component"], "steps");
    assert_eq!(ask["needed"], 1);
    assert_eq!(ask["spent"]["steps"], 3);
    assert_eq!(ask["granted"]["steps"], 3);
    // 30 - 2 (reserve) - 3 (enrich's slice) - 2 - 2 (what fetch and notify spent).
    assert_eq!(ask["left"]["steps"], 21);
    assert_eq!(stopped["tasks"][3]["state"], "pending");
    stopped["run_id"].as_str().expect("a run id").to_string()
}

#[test]
fn a_top_up_is_granted_within_what_is_left_once() {
    let store = temp_path("ask.redb");
    let id = asking(&store);
    let shown = || stdout_json(&quorate(&["show", &id, "--store", arg(&store), "--json"]));
    let before = shown();

    // More than the run has left: bad input, naming task, component, asked and left; nothing
    // changes (not the record, not the log).
    let events = |store: &std::path::Path| {
        let kept = quorate::durable::RunStore::open(store).expect("opens");
        let run = kept.run(&id).expect("the run");
        kept.events(run.run_id).expect("events")
    };
    let logged = events(&store);
    let out = resume(&id, &store, &["--grant", "enrich=steps:100"]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    for needle in ["enrich", "100 steps", "21 steps left"] {
        assert!(e.contains(needle), "{needle}: {e}");
    }
    assert_eq!(shown(), before);
    assert_eq!(events(&store), logged);
    // A task the plan does not have: bad input too.
    let out = resume(&id, &store, &["--grant", "enrihc=steps:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("enrihc"));
    // Two answers for one task: bad input.
    let out = resume(
        &id,
        &store,
        &["--grant", "enrich=steps:1", "--reject", "enrich"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("two answers"), "{}", stderr(&out));
    assert_eq!(shown(), before);

    let out = resume(
        &id,
        &store,
        &["--grant", "enrich=steps:5,tokens:200", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let done = stdout_json(&out);
    assert_eq!(done["stop_reason"], "completed");
    let enrich = &done["tasks"][2];
    assert_eq!(enrich["state"], "completed");
    assert_eq!(enrich["granted"]["steps"], 8, "its 3 and the 5 granted");
    assert_eq!(enrich["granted"]["tokens"], 300);
    assert!(enrich.get("top_up").is_none());
    assert_eq!(done["tasks"][3]["state"], "completed");
    // granted <= limit, in every component.
    for c in ["steps", "tool_calls", "tokens", "cost"] {
        let (g, l) = (&done["budget"]["granted"][c], &done["budget"]["limit"][c]);
        assert!(g.as_u64() <= l.as_u64(), "{c}: {g} > {l}");
    }
    // Each lookup ran once (the three done before are found by ActionId, not repeated).
    assert_eq!(
        done["effects"], 5,
        "a read is no effect: 1 mail + 4 lookups"
    );

    // The grant is in the log as a decision, once, and in the record with its time.
    let decided: Vec<_> = events(&store)
        .into_iter()
        .filter_map(|e| match e.kind {
            quorate::coordinator::EventKind::TopUpDecided { answer } => Some(answer),
            _ => None,
        })
        .collect();
    assert_eq!(
        decided,
        [quorate::coordinator::TopUp::Grant(
            quorate::protocols::Budget::new(5, 0, 200, 0)
        )]
    );
    let shown = shown();
    assert_eq!(shown["top_ups"][0]["task"], "enrich");
    assert!(shown["top_ups"][0]["at_unix_ms"].as_u64() > Some(0));
    assert_eq!(shown["results"]["summary"], "4 sites enriched");
    // The run's page shows the request and the grant.
    let page = quorate(&["show", &id, "--store", arg(&store), "--html", "-"]);
    let html = String::from_utf8_lossy(&page.stdout);
    assert!(html.contains("top-up requested: out of steps, needs 1 more"));
    assert!(html.contains("top-up granted"));

    // A second resume of the finished run says so and changes nothing.
    let logged = events(&store);
    let out = resume(&id, &store, &["--grant", "enrich=steps:5"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("already stopped (completed)"));
    assert_eq!(events(&store), logged);
    assert_eq!(
        stdout_json(&quorate(&["show", &id, "--store", arg(&store), "--json"])),
        shown
    );
    let _ = std::fs::remove_dir_all(store.parent().expect("a temp dir"));
}

#[test]
fn a_rejected_top_up_stops_the_task_at_its_limit() {
    let store = temp_path("reject.redb");
    let id = asking(&store);
    let out = resume(&id, &store, &["--reject", "enrich", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let done = stdout_json(&out);
    assert_eq!(done["stop_reason"], "stopped-limit");
    assert_eq!(done["stop_detail"], "stopped-limit (steps)");
    assert_eq!(done["tasks"][2]["state"], "stopped-limit");
    assert_eq!(done["tasks"][2]["spent"]["steps"], 3);
    assert_eq!(done["tasks"][3]["state"], "cancelled");
    let _ = std::fs::remove_dir_all(store.parent().expect("a temp dir"));
}

#[test]
fn without_a_store_the_run_stops_waiting_with_the_request_in_its_output() {
    let out = quorate(&["run", arg(&plan("budget_ask.toml"))]);
    assert_eq!(out.status.code(), Some(7));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("top-up   enrich ran out of steps: needs 1 more"),
        "{text}"
    );
}
