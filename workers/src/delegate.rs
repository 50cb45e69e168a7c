//! Delegation: carving sub-task slices out of a task's own account.
//!
//! [`plan`] is pure: given the delegating task's account, capabilities and the proposed
//! sub-tasks, it either allocates every child slice on the account (all or nothing) and returns
//! the children's assignments, or refuses with a [`DelegationError`] and leaves the account as it
//! was. The worker core runs the children as attempts of their own and hands their results back
//! to the parent as one observation.

use quorate_protocols::{Budget, Capabilities, Envelope, NodeId};
use quorate_state::{Account, AccountId, LedgerError};

use crate::agent::SubtaskSpec;
use quorate_protocols::wire::{Assignment, TaskInput};

/// A delegation was refused; nothing was allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DelegationError {
    /// No sub-tasks were proposed.
    #[error("a delegation needs at least one sub-task")]
    Empty,
    /// Two sub-tasks share a name.
    #[error("sub-task name {name:?} is used twice")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A sub-task's name does not make a valid node id.
    #[error("sub-task name {name:?} is not a valid node id")]
    BadName {
        /// The name.
        name: String,
    },
    /// A sub-task asks for capabilities the delegating task does not hold.
    #[error("sub-task {name} asks for capabilities the task does not hold: {missing}")]
    WidensCapabilities {
        /// The sub-task.
        name: String,
        /// What it asked for beyond the task's set.
        missing: Capabilities,
    },
    /// The children's slices do not fit in what is left of the task's slice.
    #[error("sub-task {name} needs {requested} but the slice has {available} left: {source}")]
    ExceedsSlice {
        /// The first sub-task that did not fit.
        name: String,
        /// Its budget.
        requested: Budget,
        /// What was left for children when it was refused.
        available: Budget,
        /// The ledger's refusal.
        source: Box<LedgerError>,
    },
}

/// A child to start: its task id and assignment envelope.
pub(crate) struct Child {
    pub(crate) name: String,
    pub(crate) envelope: Envelope<Assignment>,
}

/// Allocates every child's slice on `account` (all or nothing) and builds the children's
/// assignments from the parent's envelope (with ids drawn from `ids`).
pub(crate) fn plan(
    parent: &Envelope<Assignment>,
    account: &mut Account,
    account_id: AccountId,
    subtasks: &[SubtaskSpec],
    ids: &mut quorate_protocols::IdSource,
) -> Result<Vec<Child>, DelegationError> {
    if subtasks.is_empty() {
        return Err(DelegationError::Empty);
    }
    let mut names: Vec<&str> = Vec::with_capacity(subtasks.len());
    for s in subtasks {
        if names.contains(&s.name.as_str()) {
            return Err(DelegationError::DuplicateName {
                name: s.name.clone(),
            });
        }
        names.push(&s.name);
        let missing = parent.payload.capabilities.missing(&s.capabilities);
        if !missing.is_empty() {
            return Err(DelegationError::WidensCapabilities {
                name: s.name.clone(),
                missing,
            });
        }
    }
    let mut trial = account.clone();
    let mut children = Vec::with_capacity(subtasks.len());
    for s in subtasks {
        let node = NodeId::new(format!("{}.{}", parent.payload.node, s.name)).map_err(|_| {
            DelegationError::BadName {
                name: s.name.clone(),
            }
        })?;
        let task = ids.task_id();
        let available = trial.headroom_for_children().unwrap_or_default();
        trial
            .allocate(account_id, AccountId::Task(task), s.budget)
            .map_err(|source| DelegationError::ExceedsSlice {
                name: s.name.clone(),
                requested: s.budget,
                available,
                source: Box::new(source),
            })?;
        let assignment = Assignment {
            node,
            role: s.role.as_str().into(),
            goal: None,
            inputs: std::iter::once(TaskInput {
                node: parent.payload.node.clone(),
                value: s.input.clone().into(),
                evidence: quorate_protocols::wire::SharedEvidence::default(),
            })
            .collect(),
            capabilities: parent.payload.capabilities.delegate(&s.capabilities),
            budget: s.budget,
            evidence_text: Vec::new(),
            // What must hold before the parent's writes must hold before its sub-tasks' too.
            preconditions: parent.payload.preconditions.clone(),
        };
        let mut envelope = Envelope::new(parent.run, task, parent.sender, assignment, ids);
        envelope.parent = Some(parent.task);
        envelope.attempt = 1;
        envelope.scope = parent.scope.clone();
        children.push(Child {
            name: s.name.clone(),
            envelope,
        });
    }
    *account = trial;
    Ok(children)
}
