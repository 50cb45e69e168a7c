//! How a new claim relates to a record already in memory: the pure core of the write path.
//!
//! Two claims are *related* when they are about the same object, are of the same kind, their
//! validity intervals overlap, and they have the same access rule. Records of different scopes
//! are never related: a relation changes a stored status (conflicting, superseded) that every
//! reader of a record sees, so a relation formed with a record some of those readers cannot see
//! would show them something about it (a record only one principal may read would put a
//! shared record in conflict, or supersede it, for everyone). Judgements made at read time,
//! with the reader known (staleness, support), are instead made over what that reader may see.
//!
//! A related pair is classified as:
//!
//! | situation                                                    | relation          |
//! |--------------------------------------------------------------|-------------------|
//! | same claim, same source and source version                   | `Duplicate`       |
//! | derived from the record (transitively), same claim           | `Corroborates`    |
//! | derived from the record (transitively), different claim      | `Disputes`        |
//! | model inference vs observation, same claim                   | `Corroborates`    |
//! | model inference vs observation, different claim              | `Disputes`        |
//! | observation vs model inference, different claim              | `Supersedes`      |
//! | same source name, newer observation                          | `Supersedes`      |
//! | same source name, older observation (arrived late)           | `SupersededBy`    |
//! | different sources (or same source, same time), same claim    | `Corroborates`    |
//! | different sources (or same source, same time), other claim   | `Conflicts`       |
//!
//! The first matching row applies; the two "derived from the record" rows need the view and are
//! applied by [`relations`] (a plain [`classify`] sees only the pair).
//!
//! "The revision is clear" therefore means: the same source said something newer, or an
//! observation contradicts a model's inference. Everything else that disagrees is kept on both
//! sides with a verification need. A model's inference never supersedes or demotes an
//! observation, and derived content never supersedes, demotes or outdates a record it was
//! derived from: superseding an ancestor would invalidate the new record itself, so a write
//! would erase both its record and its source.

use quorate_protocols::{ProvenanceRecord, RecordId};
use serde::{Deserialize, Serialize};

use crate::record::{normalized_claim, MemoryRecord};
use crate::view::MemoryView;

/// How a new claim relates to one existing record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Relation {
    /// Same claim from the same source at the same version: nothing new is stored.
    Duplicate {
        /// The record already holding it.
        of: RecordId,
    },
    /// Same claim from another source (or a derived record agreeing): both are kept.
    Corroborates {
        /// The record it agrees with.
        of: RecordId,
    },
    /// The new claim replaces `old` (newer from the same source, or an observation replacing a
    /// model's inference). `old` becomes superseded and what was derived from it is invalidated.
    Supersedes {
        /// The replaced record.
        old: RecordId,
    },
    /// The new claim is an older reading of the same source than `newer`: stored as history,
    /// already superseded.
    SupersededBy {
        /// The newer record.
        newer: RecordId,
    },
    /// Disagreement without a clear revision: both become conflicting and a verification need
    /// is opened (or joined).
    Conflicts {
        /// The other side.
        with: RecordId,
    },
    /// Disagreement where only the new claim may change (it is a model's inference against an
    /// observation, or against a record it was derived from): the new claim becomes conflicting,
    /// `with` keeps its status, a verification need is opened.
    Disputes {
        /// The record disputed.
        with: RecordId,
    },
}

/// Existing claims related to `candidate`: same object and kind, overlapping validity, and the
/// same access rule. Event records are never related.
#[must_use]
pub fn related<'a>(view: &'a MemoryView, candidate: &ProvenanceRecord) -> Vec<&'a MemoryRecord> {
    view.about(&candidate.object)
        .filter(|e| {
            let r = &e.record;
            !e.is_event
                && r.id != candidate.id
                && r.kind == candidate.kind
                && r.validity.overlaps(&candidate.validity)
                && r.access == candidate.access
        })
        .collect()
}

/// Classifies `candidate` against one existing record (see the module table; the rows about
/// records the candidate is derived from are applied by [`relations`]). `None`: the two are of
/// different scopes, or the record is inactive and not a duplicate, so it does not bear on the
/// candidate.
#[must_use]
pub fn classify(candidate: &ProvenanceRecord, existing: &MemoryRecord) -> Option<Relation> {
    let e = &existing.record;
    if candidate.access != e.access {
        return None;
    }
    let same_claim = normalized_claim(&candidate.claim) == normalized_claim(&e.claim);
    if same_claim && candidate.source == e.source {
        return Some(Relation::Duplicate { of: e.id });
    }
    if !existing.is_active() {
        return None;
    }
    Some(match (candidate.is_derived(), e.is_derived()) {
        (true, false) if same_claim => Relation::Corroborates { of: e.id },
        (true, false) => Relation::Disputes { with: e.id },
        (false, true) if !same_claim => Relation::Supersedes { old: e.id },
        _ if candidate.source.name == e.source.name && candidate.observed_at > e.observed_at => {
            Relation::Supersedes { old: e.id }
        }
        _ if candidate.source.name == e.source.name && candidate.observed_at < e.observed_at => {
            Relation::SupersededBy { newer: e.id }
        }
        _ if same_claim => Relation::Corroborates { of: e.id },
        _ => Relation::Conflicts { with: e.id },
    })
}

/// How `candidate` relates to each record of `view` it is [`related`] to: [`classify`], except
/// that against a record the candidate is derived from (directly or through other derived
/// records) it only corroborates (same claim) or disputes (other claim). Derived content never
/// supersedes, outdates or demotes its own sources.
#[must_use]
pub fn relations(view: &MemoryView, candidate: &ProvenanceRecord) -> Vec<Relation> {
    let lineage = view.ancestors(&candidate.derived_from);
    related(view, candidate)
        .into_iter()
        .filter_map(|e| {
            let relation = classify(candidate, e)?;
            if !lineage.contains(&e.id()) {
                return Some(relation);
            }
            Some(match relation {
                Relation::Duplicate { .. } | Relation::Corroborates { .. } => relation,
                _ if normalized_claim(&candidate.claim) == normalized_claim(&e.record.claim) => {
                    Relation::Corroborates { of: e.id() }
                }
                _ => Relation::Disputes { with: e.id() },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use quorate_protocols::{
        AccessRule, EvidenceStatus, MemoryKind, Source, TaskId, Timestamp, Validity,
    };

    use super::*;

    fn claim(id: u128, source: &str, version: &str, at: u64, text: &str) -> ProvenanceRecord {
        ProvenanceRecord {
            id: RecordId::from_u128(id),
            kind: MemoryKind::Semantic,
            object: "sku-42".into(),
            claim: text.into(),
            source: Source {
                name: source.into(),
                version: version.into(),
            },
            observed_at: Timestamp(at),
            validity: Validity::default(),
            access: AccessRule {
                tenant: "t".into(),
                principal: None,
                task: None,
            },
            status: EvidenceStatus::Unverified,
            derived_from: vec![],
        }
    }

    fn stored(record: ProvenanceRecord) -> MemoryRecord {
        MemoryRecord {
            record,
            is_event: false,
            event: None,
            terms: Default::default(),
            tokens: 1,
            priority: 100,
            hot: false,
            supersedes: vec![],
            superseded_by: None,
            invalidated_by: None,
        }
    }

    #[test]
    fn the_table() {
        let old = stored(claim(1, "db", "r1", 10, "12 in stock"));
        let rel = |c: &ProvenanceRecord| classify(c, &old);
        let e = RecordId::from_u128(1);
        assert_eq!(
            rel(&claim(2, "db", "r1", 10, "12  IN stock")),
            Some(Relation::Duplicate { of: e })
        );
        assert_eq!(
            rel(&claim(2, "db", "r2", 20, "3 in stock")),
            Some(Relation::Supersedes { old: e })
        );
        assert_eq!(
            rel(&claim(2, "db", "r0", 5, "3 in stock")),
            Some(Relation::SupersededBy { newer: e })
        );
        assert_eq!(
            rel(&claim(2, "scanner", "s1", 20, "12 in stock")),
            Some(Relation::Corroborates { of: e })
        );
        assert_eq!(
            rel(&claim(2, "scanner", "s1", 20, "9 in stock")),
            Some(Relation::Conflicts { with: e })
        );
        let mut inferred = claim(2, "db", "r9", 99, "0 in stock");
        inferred.derived_from.push(e);
        assert_eq!(rel(&inferred), Some(Relation::Disputes { with: e }));
    }

    #[test]
    fn observations_replace_inferences_and_other_scopes_are_unrelated() {
        let mut inference = claim(1, "model", "m1", 10, "ships today");
        inference.derived_from.push(RecordId::from_u128(0));
        let inference = stored(inference);
        let obs = claim(2, "carrier", "c1", 5, "ships tomorrow");
        assert_eq!(
            classify(&obs, &inference),
            Some(Relation::Supersedes {
                old: RecordId::from_u128(1)
            })
        );

        let wide = stored(claim(3, "db", "r1", 10, "12 in stock"));
        let mut narrow = claim(4, "db", "r2", 20, "3 in stock");
        narrow.access.task = Some(TaskId::from_u128(7));
        assert_eq!(classify(&narrow, &wide), None, "another scope: unrelated");
    }

    #[test]
    fn inactive_records_only_count_as_duplicates() {
        let mut old = stored(claim(1, "db", "r1", 10, "12 in stock"));
        old.record.status = EvidenceStatus::Superseded;
        assert_eq!(
            classify(&claim(2, "db", "r1", 10, "12 in stock"), &old),
            Some(Relation::Duplicate {
                of: RecordId::from_u128(1)
            })
        );
        assert_eq!(classify(&claim(2, "x", "1", 10, "other"), &old), None);
    }
}
