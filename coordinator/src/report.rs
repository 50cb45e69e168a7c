//! The run report: what `quorate run --json` prints.

use quorate_protocols::wire::ActionCounts;
use quorate_protocols::{Budget, NodeId, RunId, TaskState};
use serde::{Deserialize, Serialize};

use crate::core::{MessageCounts, SupervisorCore, TaskSlot};

/// One task's row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    /// Node id.
    pub id: NodeId,
    /// Final (or current) state.
    pub state: TaskState,
    /// Attempts dispatched.
    pub attempts: u32,
    /// Budget slice granted.
    pub granted: Budget,
    /// Budget spent.
    pub spent: Budget,
    /// The accepted result (completed tasks only; `null` otherwise).
    #[serde(default)]
    pub result: Option<quorate_protocols::Payload>,
    /// The top-up the task waits for (its slice ran out and its node says
    /// `on_exhausted = "ask"`); left out of the JSON otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_up: Option<Box<crate::TopUpRequest>>,
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
    /// The CLI exit code for this report's stop reason (0 completed; see
    /// [`crate::StopReason::exit_code`]); 8, the runtime's own failure, for a report without
    /// one (a run is reported only once it stopped, so that would be a bug, not a failed task).
    #[must_use]
    pub fn stop_exit_code(&self) -> u8 {
        self.stop.as_ref().map_or(
            crate::StopReason::EXIT_RUNTIME,
            crate::StopReason::exit_code,
        )
    }

    /// The report of `core` as it stands.
    pub(crate) fn from_core(core: &SupervisorCore) -> Self {
        let plan = core.plan();
        let tasks = core
            .tasks()
            .iter()
            .enumerate()
            .map(|(i, t)| row(plan.node(i as u32).id.clone(), t, t.result.clone()))
            .collect();
        Self::with_rows(core, tasks)
    }

    /// The final report of a stopped `core`, made from its per-task records, which it takes:
    /// a finished run's largest part becomes its report in place, without a second copy of
    /// every task alive at the peak (the rows reuse the records' memory, see the test).
    pub(crate) fn take_from_core(core: &mut SupervisorCore) -> Self {
        let slots = core.take_tasks();
        let plan = core.plan();
        let tasks = slots
            .into_iter()
            .enumerate()
            .map(|(i, mut t)| {
                let result = t.result.take();
                row(plan.node(i as u32).id.clone(), &t, result)
            })
            .collect();
        Self::with_rows(core, tasks)
    }

    fn with_rows(core: &SupervisorCore, tasks: Vec<TaskRow>) -> Self {
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

fn row(id: NodeId, t: &TaskSlot, result: Option<quorate_protocols::Payload>) -> TaskRow {
    TaskRow {
        id,
        state: t.state,
        attempts: t.attempt,
        granted: t.granted,
        spent: t.spent,
        result,
        top_up: t.parked_top_up().cloned().map(Box::new),
    }
}

#[cfg(test)]
mod tests {
    use quorate_protocols::{AgentId, Budget, NodeSpec, PlanSpec, Role, RunId, Sender};

    use crate::SupervisorCore;

    fn core(tasks: usize) -> SupervisorCore {
        let spec = PlanSpec {
            budget: Budget::new(1000, 0, 1000, 1000),
            nodes: (0..tasks)
                .map(|i| NodeSpec::named(&format!("n{i}")))
                .collect(),
            ..PlanSpec::default()
        };
        crate::core::test_core(spec)
    }

    #[test]
    fn the_final_report_reuses_the_task_records_memory() {
        let mut core = core(100);
        core.start(0);
        let before = core.snapshot();
        // Not stopped yet: nothing is taken.
        assert_eq!(core.final_report(), Some(before));
        assert_eq!(core.tasks().len(), 100);
        // Cancelled: the running tasks get a grace period to answer, then the run stops.
        core.handle_cancel(1).expect("tasks are running");
        core.handle_tick(u64::MAX / 2);
        while core.poll_effect().is_some() {}
        assert!(core.stop_reason().is_some(), "the run stopped");
        let records = core.tasks().as_ptr() as usize;
        let expected = core.snapshot();
        let task3 = core.task_id(3);
        let report = core.final_report().expect("the first final report");
        assert_eq!(report, expected, "the same report as a snapshot");
        assert_eq!(core.final_report(), None, "given once");
        assert_eq!(report.tasks[7].id.as_str(), "n7");
        assert!(core.tasks().is_empty(), "the records were taken");
        // This rests on the standard library collecting a `Vec`'s `into_iter().map()` in place
        // when the new items fit in the old ones (not a documented guarantee): if a toolchain
        // stops doing that, this says so.
        assert_eq!(
            report.tasks.as_ptr() as usize,
            records,
            "the rows live where the records were: no second copy at the peak"
        );
        // Inputs after the end find no task and change nothing, not even the counters.
        let reply = quorate_protocols::Envelope::new(
            RunId::from_u128(1),
            task3,
            Sender {
                agent: AgentId::from_u128(2),
                role: Role::Worker,
            },
            quorate_protocols::wire::Report {
                outcome: quorate_protocols::wire::Outcome::Cancelled,
                spent: Budget::ZERO,
                actions: Default::default(),
                calls: vec![],
            },
            &mut quorate_protocols::IdSource::seeded(2),
        );
        let finished = Err(crate::InputRefused::Finished);
        assert_eq!(core.handle_report(u64::MAX / 2, reply), finished);
        assert_eq!(core.handle_approval(u64::MAX / 2, 3, true), finished);
        core.handle_tick(u64::MAX / 2);
        assert!(core.poll_effect().is_none());
        assert_eq!(core.messages(), expected.messages);
    }
}
