//! The invariants, observed from the outside: the supervisor's recorded events, its snapshot,
//! the replies the simulator delivered, and the world's effects per `ActionId`.

use std::collections::HashMap;
use std::fmt;

use quorate_coordinator::{Event, EventKind, RunReport};
use quorate_protocols::{Budget, Plan, TaskId, TaskState, Version};

/// Which guarantee broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// A terminal task changed state.
    TerminalChanged,
    /// A reply to a terminal task was accepted.
    ReplyToTerminalAccepted,
    /// A reply naming a stale attempt or state version was accepted.
    StaleReplyAccepted,
    /// A budget bound was broken (reserve + outstanding children <= limit, spent <= granted,
    /// calls per attempt <= the slice's tool calls).
    Budget,
    /// A confirmed result was lost or overwritten, or the core went on with another value than
    /// the one the store kept.
    ResultLost,
    /// One `ActionId` produced more than one side effect.
    DuplicateEffect,
    /// A write ran while a store precondition of its task did not hold.
    GuardedWrite,
    /// A task completed on a verified conclusion resting on nothing the runtime recorded: its
    /// attempt logged no call output, it has no dependency to cite, and it does not accept a
    /// suggestion (a generated node that accepts only verified conclusions and receipts answers
    /// a verified conclusion).
    UnrecordedConclusion,
    /// The run did not end within its step bound (or got stuck without a stop reason).
    StepBound,
    /// The run did not end with exactly one (consistent) stop reason.
    StopReason,
    /// Liveness mode: not every task was terminal by heal time + delta.
    Liveness,
    /// The coordinator could not resume from its log.
    Resume,
    /// A core panicked.
    Panic,
}

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which one.
    pub invariant: Invariant,
    /// Virtual time (ms).
    pub at_ms: u64,
    /// What was observed.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} at {} ms: {}",
            self.invariant, self.at_ms, self.detail
        )
    }
}

/// The reply being delivered to the supervisor right now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Delivering {
    pub(crate) task: TaskId,
    pub(crate) attempt: u32,
    pub(crate) version: Version,
}

/// Shadow state built from the supervisor's events only (in peer mode: from one peer's events).
/// It is indexed by node name over the plan and its fallback, so a replan keeps it.
#[derive(Debug)]
pub(crate) struct Checker {
    names: HashMap<String, usize>,
    pub(crate) state: Vec<TaskState>,
    version: Vec<u64>,
    attempt: Vec<u32>,
    task_id: Vec<Option<TaskId>>,
    pub(crate) granted: Vec<Budget>,
    /// A `-> completed` transition was recorded: the result is confirmed.
    pub(crate) confirmed: Vec<bool>,
    pub(crate) delivering: Option<Delivering>,
    pub(crate) stops: Vec<(u64, String)>,
    pub(crate) approvals_requested: Vec<usize>,
    /// The state each task was in before its last transition.
    pub(crate) previous: Vec<TaskState>,
    /// The task may complete without a call output of its attempt: it has dependencies
    /// (inputs its answer may cite), or it accepts a suggestion.
    may_rest_on_inputs: Vec<bool>,
    /// The task's current attempt logged a call output (`call-answered` without an error,
    /// `recovered`, `answered-from-record`): something recorded its answer may cite.
    recorded: Vec<bool>,
    /// Node names, by shadow index.
    pub(crate) node_names: Vec<String>,
    pub(crate) violation: Option<Violation>,
}

impl Checker {
    /// A checker over the nodes of `plan` and, after them, those of its `fallback` plan that
    /// `plan` does not have: a replan keeps a node's shadow state by its name.
    pub(crate) fn new(plan: &Plan, fallback: Option<&Plan>) -> Self {
        let mut nodes: Vec<(String, bool)> = Vec::new();
        let mut names = HashMap::new();
        for p in std::iter::once(plan).chain(fallback) {
            for i in 0..p.len() as u32 {
                let name = p.node(i).id.to_string();
                if names.contains_key(&name) {
                    continue;
                }
                let suggestion = quorate_protocols::ResultKind::Suggestion;
                let rests =
                    !p.deps(i).is_empty() || p.node(i).acceptance.kinds.contains(&suggestion);
                names.insert(name.clone(), nodes.len());
                nodes.push((name, rests));
            }
        }
        let n = nodes.len();
        Self {
            names,
            state: vec![TaskState::Pending; n],
            version: vec![0; n],
            attempt: vec![0; n],
            task_id: vec![None; n],
            granted: vec![Budget::ZERO; n],
            confirmed: vec![false; n],
            delivering: None,
            stops: Vec::new(),
            approvals_requested: Vec::new(),
            previous: vec![TaskState::Pending; n],
            may_rest_on_inputs: nodes.iter().map(|(_, rests)| *rests).collect(),
            node_names: nodes.into_iter().map(|(name, _)| name).collect(),
            recorded: vec![false; n],
            violation: None,
        }
    }

    /// The shadow index of node `name`.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// The granted slice of the task with id `task`, as its last dispatch recorded.
    pub(crate) fn granted_of(&self, task: TaskId) -> Option<Budget> {
        let i = self.task_id.iter().position(|t| *t == Some(task))?;
        Some(self.granted[i])
    }

    pub(crate) fn fail(&mut self, invariant: Invariant, at_ms: u64, detail: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation {
                invariant,
                at_ms,
                detail,
            });
        }
    }

    /// One recorded event, in order.
    pub(crate) fn on_event(&mut self, now: u64, e: &Event) {
        let node = e.task.as_ref().and_then(|n| self.names.get(&**n).copied());
        match (&e.kind, node) {
            (EventKind::Transition { from, to }, Some(i)) => {
                if from.is_terminal() || self.state[i].is_terminal() {
                    self.fail(
                        Invariant::TerminalChanged,
                        now,
                        format!("task {i}: {} -> {to} (shadow {from})", self.state[i]),
                    );
                }
                self.previous[i] = self.state[i];
                self.state[i] = *to;
                if *to == TaskState::Completed {
                    self.confirmed[i] = true;
                    // Judged by the writer that ran the task (in peer mode, the other peers
                    // only adopt its terminal record).
                    let ran_here = self.attempt[i] > 0;
                    if ran_here && !self.recorded[i] && !self.may_rest_on_inputs[i] {
                        self.fail(
                            Invariant::UnrecordedConclusion,
                            now,
                            format!(
                                "task {i} completed although its attempt {} recorded no call output and it has no input",
                                self.attempt[i]
                            ),
                        );
                    }
                }
            }
            (
                EventKind::Dispatched {
                    attempt,
                    task_id,
                    granted,
                    ..
                },
                Some(i),
            ) => {
                self.version[i] += 1;
                self.attempt[i] = *attempt;
                self.recorded[i] = false;
                self.task_id[i] = Some(*task_id);
                self.granted[i] = *granted;
            }
            (EventKind::ReplyAccepted, Some(i)) => {
                if self.state[i].is_terminal() {
                    self.fail(
                        Invariant::ReplyToTerminalAccepted,
                        now,
                        format!("task {i} is {} and accepted a reply", self.state[i]),
                    );
                }
                match self.delivering {
                    Some(d)
                        if Some(d.task) == self.task_id[i]
                            && d.attempt == self.attempt[i]
                            && d.version == Version::new(self.version[i]) => {}
                    Some(d) => self.fail(
                        Invariant::StaleReplyAccepted,
                        now,
                        format!(
                            "task {i} accepted attempt {} version {} while at attempt {} version {}",
                            d.attempt,
                            d.version.raw(),
                            self.attempt[i],
                            self.version[i]
                        ),
                    ),
                    None => {}
                }
            }
            (EventKind::ApprovalRequested { .. }, Some(i)) => self.approvals_requested.push(i),
            (EventKind::Call(call), Some(i)) if call.recorded_output().is_some() => {
                self.recorded[i] = true;
            }
            (EventKind::RunStopped { stop_reason }, _) => {
                self.stops.push((now, stop_reason.clone()));
            }
            _ => {}
        }
    }

    /// Checks the snapshot after a step: terminal tasks stayed terminal, confirmed results are
    /// still completed, and the run's budget bounds hold.
    pub(crate) fn on_snapshot(&mut self, now: u64, report: &RunReport) {
        let mut used = report.budget.reserve;
        for row in &report.tasks {
            let Some(i) = self.index_of(row.id.as_str()) else {
                continue;
            };
            if self.state[i].is_terminal() && row.state != self.state[i] {
                self.fail(
                    Invariant::TerminalChanged,
                    now,
                    format!("task {i} was {} and is now {}", self.state[i], row.state),
                );
            }
            if self.confirmed[i] && row.state != TaskState::Completed {
                self.fail(
                    Invariant::ResultLost,
                    now,
                    format!("task {i} completed but is now {}", row.state),
                );
            }
            if !row.spent.fits_within(&row.granted) {
                self.fail(
                    Invariant::Budget,
                    now,
                    format!("task {i} spent {} of {}", row.spent, row.granted),
                );
            }
            let held = if row.state.is_terminal() {
                row.spent
            } else {
                row.granted
            };
            used = used.saturating_add(&held);
        }
        if !used.fits_within(&report.budget.limit) {
            self.fail(
                Invariant::Budget,
                now,
                format!(
                    "reserve + outstanding slices + spent = {used} > limit {}",
                    report.budget.limit
                ),
            );
        }
    }
}

/// Feeds event `e` to the trace hash: its variant and fields, and its ids (the run id, the task
/// id of a dispatch). Every id comes from an `IdSource` forked from the schedule's seed, so the
/// same seed gives the same hash, and a change of any id changes it.
pub(crate) fn hash_event(hasher: &mut sha2::Sha256, e: &Event) {
    use sha2::Digest;
    hasher.update(canonical(e).as_bytes());
    hasher.update(e.run_id.as_uuid().as_bytes());
    if let EventKind::Dispatched { task_id, .. } = &e.kind {
        hasher.update(task_id.as_uuid().as_bytes());
    }
}

/// An event as the trace prints it: its trace-file line (docs/trace.md), ids and all.
pub(crate) fn event_line(e: &Event) -> String {
    serde_json::to_string(e).expect("an event serializes")
}

/// The variant name and the fields of an event, without its ids: with [`hash_event`]'s ids,
/// what the trace hash covers of an event (cheaper than its JSON line, which a campaign of a
/// million schedules would write for nothing).
fn canonical(e: &Event) -> String {
    let kind = match &e.kind {
        EventKind::Transition { from, to } => format!("transition {from} {to}"),
        EventKind::Dispatched {
            attempt,
            worker,
            granted,
            ..
        } => format!("dispatched {attempt} {worker} {granted}"),
        EventKind::TaskClosed { spent } => format!("closed {spent}"),
        EventKind::TaskSettled { spent } => format!("settled {spent}"),
        k if k.rejection().is_some() => k.name().to_string(),
        EventKind::ResultKept { version, same, .. } => format!("kept {version} {same}"),
        EventKind::ApprovalDecided { approved } => format!("approval {approved}"),
        EventKind::RunStopped { stop_reason } => format!("stopped {stop_reason}"),
        EventKind::RunResumed {
            replayed,
            redispatched,
        } => format!("resumed {replayed} {redispatched}"),
        other => {
            let debug = format!("{other:?}");
            debug
                .split([' ', '{', '('])
                .next()
                .unwrap_or_default()
                .to_owned()
        }
    };
    format!("{}|{:?}|{}|{kind}\n", e.seq, e.task, e.at_ms)
}
