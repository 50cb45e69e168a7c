//! Identifier newtypes.
//!
//! Every id is a [`Uuid`] wrapped in its own type, so a `TaskId` can never be passed where a
//! `RunId` is expected. Ids whose creation order matters (runs, correlation ids, records) are
//! UUID v7; the others are v4. Fresh ids come from an [`IdSource`](crate::IdSource), which the
//! caller seeds: this module reads no clock and no randomness.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
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
    /// One execution of a plan. UUID v7: run ids sort by start time (the
    /// [`IdSource`](crate::IdSource) epoch of the shell that started the run).
    RunId);
uuid_id!(
    /// One task of a run (a node of the plan DAG, or a sub-task an agent delegated).
    TaskId);
/// The layout of the task ids a supervisor mints for a run: a prefix drawn per run from its
/// [`IdSource`](crate::IdSource::task_prefix) (the 96 upper bits of a v4 id) with the node index in the low 32 bits. The supervisor finds a
/// reply's task from it and a worker keeps its records by it, without a map; the ids are names,
/// not secrets.
impl TaskId {
    pub(crate) const INDEX_BITS: u128 = 0xffff_ffff;

    /// The id of node `index` under run prefix `prefix`.
    ///
    /// ```
    /// use quorate_protocols::{IdSource, TaskId};
    /// let prefix = IdSource::seeded(1).task_prefix();
    /// let id = TaskId::minted(prefix, 7);
    /// assert_eq!((id.prefix(), id.index()), (prefix, 7));
    /// ```
    #[must_use]
    pub fn minted(prefix: u128, index: u32) -> TaskId {
        TaskId::from_u128((prefix & !Self::INDEX_BITS) | u128::from(index))
    }

    /// The run prefix part of the id (whatever minted it).
    #[must_use]
    pub fn prefix(&self) -> u128 {
        self.as_uuid().as_u128() & !Self::INDEX_BITS
    }

    /// The node index part of the id (meaningful for minted ids only).
    #[must_use]
    pub fn index(&self) -> u32 {
        (self.as_uuid().as_u128() & Self::INDEX_BITS) as u32
    }
}

uuid_id!(
    /// One agent: a worker, a peer or the supervisor itself.
    AgentId);
uuid_id!(
    /// Ties a reply to the request it answers. UUID v7, so a log sorted by it is in send order
    /// (exactly for ids drawn from one [`IdSource`](crate::IdSource)).
    CorrelationId);
uuid_id!(
    /// The first sighting of a dedupe key wins; every later envelope carrying it is a duplicate.
    DedupeKey);
uuid_id!(
    /// Identifies one [`ProvenanceRecord`](crate::ProvenanceRecord). UUID v7: records sort by
    /// creation (exactly for ids drawn from one [`IdSource`](crate::IdSource)).
    RecordId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_their_formats() {
        let id = RecordId::from_u128(7);
        assert_eq!(
            format!("{id:?}"),
            "RecordId(00000000-0000-0000-0000-000000000007)"
        );
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"00000000-0000-0000-0000-000000000007\"");
        assert_eq!(serde_json::from_str::<RecordId>(&json).unwrap(), id);
    }

    #[test]
    fn ids_serialize_as_plain_uuid_strings() {
        let id = TaskId::from_u128(7);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"00000000-0000-0000-0000-000000000007\"");
        let back: TaskId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn a_minted_id_splits_into_its_prefix_and_index() {
        let prefix = 0xabcd_u128 << 64;
        let id = TaskId::minted(prefix | 0x55, 9);
        assert_eq!((id.prefix(), id.index()), (prefix, 9));
    }
}
