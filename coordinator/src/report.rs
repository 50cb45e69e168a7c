//! The run report: what `quorate run --json` prints.

use quorate_protocols::{Budget, RunId, TaskState};
use quorate_workers::messages::ActionCounts;
use serde::{Deserialize, Serialize};

use crate::core::{MessageCounts, SupervisorCore};

/// One task's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    /// Node id.
    pub id: String,
    /// Final (or current) state.
    pub state: TaskState,
    /// Attempts dispatched.
    pub attempts: u32,
    /// Budget slice granted.
    pub granted: Budget,
    /// Budget spent.
    pub spent: Budget,
}

/// The run's budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRow {
    /// The run's limit.
    pub limit: Budget,
    /// The coordination reserve.
    pub reserve: Budget,
    /// Sum of slices granted to tasks.
    pub granted: Budget,
    /// Spent by tasks.
    pub spent: Budget,
    /// Returned unused by tasks that ended.
    pub returned: Budget,
}

/// Everything a run reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run.
    pub run_id: RunId,
    /// Why it stopped (`null` while running).
    pub stop_reason: Option<String>,
    /// Detail of the stop reason (first failing observation, exhausted component...).
    pub stop_detail: Option<String>,
    /// Plan version the run ended on.
    pub plan_version: u32,
    /// One row per task, in plan order.
    pub tasks: Vec<TaskRow>,
    /// Budget totals.
    pub budget: BudgetRow,
    /// Message counters.
    pub messages: MessageCounts,
    /// Action counters summed over all attempts.
    pub actions: ActionCounts,
    /// The typed stop reason (the JSON carries it as `stop_reason` + `stop_detail`).
    #[serde(skip)]
    pub stop: Option<crate::StopReason>,
}

impl RunReport {
    /// The CLI exit code for this report's stop reason (0 completed; see [`crate::StopReason::exit_code`]).
    #[must_use]
    pub fn stop_exit_code(&self) -> u8 {
        self.stop.as_ref().map_or(1, crate::StopReason::exit_code)
    }

    pub(crate) fn from_core(core: &SupervisorCore) -> Self {
        let plan = core.plan();
        let tasks = core
            .tasks()
            .iter()
            .enumerate()
            .map(|(i, t)| TaskRow {
                id: plan.node(i as u32).id.to_string(),
                state: t.state,
                attempts: t.attempt,
                granted: t.granted,
                spent: t.spent,
            })
            .collect();
        let root = core.root();
        Self {
            run_id: core.run(),
            stop_reason: core.stop_reason().map(|s| s.name().to_string()),
            stop_detail: core.stop_reason().map(ToString::to_string),
            plan_version: core.plan_version(),
            tasks,
            budget: BudgetRow {
                limit: root.limit,
                reserve: root.reserve,
                granted: core.granted_total(),
                spent: root.spent().unwrap_or(root.limit),
                returned: root.returned,
            },
            messages: core.messages(),
            actions: core.actions(),
            stop: core.stop_reason().cloned(),
        }
    }
}
