//! [`AgentRole`]: the kind of agent a plan node asks for.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The role a plan node asks for, which selects the agent that handles it (`worker` unless the
/// node says otherwise). Every assignment of the node carries it, so it is cheap to clone: a
/// role of up to 15 bytes (the usual kind) is held inline and a clone copies its 16 bytes,
/// touching no reference count; a longer one shares its text.
///
/// ```
/// use quorate_protocols::AgentRole;
/// let role = AgentRole::from("researcher");
/// assert_eq!(role, "researcher");
/// assert_eq!(&*role.clone(), "researcher");
/// assert_eq!(AgentRole::default(), "worker");
/// assert_eq!(serde_json::to_string(&role).unwrap(), "\"researcher\"");
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct AgentRole(ecow::EcoString);

impl AgentRole {
    /// The role as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `worker`, the role of a node that names none.
impl Default for AgentRole {
    fn default() -> Self {
        Self(ecow::EcoString::inline("worker"))
    }
}

impl From<&str> for AgentRole {
    fn from(value: &str) -> Self {
        Self(value.into())
    }
}

impl From<String> for AgentRole {
    fn from(value: String) -> Self {
        Self(value.into())
    }
}

impl From<AgentRole> for String {
    fn from(value: AgentRole) -> Self {
        value.0.into()
    }
}

/// A role reads as its text: `&role` where a `&str` is expected.
impl std::ops::Deref for AgentRole {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for AgentRole {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for AgentRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for AgentRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}
