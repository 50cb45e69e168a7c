//! What `quorate check` (and `quorate run`, before running) warns about: a plan that is valid but
//! has a task that cannot do what its script says. Each is a [`PlanWarning`]; none stops a run
//! (a plan may show such a refusal on purpose), but `quorate check --deny-warnings` fails on
//! any.

use quorate_protocols::{Budget, Capabilities, Capability, NodeId};
use quorate_workers::scripted::Step;
use quorate_workers::Script;

use super::PlanFile;

/// A task that cannot take a step, or cannot make a call its script names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanWarning {
    /// The task's budget has no step: it cannot even answer.
    #[error("task {task} has 0 steps in its budget: it cannot take a single step")]
    NoSteps {
        /// The task (a delegated sub-task is `<task>.<name>`).
        task: NodeId,
    },
    /// A call step, but the task's budget has no tool call.
    #[error(
        "task {task}: script step {step} calls {tool}, but the task's budget has 0 tool calls: \
         the call is refused"
    )]
    NoToolCalls {
        /// The task.
        task: NodeId,
        /// The step (0-based, as in the script).
        step: usize,
        /// The tool it calls.
        tool: String,
    },
    /// A call step naming a tool whose capability the task does not hold.
    #[error(
        "task {task}: script step {step} calls {tool}, a capability the task lacks \
         (it has {capabilities}): the gate refuses the call"
    )]
    ToolOutsideCapabilities {
        /// The task.
        task: NodeId,
        /// The step (0-based).
        step: usize,
        /// The tool, also the capability it needs.
        tool: String,
        /// What the task holds.
        capabilities: Capabilities,
    },
    /// `on_exhausted = "ask"` in a peer plan: no supervisor keeps the request.
    #[error(
        "task {task}: on_exhausted = \"ask\" needs topology star (no supervisor keeps a peer \
         run's request): the task stops at its limit"
    )]
    AskInPeer {
        /// The task.
        task: NodeId,
    },
}

impl PlanFile {
    /// What is valid but cannot work as written, task by task (the plan's tasks, then the
    /// `[fallback]`'s own), delegated sub-tasks after their task.
    #[must_use]
    pub fn warnings(&self) -> Vec<PlanWarning> {
        let mut out = Vec::new();
        for t in self.all_tasks() {
            task(&t.id, &t.capabilities, &t.budget, &t.script, &mut out);
            if t.on_exhausted == quorate_protocols::OnExhausted::Ask
                && self.run.topology == super::Topology::Peer
            {
                out.push(PlanWarning::AskInPeer { task: t.id.clone() });
            }
        }
        out
    }
}

fn task(
    id: &NodeId,
    capabilities: &Capabilities,
    budget: &Budget,
    script: &Script,
    out: &mut Vec<PlanWarning>,
) {
    if budget.steps == 0 {
        out.push(PlanWarning::NoSteps { task: id.clone() });
    }
    let mut subtasks = Vec::new();
    for (step, s) in script.steps.iter().enumerate() {
        match s {
            Step::Call(call) => {
                let held =
                    Capability::new(call.tool.clone()).is_ok_and(|c| capabilities.contains(&c));
                if !held {
                    out.push(PlanWarning::ToolOutsideCapabilities {
                        task: id.clone(),
                        step,
                        tool: call.tool.clone(),
                        capabilities: capabilities.clone(),
                    });
                } else if budget.tool_calls == 0 {
                    out.push(PlanWarning::NoToolCalls {
                        task: id.clone(),
                        step,
                        tool: call.tool.clone(),
                    });
                }
            }
            Step::Delegate(d) => subtasks.extend(&d.subtasks),
            _ => {}
        }
    }
    for sub in subtasks {
        // Compiling the plan checked that every sub-task's name makes a node id.
        if let Ok(sub_id) = NodeId::new(format!("{id}.{}", sub.name)) {
            task(&sub_id, &sub.capabilities, &sub.budget, &sub.script, out);
        }
    }
}
