//! The page's two drawings, as inline SVG: the plan DAG (each node coloured by its final
//! state, tagged with the plan version that brought it, dashed if a replan dropped it) and the
//! timeline (a lane per worker or peer: attempts as bars, calls, approvals and rejections as
//! marks).

use std::fmt::Write;

use quorate_protocols::TaskState;

use super::esc;
use super::layout::{self, DagLayout, TimeScale, NODE_H, NODE_W};
use super::parse::{MarkKind, RunView};

/// The plan DAG.
pub(super) fn dag(view: &RunView, out: &mut String) {
    if view.tasks.len() > layout::MAX_DRAWN {
        let _ = write!(
            out,
            "<p class=\"note\">{} tasks: too many to draw; see the table below.</p>",
            view.tasks.len()
        );
        return;
    }
    let l: DagLayout = layout::dag(&view.tasks);
    let _ = write!(
        out,
        "<svg class=\"dag\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         role=\"img\" aria-label=\"plan DAG\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" \
         markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\">\
         <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#9aa3af\"/></marker></defs>",
        w = l.width,
        h = l.height
    );
    for &(from, to) in &l.edges {
        let (x1, y1) = l.pos[from];
        let (x2, y2) = l.pos[to];
        let (x1, y1) = (x1 + NODE_W, y1 + NODE_H / 2);
        let y2 = y2 + NODE_H / 2;
        let mid = (x1 + x2) / 2;
        let _ = write!(
            out,
            "<path class=\"edge\" d=\"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}\" \
             marker-end=\"url(#arrow)\"/>"
        );
    }
    for (t, &(x, y)) in view.tasks.iter().zip(&l.pos) {
        let class = t.state;
        let dropped = if t.current { "" } else { " dropped" };
        let _ = write!(
            out,
            "<g class=\"node {class}{dropped}\" data-task=\"{id}\" tabindex=\"0\">\
             <title>{id}: {state} (plan v{v}{gone})</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{NODE_W}\" height=\"{NODE_H}\" rx=\"8\"/>\
             <text class=\"id\" x=\"{tx}\" y=\"{ty1}\">{short}</text>\
             <text class=\"st\" x=\"{tx}\" y=\"{ty2}\">{state}</text>\
             <text class=\"ver\" x=\"{vx}\" y=\"{ty2}\">v{v}</text></g>",
            id = esc(&t.id),
            state = t.state,
            v = t.version,
            gone = if t.current {
                ""
            } else {
                ", dropped by a replan"
            },
            tx = x + 10,
            ty1 = y + 19,
            ty2 = y + 37,
            vx = x + NODE_W - 28,
            short = esc(&clip_chars(&t.id, 20)),
        );
    }
    out.push_str("</svg>");
}

/// Lane label column, px.
const LABEL_W: f64 = 110.0;
/// Height of a lane, px.
const LANE_H: f64 = 38.0;
/// Least distance between two marks of a lane, px.
const MARK_GAP: f64 = 11.0;
/// Width of the whole timeline, px.
const TIMELINE_W: f64 = 1240.0;

/// The timeline: one lane for the run, one per worker (or peer).
pub(super) fn timeline(view: &RunView, out: &mut String) {
    let scale = TimeScale::new(LABEL_W + 8.0, TIMELINE_W - LABEL_W - 24.0, view.end_ms);
    let height = 28.0 + LANE_H * view.lanes.len() as f64;
    let _ = write!(
        out,
        "<svg class=\"timeline\" width=\"{TIMELINE_W}\" height=\"{height}\" \
         viewBox=\"0 0 {TIMELINE_W} {height}\" role=\"img\" aria-label=\"timeline\">"
    );
    for tick in scale.ticks() {
        let x = scale.x(tick);
        let _ = write!(
            out,
            "<line class=\"tick\" x1=\"{x:.1}\" y1=\"18\" x2=\"{x:.1}\" y2=\"{height}\"/>\
             <text class=\"tick\" x=\"{x:.1}\" y=\"12\">{tick} ms</text>"
        );
    }
    for (n, lane) in view.lanes.iter().enumerate() {
        let top = 22.0 + LANE_H * n as f64;
        let name = match lane.worker {
            Some(w) => format!("worker {w}"),
            None => "run".to_string(),
        };
        let _ = write!(
            out,
            "<g class=\"lane\"><rect class=\"lane-bg{odd}\" x=\"0\" y=\"{top}\" \
             width=\"{TIMELINE_W}\" height=\"{LANE_H}\"/>\
             <text class=\"lane-name\" x=\"8\" y=\"{ty:.1}\">{name}</text>",
            odd = if n % 2 == 1 { " odd" } else { "" },
            ty = top + LANE_H / 2.0 + 4.0,
        );
        for span in &lane.spans {
            let x1 = scale.x(span.start_ms);
            let w = (scale.x(span.end_ms) - x1).max(4.0);
            let class = span.end.unwrap_or(TaskState::Running);
            let ended = span
                .end
                .map_or("still running".to_string(), |s| s.to_string());
            let _ = write!(
                out,
                "<rect class=\"span {class}\" data-task=\"{id}\" x=\"{x1:.1}\" y=\"{y:.1}\" \
                 width=\"{w:.1}\" height=\"{h:.1}\" rx=\"4\"><title>{id} attempt {a}: \
                 {s}-{e} ms, {ended}</title></rect>",
                id = esc(&span.task),
                a = span.attempt,
                s = span.start_ms,
                e = span.end_ms,
                y = top + 7.0,
                h = LANE_H - 14.0,
            );
            if w > 60.0 {
                let _ = write!(
                    out,
                    "<text class=\"span-label\" x=\"{x:.1}\" y=\"{y:.1}\">{id}</text>",
                    x = x1 + 5.0,
                    y = top + LANE_H / 2.0 + 4.0,
                    id = esc(&clip_chars(&span.task, ((w - 10.0) / 7.0) as usize)),
                );
            }
        }
        let xs: Vec<f64> = lane.marks.iter().map(|m| scale.x(m.at_ms)).collect();
        let right = scale.left + scale.width;
        for (mark, x) in lane.marks.iter().zip(spread(&xs, scale.left, right)) {
            let (class, glyph) = mark_style(mark.kind);
            let y = top + 9.0;
            let _ = write!(
                out,
                "<g class=\"mark {class}\"><title>{label} ({at} ms)</title>{glyph}</g>",
                label = esc(&mark.label),
                at = mark.at_ms,
                glyph = glyph_at(glyph, x, y),
            );
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
}

/// Where to draw marks wanted at `xs` (in order) so that none covers another: marks closer
/// than [`MARK_GAP`] form a row, in their order, centred on where they were wanted and kept
/// within `left..=right`. (A reply's call steps are logged at one moment: they sit side by
/// side.)
fn spread(xs: &[f64], left: f64, right: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(xs.len());
    let mut i = 0;
    while i < xs.len() {
        let mut j = i + 1;
        while j < xs.len() && xs[j] < xs[i] + MARK_GAP * (j - i + 1) as f64 {
            j += 1;
        }
        let n = j - i;
        let width = MARK_GAP * (n - 1) as f64;
        let centre = xs[i..j].iter().sum::<f64>() / n as f64;
        let start = (centre - width / 2.0).min(right - width).max(left);
        let start = out
            .last()
            .map_or(start, |&prev: &f64| start.max(prev + MARK_GAP));
        out.extend((0..n).map(|k| start + MARK_GAP * k as f64));
        i = j;
    }
    out
}

/// A mark's CSS class and shape.
fn mark_style(kind: MarkKind) -> (&'static str, Glyph) {
    match kind {
        MarkKind::Call => ("m-call", Glyph::Dot),
        MarkKind::Answer => ("m-answer", Glyph::Dot),
        MarkKind::Unknown => ("m-unknown", Glyph::Diamond),
        MarkKind::Query => ("m-query", Glyph::Diamond),
        MarkKind::Recovered => ("m-recovered", Glyph::Diamond),
        MarkKind::Retried => ("m-retried", Glyph::Diamond),
        MarkKind::Refused => ("m-refused", Glyph::Cross),
        MarkKind::Approval => ("m-approval", Glyph::Square),
        MarkKind::Approved => ("m-approved", Glyph::Square),
        MarkKind::Denied => ("m-denied", Glyph::Square),
        MarkKind::Rejected => ("m-rejected", Glyph::Cross),
        MarkKind::Committed => ("m-committed", Glyph::Dot),
        MarkKind::Run => ("m-run", Glyph::Bar),
    }
}

/// The legend of the timeline's marks: `(class, glyph svg, words)`.
pub(super) fn legend() -> String {
    let items = [
        (MarkKind::Call, "call started"),
        (MarkKind::Answer, "tool answered"),
        (MarkKind::Unknown, "outcome unknown"),
        (MarkKind::Query, "queried"),
        (MarkKind::Recovered, "recovered"),
        (MarkKind::Retried, "retried"),
        (MarkKind::Refused, "call refused at the gate"),
        (MarkKind::Approval, "approval requested"),
        (MarkKind::Approved, "approved"),
        (MarkKind::Denied, "approval rejected"),
        (MarkKind::Rejected, "reply rejected"),
        (MarkKind::Committed, "result committed"),
        (MarkKind::Run, "run start / replan / stop"),
    ];
    let mut out = String::from("<ul class=\"legend marks\">");
    for (kind, words) in items {
        let (class, glyph) = mark_style(kind);
        let _ = write!(
            out,
            "<li><svg width=\"14\" height=\"20\" class=\"mark {class}\">{}</svg>{words}</li>",
            glyph_at(glyph, 7.0, 1.0)
        );
    }
    out.push_str("</ul>");
    out
}

#[derive(Clone, Copy)]
enum Glyph {
    Dot,
    Diamond,
    Cross,
    Square,
    Bar,
}

/// The shape centred on `x`, hanging from `y` (18 px tall).
fn glyph_at(glyph: Glyph, x: f64, y: f64) -> String {
    let c = y + 9.0;
    match glyph {
        Glyph::Dot => format!("<circle cx=\"{x:.1}\" cy=\"{c:.1}\" r=\"4.5\"/>"),
        Glyph::Diamond => format!(
            "<path d=\"M{x:.1},{a:.1} L{r:.1},{c:.1} L{x:.1},{b:.1} L{l:.1},{c:.1} z\"/>",
            a = c - 6.0,
            b = c + 6.0,
            l = x - 6.0,
            r = x + 6.0
        ),
        Glyph::Cross => format!(
            "<path class=\"stroke\" d=\"M{l:.1},{a:.1} L{r:.1},{b:.1} M{r:.1},{a:.1} \
             L{l:.1},{b:.1}\"/>",
            a = c - 5.0,
            b = c + 5.0,
            l = x - 5.0,
            r = x + 5.0
        ),
        Glyph::Square => format!(
            "<rect x=\"{l:.1}\" y=\"{t:.1}\" width=\"9\" height=\"9\" rx=\"1.5\"/>",
            l = x - 4.5,
            t = c - 4.5
        ),
        Glyph::Bar => format!(
            "<rect x=\"{l:.1}\" y=\"{y:.1}\" width=\"3\" height=\"18\"/>",
            l = x - 1.5
        ),
    }
}

/// At most `max` characters of `s`, with `…` if cut.
pub(super) fn clip_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Every state, in the legend's order.
pub(super) const STATES: [TaskState; 8] = [
    TaskState::Completed,
    TaskState::Failed,
    TaskState::StoppedLimit,
    TaskState::Cancelled,
    TaskState::WaitingApproval,
    TaskState::Running,
    TaskState::Ready,
    TaskState::Pending,
];
