use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Acceptance, AgentRole, Precondition};
use crate::{Budget, Capabilities};

/// Longest node id accepted.
pub const MAX_NODE_ID_LEN: usize = 128;

/// A plan node's name: 1 to 128 characters from `A-Z a-z 0-9 _ - .`. Cheap to clone, since
/// every assignment, input and citation names its node: a name of up to 15 bytes (the usual
/// kind) is held inline, so a clone copies its 16 bytes and touches no reference count (an
/// atomic operation each way, which on the bench's path cost more than the copy); a longer one
/// shares its text.
///
/// ```
/// use quorate_protocols::NodeId;
/// let id = NodeId::new("load").unwrap();
/// assert_eq!(id.clone(), id);
/// assert_eq!(id.as_str(), "load");
/// assert_eq!(NodeId::new("x".repeat(100)).unwrap().len(), 100);
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(ecow::EcoString);

/// A node id was malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeIdError {
    /// Empty id.
    #[error("node id is empty")]
    Empty,
    /// Longer than [`MAX_NODE_ID_LEN`].
    #[error("node id is {len} bytes long; the limit is {MAX_NODE_ID_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A character outside `A-Z a-z 0-9 _ - .`.
    #[error("node id {id:?} contains {bad:?}; allowed are A-Z a-z 0-9 _ - .")]
    BadChar {
        /// The id.
        id: String,
        /// The first bad character.
        bad: char,
    },
}

impl NodeId {
    /// Validates a node id.
    pub fn new(id: impl Into<String>) -> Result<Self, NodeIdError> {
        let id = id.into();
        if id.is_empty() {
            return Err(NodeIdError::Empty);
        }
        if id.len() > MAX_NODE_ID_LEN {
            return Err(NodeIdError::TooLong { len: id.len() });
        }
        if let Some(bad) = id
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        {
            return Err(NodeIdError::BadChar { id, bad });
        }
        Ok(Self(ecow::EcoString::from(id)))
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for NodeId {
    type Error = NodeIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        NodeId::new(value)
    }
}

impl From<NodeId> for String {
    fn from(value: NodeId) -> Self {
        value.0.to_string()
    }
}

/// A node id reads as its text: `id.len()`, `&id` where a `&str` is expected.
impl std::ops::Deref for NodeId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// The id's text; width and alignment apply, as for a `str`:
///
/// ```
/// let id = quorate_protocols::NodeId::new("load").unwrap();
/// assert_eq!(format!("[{id:<6}]"), "[load  ]");
/// ```
impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// One task of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique within the plan.
    pub id: NodeId,
    /// Which kind of agent handles it (matched against the agents registered for the run).
    #[serde(default)]
    pub role: AgentRole,
    /// Nodes that must complete first.
    #[serde(default)]
    pub deps: Vec<NodeId>,
    /// What the task may do: intersected with the run's capabilities on delegation.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The slice of the run's budget delegated to this task.
    #[serde(default)]
    pub budget: Budget,
    /// Must hold when the task becomes ready (checked by the supervisor, or by the claiming
    /// peer, against the run's store), and again before each of its write calls (checked by the
    /// worker's execution gate).
    #[serde(default)]
    pub preconditions: Vec<Precondition>,
    /// What observed results must show for the task to complete.
    #[serde(default)]
    pub acceptance: Acceptance,
    /// What the task is for, in words, handed to its agent with the assignment (an LLM agent's
    /// instruction). Data for the agent: it grants nothing. Shared: every assignment of the node
    /// carries it without a copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<std::sync::Arc<str>>,
    /// What happens when the task's slice runs out: the run stops (the default), or the task
    /// asks a person for a top-up (see [`OnExhausted`]).
    #[serde(default, skip_serializing_if = "OnExhausted::is_stop")]
    pub on_exhausted: OnExhausted,
}

/// What a task does when a component of its budget slice runs out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnExhausted {
    /// The task stops `stopped-limit`, and the run with it (the default).
    #[default]
    Stop,
    /// The task parks waiting for a person, with the top-up it needs; a grant out of the run's
    /// unallocated budget lets it go on, a rejection stops it as [`Stop`](Self::Stop) would
    /// have. Star topology only (a supervisor keeps the request).
    Ask,
}

impl OnExhausted {
    /// `true` for the default, [`OnExhausted::Stop`].
    #[must_use]
    pub fn is_stop(&self) -> bool {
        *self == OnExhausted::Stop
    }
}

impl NodeSpec {
    /// A node with the default role, no deps, no capabilities, no budget and the default
    /// acceptance check. Panics if `id` is not a valid [`NodeId`] (meant for tests and examples).
    #[must_use]
    pub fn named(id: &str) -> Self {
        Self {
            id: NodeId::new(id).expect("valid node id"),
            role: AgentRole::default(),
            deps: Vec::new(),
            capabilities: Capabilities::none(),
            budget: Budget::ZERO,
            preconditions: Vec::new(),
            acceptance: Acceptance::default(),
            goal: None,
            on_exhausted: OnExhausted::Stop,
        }
    }

    /// The same node depending on `deps`. Panics on an invalid id (tests and examples).
    #[must_use]
    pub fn after(mut self, deps: &[&str]) -> Self {
        self.deps = deps
            .iter()
            .map(|d| NodeId::new(*d).expect("valid node id"))
            .collect();
        self
    }

    /// The same node with budget `budget`.
    #[must_use]
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    /// The same node handled by agents of `role`.
    #[must_use]
    pub fn with_role(mut self, role: impl AsRef<str>) -> Self {
        self.role = AgentRole::from(role.as_ref());
        self
    }

    /// The same node asking for `capabilities`.
    #[must_use]
    pub fn with_capabilities(mut self, capabilities: Capabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The same node with acceptance check `acceptance`.
    #[must_use]
    pub fn with_acceptance(mut self, acceptance: Acceptance) -> Self {
        self.acceptance = acceptance;
        self
    }

    /// The same node with goal `goal` (see [`NodeSpec::goal`]).
    #[must_use]
    pub fn with_goal(mut self, goal: &str) -> Self {
        self.goal = Some(std::sync::Arc::from(goal));
        self
    }

    /// The same node, asking for a top-up (`Ask`) or stopping (`Stop`) when its slice runs out.
    #[must_use]
    pub fn with_on_exhausted(mut self, on_exhausted: OnExhausted) -> Self {
        self.on_exhausted = on_exhausted;
        self
    }

    /// The same node with `preconditions`.
    #[must_use]
    pub fn with_preconditions(mut self, preconditions: Vec<Precondition>) -> Self {
        self.preconditions = preconditions;
        self
    }
}
