//! The page itself: header (stop reason and its first failing observation), the plan DAG, the
//! timeline, the tasks (state, budgets granted/spent/returned, calls, result), rejections, and
//! the event log the script builds from the embedded events.

use std::fmt::Write;

use quorate_coordinator::Event;
use quorate_protocols::Budget;

use super::assets::{CSS, JS};
use super::esc;
use super::parse::{RunView, TaskView};
use super::svg::{self, STATES};

/// Events embedded for the event log at most (a large run's page stays small).
const MAX_LOGGED: usize = 5000;

/// The whole page for `events` (in trace order), gathered into `view`.
pub(super) fn page(view: &RunView, events: &[Event]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>quorate run {run}</title><style>{CSS}</style></head><body>",
        run = esc(&view.run_id)
    );
    header(view, &mut out);
    out.push_str("<main>");
    out.push_str("<section id=\"plan\"><h2>Plan</h2>");
    svg::dag(view, &mut out);
    state_legend(&mut out);
    out.push_str("</section>");
    out.push_str("<section id=\"timeline\"><h2>Timeline</h2>");
    svg::timeline(view, &mut out);
    out.push_str(&svg::legend());
    out.push_str("</section>");
    tasks(view, &mut out);
    rejections(view, &mut out);
    out.push_str("<section id=\"events\"><h2>Events</h2>");
    if events.len() > MAX_LOGGED {
        let _ = write!(
            out,
            "<p class=\"note\">The first {MAX_LOGGED} of {} events.</p>",
            events.len()
        );
    }
    out.push_str("</section></main>");
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"run-data\">{}</script><script>{JS}</script>\
         </body></html>",
        data(view, events)
    );
    out
}

fn header(view: &RunView, out: &mut String) {
    let reason = view.stop_reason.as_deref().unwrap_or("not stopped");
    let class = match reason {
        "completed" => "completed",
        "waiting-approval" => "waiting-approval",
        "cancelled" => "cancelled",
        "stopped-limit" | "deadline" | "no-progress" => "stopped-limit",
        "not stopped" => "running",
        _ => "failed",
    };
    let _ = write!(
        out,
        "<header><h1>quorate run report</h1><div class=\"meta\"><span>run {run}</span>\
         <span>plan version {pv}</span><span>{n} tasks</span><span>{ms} ms</span>\
         <span>{events} events</span></div>\
         <div class=\"stop\"><span class=\"badge {class}\" id=\"stop-reason\">{reason}</span>",
        run = esc(&view.run_id),
        pv = view.plan_version,
        n = view.tasks.len(),
        ms = view.end_ms,
        events = view.events,
        reason = esc(reason),
    );
    if let Some(detail) = &view.stop_detail {
        if view.stop_reason.as_deref() != Some("completed") {
            let _ = write!(out, "<span class=\"detail\">{}</span>", esc(detail));
        }
    }
    out.push_str("</div><div class=\"counts\">");
    for state in STATES {
        let n = view.tasks.iter().filter(|t| t.state == state).count();
        if n > 0 {
            let _ = write!(out, "<span class=\"chip {state}\">{n} {state}</span>");
        }
    }
    out.push_str("</div></header>");
}

fn state_legend(out: &mut String) {
    out.push_str("<ul class=\"legend states\">");
    for state in STATES {
        let _ = write!(out, "<li><span class=\"sw {state}\"></span>{state}</li>");
    }
    out.push_str(
        "<li>vN: the plan version that brought the task; dashed: dropped by a replan</li></ul>",
    );
}

fn tasks(view: &RunView, out: &mut String) {
    out.push_str(
        "<section id=\"tasks\"><h2>Tasks</h2><table><thead><tr><th>task</th><th>state</th>\
         <th>plan</th><th>attempts</th><th>worker</th><th>granted</th><th>spent</th>\
         <th>returned</th><th>calls</th><th>result</th></tr></thead><tbody>",
    );
    for t in &view.tasks {
        task_row(t, out);
    }
    out.push_str("</tbody></table>");
    out.push_str(
        "<p class=\"note\">Budgets: steps · tool calls · tokens · cost. The bar is the share \
         of the granted steps spent.</p></section>",
    );
}

fn task_row(t: &TaskView, out: &mut String) {
    // What went wrong, under the row, across the table.
    let mut notes = String::new();
    if let Some(obs) = &t.failure {
        let _ = write!(
            notes,
            "<div class=\"obs\">first failing observation: {}</div>",
            esc(obs)
        );
    }
    for (tool, reason) in &t.refused {
        let _ = write!(
            notes,
            "<div class=\"obs\">refused <code>{}</code>: {}</div>",
            esc(tool),
            esc(reason)
        );
    }
    let _ = write!(
        out,
        "<tr class=\"task-row{more}\" data-task=\"{id}\" data-state=\"{state}\"><td><b>{id}</b>",
        more = if notes.is_empty() { "" } else { " has-notes" },
        id = esc(&t.id),
        state = t.state,
    );
    let worker = t.worker.map_or("-".to_string(), |w| w.to_string());
    let _ = write!(
        out,
        "</td><td><span class=\"pill {class}\">{state}</span></td><td class=\"num\">v{v}{gone}</td>\
         <td class=\"num\">{a}</td><td class=\"num\">{worker}</td>\
         <td class=\"budget\">{granted}</td><td class=\"budget\">{bar}{spent}</td>\
         <td class=\"budget\">{returned}</td><td class=\"num\">{calls}</td><td class=\"result\">",
        class = t.state,
        state = t.state,
        v = t.version,
        gone = if t.current { "" } else { " (dropped)" },
        a = t.attempts,
        granted = budget(Some(t.granted)),
        bar = steps_bar(t),
        spent = budget(t.spent),
        returned = budget(t.returned()),
        calls = calls(t),
    );
    match &t.result {
        Some(v) => {
            let compact = v.to_string();
            let short = svg::clip_chars(&compact, 48);
            if short == compact {
                let _ = write!(out, "<code>{}</code>", esc(&compact));
            } else {
                let pretty = serde_json::to_string_pretty(v).unwrap_or(compact);
                let _ = write!(
                    out,
                    "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
                    esc(&short),
                    esc(&pretty)
                );
            }
        }
        None => out.push_str("<span class=\"note\">-</span>"),
    }
    out.push_str("</td></tr>");
    if !notes.is_empty() {
        let _ = write!(
            out,
            "<tr class=\"notes\" data-task=\"{}\"><td></td><td colspan=\"9\">{notes}</td></tr>",
            esc(&t.id)
        );
    }
}

fn budget(b: Option<Budget>) -> String {
    match b {
        Some(b) => format!("{} · {} · {} · {}", b.steps, b.tool_calls, b.tokens, b.cost),
        None => "-".to_string(),
    }
}

fn steps_bar(t: &TaskView) -> String {
    let (Some(spent), granted) = (t.spent, t.granted) else {
        return String::new();
    };
    if granted.steps == 0 {
        return String::new();
    }
    let pct = (100 * spent.steps.min(granted.steps) / granted.steps).min(100);
    format!("<span class=\"bar\"><i style=\"width:{pct}%\"></i></span>")
}

fn calls(t: &TaskView) -> String {
    let mut s = t.calls.to_string();
    if t.unknown > 0 {
        let _ = write!(s, " · {} unknown · {} recovered", t.unknown, t.recovered);
    }
    if !t.refused.is_empty() {
        let _ = write!(s, " · {} refused", t.refused.len());
    }
    s
}

fn rejections(view: &RunView, out: &mut String) {
    out.push_str("<section id=\"rejections\"><h2>Rejections</h2><div class=\"grid2\"><div>");
    out.push_str("<h3 class=\"note\">Reply envelopes rejected, by reason</h3>");
    let max = view.rejected.values().copied().max().unwrap_or(0).max(1);
    for reason in ["duplicate", "late", "stale", "unauthorized"] {
        let n = view.rejected.get(reason).copied().unwrap_or(0);
        let _ = write!(
            out,
            "<div class=\"hbar\" data-reason=\"{reason}\"><span class=\"lbl\">{reason}</span>\
             <span class=\"track\"><span class=\"fill\" style=\"display:block;width:{w}%\">\
             </span></span><b>{n}</b></div>",
            w = 100 * n / max
        );
    }
    out.push_str("</div><div><h3 class=\"note\">Calls refused at the gate</h3>");
    let refused: Vec<(&str, &(String, String))> = view
        .tasks
        .iter()
        .flat_map(|t| t.refused.iter().map(move |r| (t.id.as_str(), r)))
        .collect();
    if refused.is_empty() {
        out.push_str("<p class=\"note\">none</p>");
    } else {
        out.push_str("<table><tr><th>task</th><th>tool</th><th>reason</th></tr>");
        for (task, (tool, reason)) in refused {
            let _ = write!(
                out,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
                esc(task),
                esc(tool),
                esc(reason)
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</div></div></section>");
}

/// The events and task ids the script needs, as JSON that is safe inside `<script>`: every
/// `<`, `>` and `&` is written as a `\u` escape, so no text in it can close the element.
fn data(view: &RunView, events: &[Event]) -> String {
    let logged: Vec<serde_json::Value> = events
        .iter()
        .take(MAX_LOGGED)
        .map(|e| {
            let mut fields = serde_json::to_value(&e.kind).unwrap_or_default();
            let kind = fields
                .as_object_mut()
                .and_then(|m| m.remove("kind"))
                .unwrap_or_default();
            let fields = match fields {
                serde_json::Value::Object(m) if m.is_empty() => String::new(),
                other => other.to_string(),
            };
            serde_json::json!({
                "seq": e.seq,
                "at_ms": e.at_ms,
                "task": e.task.as_deref(),
                "kind": kind,
                "fields": fields,
            })
        })
        .collect();
    let tasks: Vec<&str> = view.tasks.iter().map(|t| t.id.as_str()).collect();
    let json = serde_json::json!({ "tasks": tasks, "events": logged }).to_string();
    script_safe(&json)
}

/// JSON text made safe to embed in a `<script>` element.
pub(super) fn script_safe(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}
