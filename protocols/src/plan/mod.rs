//! Plans: the DAG of tasks a run executes.
//!
//! A [`PlanSpec`] is what a user writes (TOML or JSON): the run's budget, its coordination
//! reserve, the run's capabilities, and a list of [`NodeSpec`]s. [`PlanSpec::validate`] turns it
//! into a [`Plan`], which is known to be acyclic, to reference only existing nodes, to stay within
//! its budget (`reserve + sum(node budgets) <= budget` in every component) and to grant no node a
//! capability the run does not hold. Code that takes a `Plan` never re-checks these.

mod check;
mod node;
mod role;
mod validate;

pub use check::{Acceptance, Check, Precondition};
pub use node::{NodeId, NodeIdError, NodeSpec, OnExhausted, MAX_NODE_ID_LEN};
pub use role::AgentRole;
pub use validate::{Plan, PlanError};

use serde::{Deserialize, Serialize};

use crate::{Budget, Capabilities};

/// A plan as written by a user. See [`PlanSpec::validate`].
///
/// ```
/// use quorate_protocols::*;
///
/// let spec: PlanSpec = serde_json::from_value(serde_json::json!({
///     "budget": {"steps": 20, "tool_calls": 5},
///     "reserve": {"steps": 2},
///     "capabilities": ["web.read"],
///     "nodes": [
///         {"id": "gather", "role": "researcher", "capabilities": ["web.read"], "budget": {"steps": 8, "tool_calls": 5}},
///         {"id": "write", "role": "writer", "deps": ["gather"], "budget": {"steps": 10}},
///     ],
/// })).unwrap();
/// let plan = spec.validate()?;
/// assert_eq!(plan.len(), 2);
/// assert_eq!(plan.dependents(0), &[1]);
/// # Ok::<(), PlanError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// Everything the run may spend.
    #[serde(default)]
    pub budget: Budget,
    /// Kept back by the coordinator for its own work; never delegated.
    #[serde(default)]
    pub reserve: Budget,
    /// The run's authority. Every node's capabilities must be a subset.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The tasks.
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
}
