//! Replanning: a new plan version for a running run.
//!
//! Completed tasks carry over with their results and are never scheduled again; tasks of the old
//! version that are not in the new plan are cancelled (running ones are told so); a new version
//! can neither widen the run's capabilities nor raise its budget. Replies for dropped tasks are
//! late from then on.

use quorate_protocols::wire::Control;
use quorate_protocols::{Budget, Component, NodeId, PlanError, PlanSpec, TaskEvent, TaskState};

use super::task::TaskSlot;
use super::SupervisorCore;
use crate::event::EventKind;

/// A new plan version was refused; the run goes on with the old one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplanError {
    /// The new plan is not valid.
    #[error("new plan is invalid: {0}")]
    Invalid(#[from] PlanError),
    /// The new plan asks for capabilities the run does not hold.
    #[error("new plan widens the run's capabilities by {missing}")]
    WidensCapabilities {
        /// What it asked for beyond the old set.
        missing: quorate_protocols::Capabilities,
    },
    /// The new plan's budget is larger than the run's.
    #[error("new plan raises the budget's {component} from {old} to {new}")]
    WidensBudget {
        /// The component.
        component: Component,
        /// The run's limit.
        old: u64,
        /// The new plan's.
        new: u64,
    },
    /// A carried-over task changed its dependencies, so its completed result would no longer
    /// mean the same.
    #[error("task {node} is completed; a new plan cannot change it")]
    CompletedTaskChanged {
        /// The task.
        node: NodeId,
    },
    /// The run stopped, or is stopping: a stop was requested, or every task ended and the run
    /// only waits for a worker's acknowledgement.
    #[error("the run has stopped; there is nothing to replan")]
    Stopped,
}

/// A task a replan dropped (it was cancelled first if it was live): what its cancel's
/// acknowledgement needs to settle its charge, and its name for the `task-settled` event.
#[derive(Debug)]
pub(super) struct Retired {
    pub(super) name: std::sync::Arc<str>,
    pub(super) allocated: bool,
    pub(super) granted: Budget,
    /// What the task is charged: its close's figure, then what an acknowledgement settled.
    pub(super) charged: Budget,
}

/// What a new plan version `spec` must satisfy against the current plan `old`, whose node `i`
/// is in state `state(i)` (see the module docs): it is valid, does not widen the run's
/// capabilities or budget, and keeps the dependencies of completed tasks. Both topologies
/// check a fallback with it.
pub(crate) fn check_new_version(
    old: &quorate_protocols::Plan,
    state: impl Fn(u32) -> TaskState,
    spec: PlanSpec,
) -> Result<quorate_protocols::Plan, ReplanError> {
    let old_spec = old.spec();
    let missing = old_spec.capabilities.missing(&spec.capabilities);
    if !missing.is_empty() {
        return Err(ReplanError::WidensCapabilities { missing });
    }
    if let Some(component) = spec.budget.first_excess(&old_spec.budget) {
        return Err(ReplanError::WidensBudget {
            component,
            old: old_spec.budget.get(component),
            new: spec.budget.get(component),
        });
    }
    let plan = spec.validate()?;
    // Completed tasks must keep their meaning: same dependencies.
    for i in 0..old.len() as u32 {
        if state(i) != TaskState::Completed {
            continue;
        }
        let node = old.node(i);
        if let Some(j) = plan.index_of(&node.id) {
            if plan.node(j).deps != node.deps {
                return Err(ReplanError::CompletedTaskChanged {
                    node: node.id.clone(),
                });
            }
        }
    }
    Ok(plan)
}

impl SupervisorCore {
    /// Replaces the plan with `spec` as a new version (see the module docs).
    pub fn handle_replan(&mut self, now: u64, spec: PlanSpec) -> Result<(), ReplanError> {
        if !self.phase.replans() {
            return Err(ReplanError::Stopped);
        }
        let plan = self.check_replan(spec)?;
        // Cancel live tasks the new plan drops.
        for i in 0..self.tasks.len() as u32 {
            let id = self.plan.node(i).id.clone();
            let state = self.tasks[i as usize].state;
            if plan.index_of(&id).is_none() && !state.is_terminal() {
                // A task whose result commit is out has no attempt left to stop.
                let out = matches!(state, TaskState::Running | TaskState::WaitingApproval);
                if std::mem::take(&mut self.tasks[i as usize].committing) {
                    // Its answer will find the task gone.
                    self.committing -= 1;
                } else if out {
                    self.send_control(now, i, Control::Cancel);
                }
                self.end_task(now, i, TaskEvent::Cancelled);
            }
        }
        self.adopt_plan(plan);
        self.ready.clear();
        self.record(
            now,
            None,
            EventKind::Replanned {
                plan_version: self.plan_version,
                tasks: self.plan.len(),
                nodes: self.described_plan(),
            },
        );
        for j in 0..self.plan.len() as u32 {
            let slot = &self.tasks[j as usize];
            if slot.state == TaskState::Ready {
                self.ready.push_back(j);
            } else if slot.state == TaskState::Pending && slot.deps_left == 0 && !slot.checking {
                self.make_ready(now, j);
            }
        }
        self.after_input(now);
        Ok(())
    }

    /// What a new plan version must satisfy against the current one (see the module docs): it
    /// is valid, does not widen the run's capabilities or budget, and keeps the dependencies of
    /// completed tasks. Replay checks a fallback with it too.
    pub(super) fn check_replan(
        &self,
        spec: PlanSpec,
    ) -> Result<quorate_protocols::Plan, ReplanError> {
        check_new_version(&self.plan, |i| self.tasks[i as usize].state, spec)
    }

    /// The structural half of a replan, shared with resume: `plan` becomes the next version;
    /// slots move over by node id (new nodes get fresh slots and ids, dropped ones' ids are
    /// retired), pending checks are forgotten and dependencies recounted. Nothing is recorded
    /// or sent.
    pub(super) fn adopt_plan(&mut self, plan: quorate_protocols::Plan) {
        // Move slots over by node id; new nodes get fresh slots.
        let mut old_slots: Vec<Option<TaskSlot>> = std::mem::take(&mut self.tasks)
            .into_iter()
            .map(Some)
            .collect();
        let mut tasks = Vec::with_capacity(plan.len());
        let mut ids = Vec::with_capacity(plan.len());
        for j in 0..plan.len() as u32 {
            let id = &plan.node(j).id;
            let (slot, task_id) = match self.plan.index_of(id) {
                Some(i) => (
                    old_slots[i as usize]
                        .take()
                        .expect("each old slot moves once"),
                    self.by_id.id(i),
                ),
                // A fresh id: the minted one of slot `j` may belong to a node that moved.
                None => (TaskSlot::new(0), self.ids.task_id()),
            };
            tasks.push(slot);
            ids.push(task_id);
        }
        for (i, slot) in old_slots.iter().enumerate() {
            if let Some(slot) = slot {
                let retired = Retired {
                    name: self.plan.shared_name(i as u32),
                    allocated: slot.allocated,
                    granted: slot.granted,
                    charged: slot.spent,
                };
                self.retired.insert(self.by_id.id(i as u32), retired);
            }
        }
        // Checks still out were asked by the old version: their answers will be ignored, and a
        // task that still has no dependency left is checked again below, against its new
        // version's preconditions.
        for slot in &mut tasks {
            slot.checking = false;
        }
        // Recount dependencies against completed tasks; live tasks keep their state.
        for j in 0..plan.len() as u32 {
            let left = plan
                .deps(j)
                .iter()
                .filter(|&&d| tasks[d as usize].state != TaskState::Completed)
                .count();
            tasks[j as usize].deps_left = left as u32;
        }
        self.by_id.rebuild(&ids);
        self.counts = super::StateCounts::of(&tasks);
        self.tasks = tasks;
        self.name_waiting_records();
        self.plan = plan;
        self.plan_version += 1;
        self.root.limit = self.plan.spec().budget;
    }

    /// The shell checked the store preconditions named by `ticket`: `Ok` or the first failing
    /// check. A failure switches to the fallback plan if there is one (once), otherwise the
    /// task fails. An answer is refused, and changes nothing, if it answers an older plan
    /// version's checks (a replan renumbers the nodes and asks again:
    /// [`StalePlanVersion`](super::InputRefused::StalePlanVersion)), or no check of its node
    /// is out ([`NotChecking`](super::InputRefused::NotChecking)); one whose task ended
    /// meanwhile ([`AfterTerminal`](super::InputRefused::AfterTerminal)) is not awaited any
    /// more.
    pub fn handle_preconditions(
        &mut self,
        now: u64,
        ticket: super::CheckTicket,
        outcome: Result<(), quorate_state::PreconditionFailure>,
    ) -> Result<(), super::InputRefused> {
        use super::InputRefused;
        if ticket.plan_version != self.plan_version {
            return Err(InputRefused::StalePlanVersion {
                asked: ticket.plan_version,
                current: self.plan_version,
            });
        }
        let node = ticket.node;
        let nodes = self.tasks.len();
        let Some(slot) = self.tasks.get_mut(node as usize) else {
            return Err(InputRefused::UnknownNode { node, nodes });
        };
        if !slot.checking {
            return Err(InputRefused::NotChecking { node });
        }
        slot.checking = false;
        if slot.state.is_terminal() {
            return Err(InputRefused::AfterTerminal {
                node,
                state: slot.state,
            });
        }
        match outcome {
            Ok(()) => {
                if self.transition(now, node, TaskEvent::DependenciesMet) {
                    self.ready.push_back(node);
                }
            }
            Err(failure) => {
                let observation = failure.to_string();
                self.record(
                    now,
                    Some(node),
                    EventKind::PreconditionFailed {
                        observation: observation.clone(),
                    },
                );
                match self.fallback.take() {
                    Some(fallback) => {
                        if let Err(e) = self.handle_replan(now, fallback) {
                            self.fail(
                                now,
                                node,
                                format!("precondition: {observation}; replan refused: {e}"),
                            );
                        }
                    }
                    None => self.fail(now, node, format!("precondition: {observation}")),
                }
            }
        }
        self.after_input(now);
        Ok(())
    }

    /// Whether `run-started` and `replanned` list the plan's nodes and their dependencies (what
    /// a reader of the trace needs to draw the plan). Off by default: it walks the whole plan,
    /// which a large run does not want to pay for; [`run_star`](crate::run_star) turns it on for
    /// a run that writes a trace.
    pub fn set_describe_plan(&mut self, on: bool) {
        self.describe_plan = on;
    }

    /// The current plan's nodes for `run-started` and `replanned`, if they are to be described.
    pub(super) fn described_plan(&self) -> Vec<crate::event::PlanNode> {
        if self.describe_plan {
            crate::event::PlanNode::all(&self.plan)
        } else {
            Vec::new()
        }
    }

    /// A plan to switch to (once) when a store precondition fails.
    pub fn set_fallback_plan(&mut self, spec: PlanSpec) {
        self.fallback = Some(spec);
    }
}
