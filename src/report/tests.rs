//! The page from hand-made traces: what it gathers, and that no string from the trace reaches
//! the HTML unescaped.

use std::sync::Arc;

use quorate_coordinator::{Event, EventKind, PlanNode, StopReason};
use quorate_protocols::{ActionId, Budget, NodeId, RunId, TaskId, TaskState};
use quorate_workers::CallEvent;
use serde_json::json;

use super::*;

fn ev(seq: u64, task: Option<&str>, at_ms: u64, kind: EventKind) -> Event {
    Event {
        seq,
        run_id: RunId::from_u128(1),
        peer: None,
        task: task.map(Arc::from),
        at_ms,
        kind,
    }
}

fn node(id: &str, deps: &[&str]) -> PlanNode {
    PlanNode {
        id: NodeId::new(id).unwrap(),
        deps: deps.iter().map(|d| NodeId::new(*d).unwrap()).collect(),
    }
}

/// `fetch` completes with a hostile result after a recovered call; `save` fails its acceptance
/// check; one late reply is rejected.
fn trace() -> Vec<Event> {
    let action = ActionId::new(TaskId::from_u128(5), 0, 0);
    let t = |to| EventKind::Transition {
        from: TaskState::Running,
        to,
    };
    vec![
        ev(
            0,
            None,
            0,
            EventKind::RunStarted {
                tasks: 2,
                plan_version: 1,
                nodes: vec![node("fetch", &[]), node("save", &["fetch"])],
            },
        ),
        ev(
            1,
            Some("fetch"),
            1,
            EventKind::Dispatched {
                attempt: 1,
                worker: 0,
                task_id: TaskId::from_u128(5),
                granted: Budget::new(6, 3, 200, 10),
            },
        ),
        ev(
            2,
            Some("fetch"),
            2,
            EventKind::of_call(CallEvent::CallStarted {
                action,
                tool: "db.read".into(),
                reserved: Budget::new(0, 1, 200, 10),
                model: None,
            }),
        ),
        ev(
            3,
            Some("fetch"),
            60,
            EventKind::of_call(CallEvent::OutcomeUnknown { action }),
        ),
        ev(
            4,
            Some("fetch"),
            61,
            EventKind::of_call(CallEvent::Queried {
                action,
                found: true,
            }),
        ),
        ev(
            5,
            Some("fetch"),
            61,
            EventKind::of_call(CallEvent::Recovered { action }),
        ),
        ev(6, Some("fetch"), 62, EventKind::ReplyAccepted),
        ev(
            7,
            Some("fetch"),
            62,
            EventKind::ResultCommitted {
                result: json!({"note": "<script>alert('x')</script>"}).into(),
            },
        ),
        ev(8, Some("fetch"), 62, t(TaskState::Completed)),
        ev(
            9,
            Some("fetch"),
            62,
            EventKind::TaskClosed {
                spent: Budget::new(2, 1, 0, 0),
            },
        ),
        ev(
            10,
            Some("save"),
            63,
            EventKind::Dispatched {
                attempt: 1,
                worker: 1,
                task_id: TaskId::from_u128(6),
                granted: Budget::new(4, 1, 100, 5),
            },
        ),
        ev(11, Some("fetch"), 64, EventKind::RejectedLate),
        ev(
            12,
            Some("save"),
            70,
            EventKind::AcceptanceFailed {
                observation: "read-back <unchanged>".into(),
            },
        ),
        ev(
            13,
            None,
            70,
            EventKind::StopRequested {
                reason: StopReason::Failed {
                    node: "save".into(),
                    observation: "acceptance check: read-back <unchanged>".into(),
                },
            },
        ),
        ev(14, Some("save"), 70, t(TaskState::Failed)),
        ev(
            15,
            None,
            71,
            EventKind::RunStopped {
                stop_reason: "failed".into(),
            },
        ),
    ]
}

#[test]
fn the_view_gathers_states_budgets_calls_rejections_and_the_stop() {
    let view = RunView::of(&trace());
    let fetch = view.task("fetch").unwrap();
    assert_eq!(fetch.state, TaskState::Completed);
    assert_eq!((fetch.calls, fetch.unknown, fetch.recovered), (1, 1, 1));
    assert_eq!(fetch.returned(), Some(Budget::new(4, 2, 200, 10)));
    assert_eq!(
        fetch.result.as_ref().unwrap()["note"],
        "<script>alert('x')</script>"
    );
    let save = view.task("save").unwrap();
    assert_eq!(save.deps, ["fetch"]);
    assert_eq!(save.state, TaskState::Failed);
    assert_eq!(save.failure.as_deref(), Some("read-back <unchanged>"));
    assert_eq!(save.spent, None, "never closed");
    assert_eq!(view.rejected.get("late"), Some(&1));
    assert_eq!(view.stop_reason.as_deref(), Some("failed"));
    assert!(view
        .stop_detail
        .as_deref()
        .unwrap()
        .contains("read-back <unchanged>"));
    // The run's lane, then workers 0 and 1; fetch's attempt ran from 1 to 62 ms.
    let workers: Vec<Option<usize>> = view.lanes.iter().map(|l| l.worker).collect();
    assert_eq!(workers, [None, Some(0), Some(1)]);
    let span = &view.lanes[1].spans[0];
    assert_eq!((span.start_ms, span.end_ms), (1, 62));
    assert_eq!(span.end, Some(TaskState::Completed));
    let kinds: Vec<parse::MarkKind> = view.lanes[1].marks.iter().map(|m| m.kind).collect();
    use parse::MarkKind::*;
    assert_eq!(
        kinds,
        [Call, Unknown, Query, Recovered, Committed, Rejected]
    );
}

#[test]
fn every_string_from_the_trace_is_escaped() {
    let html = render_html(&trace());
    // The only script elements are the page's own two.
    assert_eq!(html.matches("<script").count(), 2, "{html}");
    assert!(!html.contains("alert('x')</script>"));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("read-back &lt;unchanged&gt;"));
    // In the embedded events too, where HTML escapes do not apply: JSON's own.
    assert!(html.contains("\\u003cscript\\u003e"));
    // Every task is on the page with its state.
    for (id, state) in [("fetch", "completed"), ("save", "failed")] {
        assert!(
            html.contains(&format!("data-task=\"{id}\" data-state=\"{state}\"")),
            "{id}"
        );
    }
}

#[test]
fn a_line_that_is_not_an_event_is_named() {
    let good = serde_json::to_string(&trace()[0]).unwrap();
    let text = format!("{good}\n\n{{\"seq\":1}}\n");
    match parse_trace(&text) {
        Err(ReportError::Line { line, .. }) => assert_eq!(line, 3),
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse_trace("\n"), Err(ReportError::Empty)));
    assert_eq!(parse_trace(&good).unwrap(), vec![trace()[0].clone()]);
}

#[test]
fn a_trace_without_the_plan_still_shows_every_task_it_names() {
    let events: Vec<Event> = trace()
        .into_iter()
        .map(|mut e| {
            if let EventKind::RunStarted { nodes, .. } = &mut e.kind {
                nodes.clear();
            }
            e
        })
        .collect();
    let view = RunView::of(&events);
    let ids: Vec<&str> = view.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["fetch", "save"]);
    assert!(view.tasks[1].deps.is_empty(), "no deps without the plan");
    assert!(render_html(&events).contains("data-task=\"save\""));
}
