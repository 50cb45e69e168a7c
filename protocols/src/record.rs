//! Provenance records: claims with their source, validity, access rule and evidence status.
//!
//! A record that a model inferred is *derived*: it lists the records it came from in
//! `derived_from` and never counts as an independent source ([`ProvenanceRecord::is_independent`]).

use serde::{Deserialize, Serialize};

use crate::{RecordId, TaskId};

/// Milliseconds since the Unix epoch. Time is always passed in, never read inside the cores.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

/// How far a record's claim can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvidenceStatus {
    /// Checked against its source.
    Verified,
    /// Not (yet) checked.
    Unverified,
    /// Another record about the same object and time disagrees; a verification need is open.
    Conflicting,
    /// A newer record replaced it.
    Superseded,
    /// Its validity interval ended.
    Expired,
}

/// What kind of memory a record is. The kind is a field, not a separate store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKind {
    /// Task-local scratch.
    Working,
    /// Something that happened.
    Episodic,
    /// A fact about the world.
    Semantic,
    /// How to do something.
    Procedural,
}

/// Where a claim came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The source's stable name (document URI, tool name, sensor id, ...).
    pub name: String,
    /// The source's own version of what was read (etag, revision, row version...).
    pub version: String,
}

/// When a claim holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validity {
    /// Valid from (inclusive); `None` means since forever.
    pub from: Option<Timestamp>,
    /// Valid until (exclusive); `None` means with no end.
    pub until: Option<Timestamp>,
}

impl Validity {
    /// `true` if `at` falls within the interval.
    #[must_use]
    pub fn contains(&self, at: Timestamp) -> bool {
        self.from.is_none_or(|f| f <= at) && self.until.is_none_or(|u| at < u)
    }

    /// `true` if the two intervals share at least one instant.
    #[must_use]
    pub fn overlaps(&self, other: &Validity) -> bool {
        let starts_before_other_ends = match (self.from, other.until) {
            (Some(f), Some(u)) => f < u,
            _ => true,
        };
        let other_starts_before_self_ends = match (other.from, self.until) {
            (Some(f), Some(u)) => f < u,
            _ => true,
        };
        starts_before_other_ends && other_starts_before_self_ends
    }
}

/// Who may read a record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessRule {
    /// Only readers of this tenant.
    pub tenant: String,
    /// If set, only this principal.
    pub principal: Option<String>,
    /// If set, only within this task.
    pub task: Option<TaskId>,
}

/// A claim with its provenance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvenanceRecord {
    /// The record's id.
    pub id: RecordId,
    /// Working, episodic, semantic or procedural.
    pub kind: MemoryKind,
    /// The object the claim is about (an entity key such as `inventory/sku-42`).
    pub object: String,
    /// The claim (or the episode's description).
    pub claim: String,
    /// Where it came from.
    pub source: Source,
    /// When it was observed.
    pub observed_at: Timestamp,
    /// When the claim holds.
    pub validity: Validity,
    /// Who may read it.
    pub access: AccessRule,
    /// How far it can be trusted.
    pub status: EvidenceStatus,
    /// For inferred records: the records this one was derived from. Empty for observations.
    #[serde(default)]
    pub derived_from: Vec<RecordId>,
}

impl ProvenanceRecord {
    /// `true` for records inferred from others (a model's stored answer, a summary).
    #[must_use]
    pub fn is_derived(&self) -> bool {
        !self.derived_from.is_empty()
    }

    /// `true` if the record may be counted as an independent source: an observation, not a
    /// derivation, and not superseded or expired.
    #[must_use]
    pub fn is_independent(&self) -> bool {
        !self.is_derived()
            && !matches!(
                self.status,
                EvidenceStatus::Superseded | EvidenceStatus::Expired
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_intervals() {
        let v = Validity {
            from: Some(Timestamp(10)),
            until: Some(Timestamp(20)),
        };
        assert!(v.contains(Timestamp(10)) && !v.contains(Timestamp(20)));
        let later = Validity {
            from: Some(Timestamp(20)),
            until: None,
        };
        assert!(!v.overlaps(&later) && !later.overlaps(&v));
        assert!(v.overlaps(&Validity::default()));
    }

    #[test]
    fn derived_records_are_not_independent() {
        let mut r = ProvenanceRecord {
            id: RecordId::from_u128(1),
            kind: MemoryKind::Semantic,
            object: "inventory/sku-42".into(),
            claim: "12 in stock".into(),
            source: Source {
                name: "warehouse-db".into(),
                version: "r7".into(),
            },
            observed_at: Timestamp(5),
            validity: Validity::default(),
            access: AccessRule::default(),
            status: EvidenceStatus::Verified,
            derived_from: vec![],
        };
        assert!(r.is_independent());
        r.derived_from.push(RecordId::from_u128(0));
        assert!(!r.is_independent());
    }
}
