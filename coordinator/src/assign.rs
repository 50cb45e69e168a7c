//! Building a task's assignment from the plan and its dependencies' results (shared by the
//! supervisor and the peers).

use quorate_protocols::wire::{Assignment, SharedEvidence, TaskInput};

use quorate_protocols::Plan;

/// The assignment of node `i`: its delegated capabilities (the run's intersected with the
/// node's), `budget`, the accepted results of its dependencies and their evidence (`result(d)`,
/// both shared, not copied) and its evidence text.
pub(crate) fn assignment<'a>(
    plan: &Plan,
    i: u32,
    budget: quorate_protocols::Budget,
    result: impl Fn(u32) -> Option<(&'a quorate_protocols::Payload, SharedEvidence)>,
    evidence_text: Vec<String>,
) -> Assignment {
    let node = plan.node(i);
    let inputs = plan
        .deps(i)
        .iter()
        .filter_map(|&d| {
            let (value, evidence) = result(d)?;
            Some(TaskInput {
                node: plan.node(d).id.clone(),
                value: value.clone(),
                evidence,
            })
        })
        .collect();
    Assignment {
        node: node.id.clone(),
        role: node.role.clone(),
        goal: node.goal.clone(),
        inputs,
        capabilities: plan.spec().capabilities.delegate(&node.capabilities),
        budget,
        evidence_text,
        preconditions: crate::acceptance::store_checks(plan, i),
    }
}
