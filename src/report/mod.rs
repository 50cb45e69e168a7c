//! `quorate report TRACE.jsonl -o report.html`: one self-contained HTML page about a run, made
//! from its trace (inline CSS, SVG and script; nothing is fetched).
//!
//! [`render_html`] is a pure function from parsed events to the page: [`parse`] gathers what the
//! page shows ([`RunView`]), [`layout`] places the plan DAG and the timeline, and the renderer
//! writes the HTML, escaping every string that goes into it ([`esc`]). [`write_report`] is the
//! command's I/O around it.

mod assets;
pub mod layout;
pub mod parse;
mod render;
mod svg;

use std::path::{Path, PathBuf};

use quorate_coordinator::Event;

pub use parse::{parse_trace, RunView, TaskView};

/// A trace could not be turned into a page.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The trace file could not be read.
    #[error("trace file {path}: {source}")]
    Read {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line of the trace is not an event (see docs/trace.md).
    #[error("line {line} is not a trace event: {message}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What the JSON reader said.
        message: String,
    },
    /// The trace has no event.
    #[error("the trace has no event")]
    Empty,
    /// The page could not be written.
    #[error("output file {path}: {source}")]
    Write {
        /// The path given.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The page of a run, from its trace's events in order.
///
/// ```
/// let run = r#""run_id":"00000000-0000-0000-0000-000000000001""#;
/// let trace = [
///     format!(r#"{{"seq":0,{run},"task":null,"at_ms":0,"kind":"run-started","tasks":1,"plan_version":1,"nodes":[{{"id":"a","deps":[]}}]}}"#),
///     format!(r#"{{"seq":1,{run},"task":"a","at_ms":3,"kind":"result-committed","result":"<b>bold</b>"}}"#),
/// ]
/// .join("\n");
/// let events = quorate::report::parse_trace(&trace).unwrap();
/// let html = quorate::report::render_html(&events);
/// assert!(html.starts_with("<!DOCTYPE html>"));
/// assert!(html.contains("&lt;b&gt;bold") && !html.contains("<b>bold"));
/// ```
#[must_use]
pub fn render_html(events: &[Event]) -> String {
    let view = RunView::of(events);
    render::page(&view, events)
}

/// Reads the trace at `trace` and writes its page to `output` (stdout if `None`).
///
/// # Errors
/// [`ReportError`]: the trace unreadable, a line that is not an event, no event, or the page
/// not writable.
pub fn write_report(trace: &Path, output: Option<&Path>) -> Result<(), ReportError> {
    let text = std::fs::read_to_string(trace).map_err(|source| ReportError::Read {
        path: trace.to_path_buf(),
        source,
    })?;
    let events = parse_trace(&text)?;
    let html = render_html(&events);
    match output {
        Some(path) => std::fs::write(path, html).map_err(|source| ReportError::Write {
            path: path.to_path_buf(),
            source,
        }),
        None => {
            crate::out!("{html}");
            Ok(())
        }
    }
}

/// `s` with `&`, `<`, `>`, `"` and `'` escaped: safe as HTML text and inside a quoted
/// attribute.
///
/// ```
/// assert_eq!(
///     quorate::report::esc(r#"<script>alert("x") & 'y'</script>"#),
///     "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
/// );
/// ```
#[must_use]
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A task's result in at most `max` characters of compact JSON (`…` if cut; `-` for none), as
/// the `quorate run` table shows it.
///
/// ```
/// use serde_json::json;
/// use quorate::report::clip;
/// assert_eq!(clip(Some(&json!({"a": 1})), 40), r#"{"a":1}"#);
/// assert_eq!(clip(Some(&json!("abcdefgh")), 5), "\"abc…");
/// assert_eq!(clip(None, 40), "-");
/// ```
#[must_use]
pub fn clip(result: Option<&serde_json::Value>, max: usize) -> String {
    match result {
        Some(v) => svg::clip_chars(&v.to_string(), max),
        None => "-".to_string(),
    }
}

#[cfg(test)]
mod tests;
