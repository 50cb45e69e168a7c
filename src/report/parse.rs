//! From the lines of a trace to a [`RunView`]: what the page shows, gathered in one pass over
//! the events in order. Pure: no I/O.

use std::collections::BTreeMap;

use quorate_coordinator::{Event, EventKind, StopReason};
use quorate_protocols::{Budget, TaskState};
use quorate_workers::CallEvent;
use serde_json::Value;

use super::ReportError;

/// Parses a JSONL trace (`quorate run --trace`): one event per non-empty line.
///
/// # Errors
/// [`ReportError::Line`] naming the first line that is not an event, and
/// [`ReportError::Empty`] for a trace without any.
pub fn parse_trace(text: &str) -> Result<Vec<Event>, ReportError> {
    let mut events = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str(line).map_err(|e| ReportError::Line {
            line: n + 1,
            message: e.to_string(),
        })?;
        events.push(event);
    }
    if events.is_empty() {
        return Err(ReportError::Empty);
    }
    Ok(events)
}

/// One task as the page shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskView {
    /// Node id.
    pub id: String,
    /// Ids of the nodes it depends on (empty if the trace does not name the plan).
    pub deps: Vec<String>,
    /// Its last state.
    pub state: TaskState,
    /// The plan version that first had it.
    pub version: u32,
    /// Whether the run's last plan version still has it (a replan may drop it).
    pub current: bool,
    /// Attempts dispatched.
    pub attempts: u32,
    /// The worker (or peer) of its last attempt.
    pub worker: Option<usize>,
    /// The slice granted to its last attempt.
    pub granted: Budget,
    /// What it was charged (`task-closed`, corrected by `task-settled`), once closed.
    pub spent: Option<Budget>,
    /// Its committed (or kept) result.
    pub result: Option<Value>,
    /// Tool calls started.
    pub calls: u32,
    /// Calls whose outcome became unknown.
    pub unknown: u32,
    /// Unknown outcomes recovered by a query.
    pub recovered: u32,
    /// Proposals its worker's gate refused: `(tool, reason)`.
    pub refused: Vec<(String, String)>,
    /// The first failing observation logged for it (acceptance or precondition).
    pub failure: Option<String>,
}

impl TaskView {
    /// A task of plan version `version` that nothing has happened to yet.
    #[must_use]
    pub fn new(id: &str, version: u32) -> Self {
        Self {
            id: id.to_string(),
            deps: Vec::new(),
            state: TaskState::Pending,
            version,
            current: true,
            attempts: 0,
            worker: None,
            granted: Budget::ZERO,
            spent: None,
            result: None,
            calls: 0,
            unknown: 0,
            recovered: 0,
            refused: Vec::new(),
            failure: None,
        }
    }

    /// What went back to the run: the slice less what it was charged (once closed).
    #[must_use]
    pub fn returned(&self) -> Option<Budget> {
        self.spent.map(|s| self.granted.saturating_sub(&s))
    }
}

/// An attempt on a worker's lane: from its dispatch to its end.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// The task.
    pub task: String,
    /// Attempt number.
    pub attempt: u32,
    /// Dispatched at.
    pub start_ms: u64,
    /// Ended at (the run's end if it never did).
    pub end_ms: u64,
    /// The state it ended in, if it ended.
    pub end: Option<TaskState>,
}

/// What a mark on a lane stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MarkKind {
    /// A tool call started.
    Call,
    /// A tool answered.
    Answer,
    /// A call's outcome became unknown.
    Unknown,
    /// The tool was queried about an action.
    Query,
    /// An unknown outcome was recovered.
    Recovered,
    /// A call was retried.
    Retried,
    /// The gate refused a call.
    Refused,
    /// Approval was asked for.
    Approval,
    /// A human (or the policy) approved.
    Approved,
    /// A human (or the policy) rejected.
    Denied,
    /// A reply envelope was rejected.
    Rejected,
    /// A result was committed.
    Committed,
    /// A run-level moment: start, replan, stop.
    Run,
}

/// A moment on a lane.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    /// When.
    pub at_ms: u64,
    /// What.
    pub kind: MarkKind,
    /// Said in words (the tooltip).
    pub label: String,
}

/// A worker's (or peer's) lane, or the run's own (`worker: None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lane {
    /// The worker index; `None` for the run's lane.
    pub worker: Option<usize>,
    /// Attempts, in dispatch order.
    pub spans: Vec<Span>,
    /// Moments, in time order.
    pub marks: Vec<Mark>,
}

/// Everything the page shows, gathered from a trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunView {
    /// The run id.
    pub run_id: String,
    /// Tasks of every plan version, in the order they were first seen.
    pub tasks: Vec<TaskView>,
    /// The last plan version.
    pub plan_version: u32,
    /// The run's lane first, then one per worker, by index.
    pub lanes: Vec<Lane>,
    /// Reply envelopes rejected, by reason (`duplicate`, `late`, `stale`, `unauthorized`).
    pub rejected: BTreeMap<&'static str, u64>,
    /// The stop reason's name (`run-stopped`).
    pub stop_reason: Option<String>,
    /// The first stop cause in words, with its first failing observation (`stop-requested`).
    pub stop_detail: Option<String>,
    /// The last event's time.
    pub end_ms: u64,
    /// Events read.
    pub events: usize,
}

impl RunView {
    /// Gathers what the page shows from `events`, in trace order.
    #[must_use]
    pub fn of(events: &[Event]) -> Self {
        let mut b = Builder::default();
        for e in events {
            b.event(e);
        }
        b.finish()
    }

    /// The task named `id`, if the trace names it.
    #[must_use]
    pub fn task(&self, id: &str) -> Option<&TaskView> {
        self.tasks.iter().find(|t| t.id == id)
    }
}

#[derive(Default)]
struct Builder {
    view: RunView,
    index: BTreeMap<String, usize>,
    /// Per task: its lane (worker) and open span there.
    open: BTreeMap<String, (usize, usize)>,
}

impl Builder {
    fn lane(&mut self, worker: Option<usize>) -> usize {
        let lanes = &mut self.view.lanes;
        if lanes.is_empty() {
            lanes.push(Lane::default());
        }
        let Some(w) = worker else { return 0 };
        match lanes.iter().position(|l| l.worker == Some(w)) {
            Some(i) => i,
            None => {
                lanes.push(Lane {
                    worker: Some(w),
                    ..Lane::default()
                });
                lanes.len() - 1
            }
        }
    }

    fn task(&mut self, id: &str) -> &mut TaskView {
        let n = match self.index.get(id) {
            Some(&n) => n,
            None => {
                let version = self.view.plan_version.max(1);
                self.view.tasks.push(TaskView::new(id, version));
                self.index.insert(id.to_string(), self.view.tasks.len() - 1);
                self.view.tasks.len() - 1
            }
        };
        &mut self.view.tasks[n]
    }

    /// A plan version's nodes: new ones are added, the others marked as dropped.
    fn plan(&mut self, version: u32, nodes: &[quorate_coordinator::PlanNode]) {
        self.view.plan_version = version;
        if nodes.is_empty() {
            return;
        }
        for t in &mut self.view.tasks {
            t.current = false;
        }
        for node in nodes {
            let t = self.task(node.id.as_str());
            t.current = true;
            t.deps = node.deps.iter().map(ToString::to_string).collect();
        }
    }

    fn mark(&mut self, task: Option<&str>, at_ms: u64, kind: MarkKind, label: String) {
        // The lane of the task's attempt, or of its last one (a late reply, say).
        let worker = task
            .and_then(|t| self.index.get(t))
            .and_then(|&n| self.view.tasks[n].worker);
        let lane = task
            .and_then(|t| self.open.get(t).map(|&(lane, _)| lane))
            .unwrap_or_else(|| self.lane(worker));
        let label = match task {
            Some(t) => format!("{t}: {label}"),
            None => label,
        };
        self.view.lanes[lane]
            .marks
            .push(Mark { at_ms, kind, label });
    }

    fn close_span(&mut self, task: &str, at_ms: u64, end: Option<TaskState>) {
        if let Some((lane, span)) = self.open.remove(task) {
            let s = &mut self.view.lanes[lane].spans[span];
            s.end_ms = at_ms;
            s.end = end;
        }
    }

    fn event(&mut self, e: &Event) {
        self.view.events += 1;
        self.view.end_ms = self.view.end_ms.max(e.at_ms);
        if self.view.run_id.is_empty() {
            self.view.run_id = e.run_id.to_string();
        }
        let at = e.at_ms;
        let task = e.task.as_deref();
        if let Some(t) = task {
            self.task(t);
        }
        match &e.kind {
            EventKind::RunStarted {
                plan_version,
                nodes,
                ..
            } => {
                if self.view.plan_version == 0 {
                    self.plan(*plan_version, nodes);
                    self.mark(None, at, MarkKind::Run, "run started".into());
                }
            }
            EventKind::Replanned {
                plan_version,
                nodes,
                ..
            } => {
                self.plan(*plan_version, nodes);
                let label = format!("replanned: plan version {plan_version}");
                self.mark(None, at, MarkKind::Run, label);
            }
            EventKind::Transition { to, .. } => {
                if let Some(t) = task {
                    self.task(t).state = *to;
                    if to.is_terminal() {
                        self.close_span(t, at, Some(*to));
                    }
                }
            }
            EventKind::Dispatched {
                attempt,
                worker,
                granted,
                ..
            } => {
                if let Some(t) = task {
                    self.close_span(t, at, None);
                    let lane = self.lane(Some(*worker));
                    let spans = &mut self.view.lanes[lane].spans;
                    spans.push(Span {
                        task: t.to_string(),
                        attempt: *attempt,
                        start_ms: at,
                        end_ms: at,
                        end: None,
                    });
                    let span = spans.len() - 1;
                    self.open.insert(t.to_string(), (lane, span));
                    let v = self.task(t);
                    v.attempts = v.attempts.max(*attempt);
                    v.worker = Some(*worker);
                    v.granted = *granted;
                }
            }
            EventKind::TaskClosed { spent } | EventKind::TaskSettled { spent } => {
                if let Some(t) = task {
                    self.task(t).spent = Some(*spent);
                }
            }
            EventKind::Call(call) => match &**call {
                CallEvent::CallStarted { action, tool, .. } => {
                    let label = format!("call {tool} ({action})");
                    self.on_task(task, |v| v.calls += 1);
                    self.mark(task, at, MarkKind::Call, label);
                }
                CallEvent::CallAnswered {
                    action,
                    changed,
                    error,
                    ..
                } => {
                    let label = match error {
                        Some(class) => format!("answered with error {class} ({action})"),
                        None if *changed => format!("answered: changed ({action})"),
                        None => format!("answered: nothing changed ({action})"),
                    };
                    self.mark(task, at, MarkKind::Answer, label);
                }
                CallEvent::OutcomeUnknown { action } => {
                    self.on_task(task, |v| v.unknown += 1);
                    self.mark(
                        task,
                        at,
                        MarkKind::Unknown,
                        format!("outcome unknown ({action})"),
                    );
                }
                CallEvent::Queried { action, found } => {
                    let what = if *found { "found" } else { "absent" };
                    self.mark(
                        task,
                        at,
                        MarkKind::Query,
                        format!("queried: {what} ({action})"),
                    );
                }
                CallEvent::Recovered { action } => {
                    self.on_task(task, |v| v.recovered += 1);
                    self.mark(
                        task,
                        at,
                        MarkKind::Recovered,
                        format!("recovered ({action})"),
                    );
                }
                CallEvent::CallAborted { action, .. } => {
                    self.on_task(task, |v| v.unknown += 1);
                    self.mark(
                        task,
                        at,
                        MarkKind::Unknown,
                        format!("aborted: outcome unknown ({action})"),
                    );
                }
                CallEvent::AnsweredFromRecord { action } => {
                    let label = format!("answered from the record ({action})");
                    self.mark(task, at, MarkKind::Answer, label);
                }
                CallEvent::Retried { action } => {
                    self.mark(task, at, MarkKind::Retried, format!("retried ({action})"));
                }
                CallEvent::CallRejected { tool, reason, .. } => {
                    let refused = (tool.clone(), reason.clone());
                    self.on_task(task, |v| v.refused.push(refused));
                    self.mark(
                        task,
                        at,
                        MarkKind::Refused,
                        format!("{tool} refused: {reason}"),
                    );
                }
            },
            EventKind::ApprovalRequested { reason } => {
                let label = format!("approval requested: {reason}");
                self.mark(task, at, MarkKind::Approval, label);
            }
            EventKind::ApprovalDecided { approved } => {
                let (kind, label) = if *approved {
                    (MarkKind::Approved, "approved")
                } else {
                    (MarkKind::Denied, "approval rejected")
                };
                self.mark(task, at, kind, label.into());
            }
            EventKind::TopUpRequested { request } => {
                let label = format!(
                    "top-up requested: out of {}, needs {} more",
                    request.component, request.needed
                );
                self.mark(task, at, MarkKind::Approval, label);
            }
            EventKind::TopUpDecided { answer } => {
                let (kind, label) = match answer {
                    quorate_coordinator::TopUp::Grant(b) => {
                        (MarkKind::Approved, format!("top-up granted: {b}"))
                    }
                    quorate_coordinator::TopUp::Reject => {
                        (MarkKind::Denied, "top-up rejected".to_string())
                    }
                };
                self.mark(task, at, kind, label);
            }
            EventKind::AcceptanceFailed { observation }
            | EventKind::PreconditionFailed { observation } => {
                let o = observation.clone();
                self.on_task(task, |v| {
                    v.failure.get_or_insert(o);
                });
            }
            EventKind::ResultCommitted { result } | EventKind::ResultKept { result, .. } => {
                let r = result.value().clone();
                self.on_task(task, |v| v.result = Some(r));
                self.mark(task, at, MarkKind::Committed, "result committed".into());
            }
            EventKind::StopRequested { reason } => {
                if self.view.stop_detail.is_none() {
                    self.view.stop_detail = Some(detail(reason));
                }
                self.mark(None, at, MarkKind::Run, format!("stopping: {reason}"));
            }
            EventKind::RunStopped { stop_reason } => {
                self.view.stop_reason = Some(stop_reason.clone());
                self.mark(
                    None,
                    at,
                    MarkKind::Run,
                    format!("run stopped: {stop_reason}"),
                );
            }
            EventKind::CancelRequested => {
                self.mark(None, at, MarkKind::Run, "cancel requested".into());
            }
            other => {
                if let Some(reason) = other.rejection() {
                    let name = rejection_name(reason);
                    *self.view.rejected.entry(name).or_default() += 1;
                    self.mark(
                        task,
                        at,
                        MarkKind::Rejected,
                        format!("reply rejected: {name}"),
                    );
                }
            }
        }
    }

    fn on_task(&mut self, task: Option<&str>, f: impl FnOnce(&mut TaskView)) {
        if let Some(t) = task {
            f(self.task(t));
        }
    }

    fn finish(mut self) -> RunView {
        let end = self.view.end_ms;
        for (lane, span) in std::mem::take(&mut self.open).into_values() {
            self.view.lanes[lane].spans[span].end_ms = end;
        }
        if self.view.lanes.is_empty() {
            self.lane(None);
        }
        self.view
            .lanes
            .sort_by_key(|l| l.worker.map_or(0, |w| w + 1));
        for lane in &mut self.view.lanes {
            lane.marks.sort_by_key(|m| m.at_ms);
        }
        self.view
    }
}

/// The stop cause in words: the reason, and its node and first failing observation if any.
fn detail(reason: &StopReason) -> String {
    reason.to_string()
}

fn rejection_name(reason: quorate_coordinator::Rejection) -> &'static str {
    use quorate_coordinator::Rejection;
    match reason {
        Rejection::Duplicate => "duplicate",
        Rejection::Late => "late",
        Rejection::Stale => "stale",
        Rejection::Unauthorized => "unauthorized",
    }
}
