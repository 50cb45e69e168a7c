//! The run's metrics: the one place that turns what a run recorded into `metrics` counters.
//!
//! Nothing here decides anything, and nothing is counted per message: a shell counts each
//! event it carries out in a tally (an array increment), and everything is published
//! to the `metrics` facade once, when the run (or a peer) stops, from the tally, the final
//! [`RunReport`] and the stores' conflict counters. Without a recorder installed (the
//! default; `quorate run --metrics-addr` installs the Prometheus one) publishing costs a few
//! dozen no-op calls per run.
//!
//! Every name is a constant of [`names`]; `docs/observability.md` has the table. The call
//! latency histogram is recorded live by the worker shell (see
//! [`quorate_workers::telemetry`]).

use quorate_protocols::{Budget, TaskState};

use crate::event::{EventKind, KindCounts};
use crate::RunReport;
use quorate_workers::CallEvent;

/// Metric names (Prometheus text format: counters end in `_total`, units are in the name).
pub mod names {
    pub use quorate_workers::telemetry::{CALL_DURATION_SECONDS, MODEL_CALL_DURATION_SECONDS};

    /// Runs that stopped, by `stop_reason` (`completed`, `failed`, ...).
    pub const RUNS: &str = "quorate_runs_total";
    /// Tasks by the `state` they ended the run in.
    pub const TASKS: &str = "quorate_tasks_total";
    /// Attempts dispatched, summed over tasks.
    pub const TASK_ATTEMPTS: &str = "quorate_task_attempts_total";
    /// Envelopes the supervisor (or the peers) sent to workers.
    pub const ENVELOPES_SENT: &str = "quorate_envelopes_sent_total";
    /// Replies that reached the supervisor (or a peer), accepted or not.
    pub const ENVELOPES_DELIVERED: &str = "quorate_envelopes_delivered_total";
    /// Replies rejected, by `reason` (`duplicate`, `late`, `stale`, `unauthorized`).
    pub const ENVELOPES_REJECTED: &str = "quorate_envelopes_rejected_total";
    /// Plain acknowledgements of a cancel or a rejection (not rejections).
    pub const ENVELOPES_ACKNOWLEDGED: &str = "quorate_envelopes_acknowledged_total";
    /// Budget steps, by `flow` (`granted` to tasks, `spent` by them, `returned` unused).
    pub const BUDGET_STEPS: &str = "quorate_budget_steps_total";
    /// Budget tool calls, by `flow`.
    pub const BUDGET_TOOL_CALLS: &str = "quorate_budget_tool_calls_total";
    /// Budget model tokens, by `flow`.
    pub const BUDGET_TOKENS: &str = "quorate_budget_tokens_total";
    /// Budget cost in the deployment's smallest money unit, by `flow`.
    pub const BUDGET_COST: &str = "quorate_budget_cost_units_total";
    /// Execution-gate decisions, by `decision` (`execute`, `reject`, `await-approval`) and,
    /// for `reject`, `reason` (the refusal's class: `unknown-tool`, `missing-capability`...).
    pub const GATE_DECISIONS: &str = "quorate_gate_decisions_total";
    /// Calls whose outcome became unknown (a timeout after sending).
    pub const ACTIONS_UNKNOWN: &str = "quorate_actions_unknown_total";
    /// Unknown outcomes resolved by querying the tool.
    pub const ACTIONS_RECOVERED: &str = "quorate_actions_recovered_total";
    /// Effects that happened more than once for one action id (must stay 0).
    pub const DUPLICATE_EFFECTS: &str = "quorate_duplicate_effects_total";
    /// Compare-and-swaps the run's stores refused, by `store` (`results`; in peer mode also
    /// `claims`, `states`, `budget`).
    pub const CAS_CONFLICTS: &str = "quorate_cas_conflicts_total";
    /// Trace events, by `kind` (the trace's kind names).
    pub const EVENTS: &str = "quorate_events_total";
}

/// Gives every metric of [`names`] its description (the `# HELP` line of the Prometheus text)
/// in the installed recorder; call it once after installing one.
pub fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    for (name, help) in [
        (names::RUNS, "Runs that stopped, by stop reason."),
        (names::TASKS, "Tasks by the state they ended the run in."),
        (names::TASK_ATTEMPTS, "Attempts dispatched."),
        (names::ENVELOPES_SENT, "Envelopes sent to workers."),
        (
            names::ENVELOPES_DELIVERED,
            "Replies that reached the supervisor, accepted or not.",
        ),
        (names::ENVELOPES_REJECTED, "Replies rejected, by reason."),
        (
            names::ENVELOPES_ACKNOWLEDGED,
            "Plain acknowledgements of a cancel or a rejection.",
        ),
        (
            names::BUDGET_STEPS,
            "Budget steps granted to tasks, spent, returned unused.",
        ),
        (
            names::BUDGET_TOOL_CALLS,
            "Budget tool calls granted to tasks, spent, returned unused.",
        ),
        (
            names::BUDGET_TOKENS,
            "Budget model tokens granted to tasks, spent, returned unused.",
        ),
        (
            names::BUDGET_COST,
            "Budget cost units granted to tasks, spent, returned unused.",
        ),
        (
            names::GATE_DECISIONS,
            "Execution-gate decisions, by decision and refusal reason.",
        ),
        (
            names::ACTIONS_UNKNOWN,
            "Calls whose outcome became unknown.",
        ),
        (
            names::ACTIONS_RECOVERED,
            "Unknown outcomes resolved by a query.",
        ),
        (
            names::DUPLICATE_EFFECTS,
            "Effects that happened twice for one action id.",
        ),
        (
            names::CAS_CONFLICTS,
            "Compare-and-swaps the run's stores refused, by store.",
        ),
        (names::EVENTS, "Trace events logged, by kind."),
    ] {
        describe_counter!(name, help);
    }
    describe_histogram!(
        names::CALL_DURATION_SECONDS,
        Unit::Seconds,
        "Wall time of each tool call, by tool and outcome."
    );
}

/// What a shell counts while it carries out a run's records: events by kind and gate
/// refusals by class. Published (and reset) by [`RunTally::publish`].
#[derive(Clone, Debug, Default)]
pub(crate) struct RunTally {
    kinds: KindCounts,
    /// Gate refusals by class (a handful of classes: a short list beats a map).
    refusals: Vec<(String, u64)>,
    approvals: u64,
}

impl RunTally {
    /// [`Self::observe`], of an event whose position in the kind names (`told`) the run log's
    /// packing already told apart (the kinds every task logs, which need nothing else).
    #[inline]
    pub(crate) fn observe_told(&mut self, told: Option<usize>, kind: &EventKind) {
        match told {
            Some(i) => self.kinds.count_at(i),
            None => self.observe(kind),
        }
    }

    /// Counts one event the shell carried out.
    pub(crate) fn observe(&mut self, kind: &EventKind) {
        self.kinds.count(kind);
        match kind {
            EventKind::Call(call) => {
                if let CallEvent::CallRejected { class, .. } = &**call {
                    match self.refusals.iter_mut().find(|(c, _)| c == class) {
                        Some((_, n)) => *n += 1,
                        None => self.refusals.push((class.clone(), 1)),
                    }
                }
            }
            EventKind::ApprovalRequested { .. } => self.approvals += 1,
            _ => {}
        }
    }

    /// Publishes the events by kind and the gate's refusals and approval requests, and
    /// resets the tally.
    pub(crate) fn publish(&mut self) {
        for (kind, n) in self.kinds.drain() {
            metrics::counter!(names::EVENTS, "kind" => kind).increment(n);
        }
        for (class, n) in self.refusals.drain(..) {
            let reason = refusal_reason(&class);
            metrics::counter!(names::GATE_DECISIONS, "decision" => "reject", "reason" => reason)
                .increment(n);
        }
        if self.approvals > 0 {
            metrics::counter!(names::GATE_DECISIONS, "decision" => "await-approval")
                .increment(std::mem::take(&mut self.approvals));
        }
    }
}

/// The `reason` label of a refusal class: the class without its `rejected:` prefix
/// (`unknown` for a refusal that came without a class, from a worker of an older version).
fn refusal_reason(class: &str) -> String {
    match class.strip_prefix("rejected:").unwrap_or(class) {
        "" => "unknown".to_string(),
        reason => reason.to_string(),
    }
}

/// Publishes a stopped run's report: the run by stop reason, tasks by state, attempts,
/// envelopes, budget flows, executed calls and action outcomes.
pub(crate) fn publish_report(report: &RunReport) {
    let stop = report.stop.as_ref().map_or("none", crate::StopReason::name);
    metrics::counter!(names::RUNS, "stop_reason" => stop).increment(1);
    let mut states = [0u64; TaskState::ALL.len()];
    let mut attempts = 0u64;
    for task in &report.tasks {
        if let Some(i) = TaskState::ALL.iter().position(|s| *s == task.state) {
            states[i] += 1;
        }
        attempts += u64::from(task.attempts);
    }
    for (state, n) in TaskState::ALL.iter().zip(states) {
        if n > 0 {
            metrics::counter!(names::TASKS, "state" => state.to_string()).increment(n);
        }
    }
    metrics::counter!(names::TASK_ATTEMPTS).increment(attempts);
    let m = &report.messages;
    metrics::counter!(names::ENVELOPES_SENT).increment(m.sent);
    metrics::counter!(names::ENVELOPES_DELIVERED).increment(m.delivered);
    metrics::counter!(names::ENVELOPES_ACKNOWLEDGED).increment(m.acknowledged);
    for (reason, n) in [
        ("duplicate", m.rejected_duplicate),
        ("late", m.rejected_late),
        ("stale", m.rejected_stale),
        ("unauthorized", m.rejected_unauthorized),
    ] {
        metrics::counter!(names::ENVELOPES_REJECTED, "reason" => reason).increment(n);
    }
    let b = &report.budget;
    for (flow, budget) in [
        ("granted", b.granted),
        ("spent", b.spent),
        ("returned", b.returned),
    ] {
        publish_budget(flow, &budget);
    }
    let a = &report.actions;
    metrics::counter!(names::GATE_DECISIONS, "decision" => "execute").increment(a.executed);
    metrics::counter!(names::ACTIONS_UNKNOWN).increment(a.unknown);
    metrics::counter!(names::ACTIONS_RECOVERED).increment(a.recovered);
    metrics::counter!(names::DUPLICATE_EFFECTS).increment(a.duplicate_effects);
}

fn publish_budget(flow: &'static str, budget: &Budget) {
    metrics::counter!(names::BUDGET_STEPS, "flow" => flow).increment(budget.steps);
    metrics::counter!(names::BUDGET_TOOL_CALLS, "flow" => flow).increment(budget.tool_calls);
    metrics::counter!(names::BUDGET_TOKENS, "flow" => flow).increment(budget.tokens);
    metrics::counter!(names::BUDGET_COST, "flow" => flow).increment(budget.cost);
}

/// Publishes the conflicts of the run's store `store` (its [`quorate_state::MemoryStore::conflicts`]).
pub(crate) fn publish_conflicts(store: &'static str, conflicts: u64) {
    metrics::counter!(names::CAS_CONFLICTS, "store" => store).increment(conflicts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_by_class_and_labelled_without_the_prefix() {
        let mut tally = RunTally::default();
        let rejected = |class: &str| {
            EventKind::of_call(CallEvent::CallRejected {
                tool: "db.delete".into(),
                reason: "words for people".into(),
                class: class.into(),
            })
        };
        tally.observe(&rejected("rejected:missing-capability"));
        tally.observe(&rejected("rejected:missing-capability"));
        tally.observe(&rejected("rejected:budget"));
        tally.observe(&EventKind::ReplyAccepted);
        assert_eq!(
            tally.refusals,
            vec![
                ("rejected:missing-capability".to_string(), 2),
                ("rejected:budget".to_string(), 1)
            ]
        );
        assert_eq!(
            refusal_reason("rejected:missing-capability"),
            "missing-capability"
        );
        assert_eq!(refusal_reason(""), "unknown");
        tally.publish();
        assert!(tally.refusals.is_empty(), "published and reset");
        assert_eq!(tally.kinds.drain().count(), 0, "kinds published and reset");
    }
}
