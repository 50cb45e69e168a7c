//! Using memory in the runtime: evidence references for an assignment, and the check that a
//! write does not depend on stale memory.
//!
//! A record read from a versioned store carries the store's version as its source version
//! ([`store_source`]). Before a write depends on such a record, [`before_write`] compares that
//! version with the target's current one: if they match, the write is gated on
//! `Precondition::KeyAtVersion` (so it fails at the execution gate if the target moves in the
//! meantime); if not, the memory must be refreshed first: re-read the target, write the new
//! observation (which supersedes the stale record and invalidates what was derived from it),
//! and ask again.

use quorate_protocols::{EvidenceRef, Precondition, ProvenanceRecord, RecordId, Source, Version};

/// The address of one record of the memory at `memory_key`: `<memory_key>/<record id>`.
#[must_use]
pub fn record_key(memory_key: &str, id: RecordId) -> String {
    format!("{memory_key}/{id}")
}

/// Evidence references for `ids`, read from the memory at `memory_key` at `version`.
#[must_use]
pub fn evidence_refs(
    memory_key: &str,
    version: Version,
    ids: impl IntoIterator<Item = RecordId>,
) -> Vec<EvidenceRef> {
    ids.into_iter()
        .map(|id| EvidenceRef::Record {
            key: record_key(memory_key, id),
            version,
        })
        .collect()
}

/// The source of a value read from a store under the name `name` at `version` (rendered as
/// `v<raw>`).
#[must_use]
pub fn store_source(name: impl Into<String>, version: Version) -> Source {
    Source {
        name: name.into(),
        version: version.to_string(),
    }
}

/// The store version in a source made by [`store_source`], if it is one.
#[must_use]
pub fn source_store_version(source: &Source) -> Option<Version> {
    source
        .version
        .strip_prefix('v')
        .and_then(|raw| raw.parse::<u64>().ok())
        .map(Version::new)
}

/// What must happen before a write that depends on a remembered record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a write must not depend on stale memory"]
pub enum BeforeWrite {
    /// The record was read at the target's current version: attach this precondition to the
    /// write so the execution gate re-checks it.
    Ready(Precondition),
    /// The target moved (or was removed, or the record's source version is not a store version):
    /// re-read the target, write the observation to memory, and ask again.
    Refresh {
        /// The target's store key (the record's object).
        key: String,
        /// The source version the memory holds.
        held: String,
        /// The target's current version (`None`: absent).
        current: Option<Version>,
    },
}

/// Compares the version `record` was observed at with the target's `current` version. The
/// target's store key is the record's object.
pub fn before_write(record: &ProvenanceRecord, current: Option<Version>) -> BeforeWrite {
    match (source_store_version(&record.source), current) {
        (Some(held), Some(now)) if held == now => BeforeWrite::Ready(Precondition::KeyAtVersion {
            key: record.object.clone(),
            version: now,
        }),
        _ => BeforeWrite::Refresh {
            key: record.object.clone(),
            held: record.source.version.clone(),
            current,
        },
    }
}

#[cfg(test)]
mod tests {
    use quorate_protocols::{AccessRule, EvidenceStatus, MemoryKind, Timestamp, Validity};

    use super::*;

    #[test]
    fn stale_records_must_be_refreshed() {
        let record = ProvenanceRecord {
            id: RecordId::from_u128(1),
            kind: MemoryKind::Semantic,
            object: "inventory/sku-42".into(),
            claim: "12 units".into(),
            source: store_source("inventory", Version::new(3)),
            observed_at: Timestamp(1),
            validity: Validity::default(),
            access: AccessRule::default(),
            status: EvidenceStatus::Verified,
            derived_from: vec![],
        };
        assert_eq!(source_store_version(&record.source), Some(Version::new(3)));
        assert_eq!(
            before_write(&record, Some(Version::new(3))),
            BeforeWrite::Ready(Precondition::KeyAtVersion {
                key: "inventory/sku-42".into(),
                version: Version::new(3)
            })
        );
        assert!(matches!(
            before_write(&record, Some(Version::new(5))),
            BeforeWrite::Refresh { current: Some(v), .. } if v == Version::new(5)
        ));
        assert!(matches!(
            before_write(&record, None),
            BeforeWrite::Refresh { .. }
        ));
        let mut foreign = record;
        foreign.source.version = "etag-abc".into();
        assert!(matches!(
            before_write(&foreign, Some(Version::new(3))),
            BeforeWrite::Refresh { .. }
        ));
        let refs = evidence_refs("memory/acme", Version::new(9), [RecordId::from_u128(1)]);
        assert_eq!(
            refs[0],
            EvidenceRef::Record {
                key: "memory/acme/00000000-0000-0000-0000-000000000001".into(),
                version: Version::new(9),
            }
        );
    }
}
