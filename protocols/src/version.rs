//! Opaque versions.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A version token of a stored value (or of a task's state).
///
/// Versions are compared **only for equality**: a backend may hand out any increasing revision
/// (etcd's revisions are store-wide, not "previous + 1"), so code must never compute the next
/// version or order two versions. `Version` deliberately has no `Ord` and no arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Version(u64);

impl Version {
    /// Wraps a backend's raw revision.
    #[must_use]
    pub const fn new(raw: u64) -> Self {
        Self(raw)
    }

    /// The backend's raw revision, for storage and logs.
    #[must_use]
    pub const fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}
