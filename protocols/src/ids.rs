//! Identifier newtypes.
//!
//! Every id is a [`Uuid`] wrapped in its own type, so a `TaskId` can never be passed where a
//! `RunId` is expected. Ids whose creation order matters (runs, correlation ids) use UUID v7, which
//! sorts by creation time; the others use v4 from a thread-local fast RNG (no syscall per id).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $gen:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh, random id.
            #[must_use]
            pub fn new() -> Self {
                Self(Uuid::$gen())
            }

            /// Wraps an existing uuid (for ids read back from a store or a seeded simulation).
            #[must_use]
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// A deterministic id built from a 128-bit number; for seeded simulations and tests.
            #[must_use]
            pub const fn from_u128(value: u128) -> Self {
                Self(Uuid::from_u128(value))
            }

            /// The wrapped uuid.
            #[must_use]
            pub const fn as_uuid(&self) -> &Uuid {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

uuid_id!(
    /// One execution of a plan. UUID v7: run ids sort by start time.
    RunId,
    now_v7
);
uuid_id!(
    /// One task of a run (a node of the plan DAG, or a sub-task an agent delegated).
    TaskId,
    new_v4
);
uuid_id!(
    /// One agent: a worker, a peer or the supervisor itself.
    AgentId,
    new_v4
);
uuid_id!(
    /// Ties a reply to the request it answers. UUID v7, so a log sorted by it is in send order.
    CorrelationId,
    now_v7
);
uuid_id!(
    /// The first sighting of a dedupe key wins; every later envelope carrying it is a duplicate.
    DedupeKey,
    new_v4
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_differ_and_v7_sorts_by_creation() {
        let a = RunId::new();
        let b = RunId::new();
        assert_ne!(a, b);
        assert!(a < b, "v7 ids are time ordered: {a} !< {b}");
        assert_ne!(TaskId::new(), TaskId::new());
    }

    #[test]
    fn ids_serialize_as_plain_uuid_strings() {
        let id = TaskId::from_u128(7);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"00000000-0000-0000-0000-000000000007\"");
        let back: TaskId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, id);
    }
}
