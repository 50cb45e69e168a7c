//! The write path, as pure steps over explicit inputs:
//!
//! 1. [`split`] a [`MemoryObservation`] into its event record and claim candidates, binding the
//!    source and its version to each and marking a model's inferences as derived;
//! 2. [`check`] the writer's scope, the ids, and that derived records point at active sources
//!    without widening their access;
//! 3. for each claim, find the [`related`](crate::related) records (same object, kind and access
//!    rule, overlapping validity) and classify the claim against each
//!    ([`relations`](crate::relations): a claim never supersedes a record it derives from);
//! 4. apply: supersede where the revision is clear (invalidating what was derived from the
//!    replaced record), keep both sides and open a verification need where it is not.
//!
//! [`write`] runs all four on a copy of the view and returns the new view with a
//! [`WriteReport`]. [`Memory::write`](crate::Memory::write) commits it with one CAS on the
//! memory's version and, on a conflict, runs [`write`] again against the view it lost to.

use std::collections::BTreeSet;

use quorate_protocols::{AccessRule, EvidenceStatus, RecordId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::classify::{relations, Relation};
use crate::error::WriteError;
use crate::observation::{split, Candidates, MemoryObservation};
use crate::record::{access_within, authorize};
use crate::view::{MemoryView, NeedId, VerificationNeed};

/// What happened to one claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimOutcome {
    /// Stored with this status (and these relations to existing records).
    Stored {
        /// The claim's record.
        id: RecordId,
        /// Its status in the view the write produced
        /// ([`MemoryRecord::effective_status`](crate::MemoryRecord::effective_status)).
        status: EvidenceStatus,
        /// How it relates to the records that were there.
        relations: Vec<Relation>,
    },
    /// Not stored: `of` already holds the same claim from the same source and version.
    Duplicate {
        /// The claim's (unused) id.
        id: RecordId,
        /// The record holding it.
        of: RecordId,
    },
}

/// What a write changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "the report says which records were superseded, invalidated or put in conflict"]
pub struct WriteReport {
    /// The event record.
    pub event: RecordId,
    /// One outcome per claim, in order.
    pub claims: Vec<ClaimOutcome>,
    /// Records that the new claims superseded.
    pub superseded: Vec<RecordId>,
    /// Derived records invalidated because an ancestor was superseded.
    pub invalidated: Vec<RecordId>,
    /// Verification needs opened or joined.
    pub needs: Vec<NeedId>,
}

/// Step 2: the writer's `authority` covers the records' access; ids are fresh; every record a
/// derived observation points at exists, is active, and is at least as wide as the new records.
pub fn check(
    view: &MemoryView,
    authority: &AccessRule,
    candidates: &Candidates,
) -> Result<(), WriteError> {
    let event = &candidates.event.record;
    authorize(authority, &event.access)?;
    let mut ids = BTreeSet::new();
    for r in std::iter::once(&candidates.event).chain(&candidates.claims) {
        if view.contains(r.id()) || !ids.insert(r.id()) {
            return Err(WriteError::IdInUse { id: r.id() });
        }
    }
    for source in &event.derived_from {
        let Some(s) = view.get(*source) else {
            return Err(WriteError::UnknownSource {
                id: event.id,
                missing: *source,
            });
        };
        if !s.is_active() {
            return Err(WriteError::StaleSource {
                id: event.id,
                parent: *source,
                status: s.record.status,
            });
        }
        if !access_within(&event.access, &s.record.access) {
            return Err(WriteError::WidensAccess {
                id: event.id,
                parent: *source,
                parent_access: Box::new(s.record.access.clone()),
                record_access: Box::new(event.access.clone()),
            });
        }
    }
    Ok(())
}

/// Marks `claim` and (if `both`) `other` conflicting and puts them in a verification need: the
/// open one either is already in, else a new one named after `claim`.
fn open_conflict(
    view: &mut MemoryView,
    claim: RecordId,
    other: RecordId,
    both: bool,
    at: Timestamp,
    needs: &mut Vec<NeedId>,
) {
    let mut ids = view.open_needs_of(other);
    for n in view.open_needs_of(claim) {
        if !ids.contains(&n) {
            ids.push(n);
        }
    }
    if ids.is_empty() {
        let object = view
            .get(claim)
            .map(|r| r.record.object.clone())
            .unwrap_or_default();
        let id = NeedId(claim);
        view.open_need(VerificationNeed {
            id,
            object,
            records: [claim, other].into_iter().collect(),
            opened_at: at,
            resolution: None,
        });
        ids.push(id);
    }
    for id in &ids {
        if let Some(need) = view.need_mut(*id) {
            need.records.insert(claim);
            need.records.insert(other);
        }
        if !needs.contains(id) {
            needs.push(*id);
        }
    }
    let mut mark = |id: RecordId| {
        if let Some(r) = view.record_mut(id) {
            r.record.status = EvidenceStatus::Conflicting;
        }
    };
    mark(claim);
    if both {
        mark(other);
    }
}

/// Runs the whole write path on a copy of `view`. Pure: the same inputs give the same output.
///
/// Errors leave nothing written. See the module docs for the steps.
pub fn write(
    view: &MemoryView,
    authority: &AccessRule,
    obs: &MemoryObservation,
) -> Result<(MemoryView, WriteReport), WriteError> {
    let candidates = split(obs)?;
    check(view, authority, &candidates)?;
    let mut next = view.clone();
    let mut report = WriteReport {
        event: candidates.event.id(),
        claims: Vec::new(),
        superseded: Vec::new(),
        invalidated: Vec::new(),
        needs: Vec::new(),
    };
    next.insert(candidates.event);
    for claim in candidates.claims {
        let id = claim.id();
        let relations = relations(&next, &claim.record);
        if let Some(of) = relations.iter().find_map(|r| match r {
            Relation::Duplicate { of } => Some(*of),
            _ => None,
        }) {
            report.claims.push(ClaimOutcome::Duplicate { id, of });
            continue;
        }
        if let Some(newer) = relations.iter().find_map(|r| match r {
            Relation::SupersededBy { newer } => Some(*newer),
            _ => None,
        }) {
            // A late, older reading: kept as history, changes nothing else.
            next.insert(claim);
            next.mark_superseded(id, newer);
            report.claims.push(ClaimOutcome::Stored {
                id,
                status: EvidenceStatus::Superseded,
                relations: vec![Relation::SupersededBy { newer }],
            });
            continue;
        }
        next.insert(claim);
        for relation in &relations {
            match *relation {
                Relation::Supersedes { old } => {
                    report.invalidated.extend(next.supersede(old, id));
                    report.superseded.push(old);
                }
                Relation::Conflicts { with } | Relation::Disputes { with } => {
                    // A conflict marks both sides conflicting; a dispute only the new claim.
                    let both = matches!(relation, Relation::Conflicts { .. });
                    open_conflict(
                        &mut next,
                        id,
                        with,
                        both,
                        obs.observed_at,
                        &mut report.needs,
                    );
                }
                Relation::Corroborates { of } => {
                    // Agreeing with one side of an open disagreement puts the claim in it too.
                    if !next.open_needs_of(of).is_empty() {
                        open_conflict(&mut next, id, of, false, obs.observed_at, &mut report.needs);
                    }
                }
                Relation::Duplicate { .. } | Relation::SupersededBy { .. } => {}
            }
        }
        report.claims.push(ClaimOutcome::Stored {
            id,
            status: obs.status,
            relations,
        });
    }
    // The statuses the write leaves, read back once every claim is applied (a later claim of the
    // same observation may put an earlier one in conflict): the report never contradicts the
    // view.
    for outcome in &mut report.claims {
        if let ClaimOutcome::Stored { id, status, .. } = outcome {
            if let Some(r) = next.get(*id) {
                *status = r.effective_status();
            }
        }
    }
    Ok((next, report))
}

#[cfg(test)]
mod tests {
    use quorate_protocols::MemoryKind;

    use super::*;
    use crate::fixtures::{observation, tenant};

    /// One semantic claim about `sku-42`, read from `source` at version `r<at>`.
    fn obs(n: u128, source: &str, at: u64, claim: &str) -> MemoryObservation {
        observation(n, source, &format!("r{at}"), at, "sku-42", claim)
    }

    fn status(view: &MemoryView, id: u128) -> EvidenceStatus {
        view.get(RecordId::from_u128(id))
            .map(|r| r.record.status)
            .unwrap()
    }

    #[test]
    fn conflict_opens_a_need_and_keeps_both() {
        let (v, _) = write(&MemoryView::new(), &tenant(), &obs(1, "db", 1, "12")).unwrap();
        let (v, report) = write(&v, &tenant(), &obs(2, "scanner", 2, "9")).unwrap();
        assert_eq!(report.needs, vec![NeedId(RecordId::from_u128(2))]);
        assert_eq!(status(&v, 1), EvidenceStatus::Conflicting);
        assert_eq!(status(&v, 2), EvidenceStatus::Conflicting);
        // A third source agreeing with one side joins the same need.
        let (v, report) = write(&v, &tenant(), &obs(3, "audit", 3, "9")).unwrap();
        assert_eq!(report.needs, vec![NeedId(RecordId::from_u128(2))]);
        assert_eq!(v.open_needs().count(), 1);
        assert_eq!(v.open_needs().next().map(|n| n.records.len()), Some(3));
        assert!(v.indexes_consistent());
    }

    /// A dispute changes only the new claim: the record it disputes keeps its status (a model's
    /// inference never demotes an observation), though both sides go into the verification need.
    /// A reading in another scope is not related at all: it changes nothing it cannot show.
    #[test]
    fn a_dispute_marks_only_the_new_claim_conflicting() {
        let mut db = obs(1, "db", 1, "12");
        db.status = EvidenceStatus::Verified;
        let (v, _) = write(&MemoryView::new(), &tenant(), &db).unwrap();
        let log = observation(5, "shipping-log", "r2", 2, "order-7", "9 shipped");
        let (v, _) = write(&v, &tenant(), &log).unwrap();

        // A model's inference against an observation.
        let mut inference = obs(2, "model", 3, "3");
        inference.derived_from = vec![RecordId::from_u128(5)];
        let (after, report) = write(&v, &tenant(), &inference).unwrap();
        assert_eq!(
            report.claims,
            vec![ClaimOutcome::Stored {
                id: RecordId::from_u128(2),
                status: EvidenceStatus::Conflicting,
                relations: vec![Relation::Disputes {
                    with: RecordId::from_u128(1),
                }],
            }]
        );
        assert_eq!(status(&after, 1), EvidenceStatus::Verified);
        assert_eq!(report.needs, vec![NeedId(RecordId::from_u128(2))]);
        let need = after.open_needs().next().unwrap();
        assert!(need.records.contains(&RecordId::from_u128(1)));
        assert!(need.records.contains(&RecordId::from_u128(2)));

        // A private reading disagreeing with a tenant-wide record: unrelated, nothing opened.
        let mut private = obs(3, "scanner", 3, "7");
        private.access.principal = Some("alice".into());
        let (after, report) = write(&v, &tenant(), &private).unwrap();
        assert_eq!(
            report.claims,
            vec![ClaimOutcome::Stored {
                id: RecordId::from_u128(3),
                status: EvidenceStatus::Unverified,
                relations: vec![],
            }]
        );
        assert_eq!(status(&after, 1), EvidenceStatus::Verified);
        assert_eq!(after.open_needs().count(), 0);
        assert!(after.indexes_consistent());
    }

    /// Two claims of one observation that disagree put each other in conflict; the report gives
    /// the statuses the write left, the first claim's included.
    #[test]
    fn the_report_gives_the_statuses_the_write_left() {
        let mut both = obs(1, "scanner", 1, "12");
        let mut second = both.claims[0].clone();
        second.id = RecordId::from_u128(2);
        second.claim = "9".into();
        both.claims.push(second);
        let (v, report) = write(&MemoryView::new(), &tenant(), &both).unwrap();
        for outcome in &report.claims {
            let ClaimOutcome::Stored { id, status, .. } = outcome else {
                panic!("not stored: {outcome:?}");
            };
            assert_eq!(*status, v.get(*id).unwrap().effective_status());
            assert_eq!(*status, EvidenceStatus::Conflicting);
        }
    }

    #[test]
    fn newer_reading_supersedes_and_invalidates_derived() {
        let (v, _) = write(&MemoryView::new(), &tenant(), &obs(1, "db", 1, "12")).unwrap();
        let mut inference = obs(2, "model", 2, "order 7 can ship");
        inference.derived_from = vec![RecordId::from_u128(1)];
        inference.claims[0].object = "order-7".into();
        let (v, _) = write(&v, &tenant(), &inference).unwrap();
        let (v, report) = write(&v, &tenant(), &obs(3, "db", 3, "3")).unwrap();
        assert_eq!(report.superseded, vec![RecordId::from_u128(1)]);
        // The inference's event record and its claim were both derived from record 1.
        assert_eq!(
            report.invalidated,
            vec![RecordId::from_u128(2), RecordId::from_u128(200)]
        );
        assert_eq!(status(&v, 1), EvidenceStatus::Superseded);
        assert_eq!(
            v.get(RecordId::from_u128(1)).unwrap().superseded_by(),
            Some(RecordId::from_u128(3))
        );
        assert!(!v.get(RecordId::from_u128(2)).unwrap().is_active());
        // Deriving from the superseded record is now refused.
        let mut stale = obs(4, "model", 4, "order 7 can ship");
        stale.derived_from = vec![RecordId::from_u128(1)];
        assert!(matches!(
            write(&v, &tenant(), &stale),
            Err(WriteError::StaleSource { .. })
        ));
    }

    #[test]
    fn late_reading_is_history_and_replays_are_duplicates() {
        let (v, _) = write(&MemoryView::new(), &tenant(), &obs(1, "db", 5, "12")).unwrap();
        let (v, report) = write(&v, &tenant(), &obs(2, "db", 1, "20")).unwrap();
        assert!(matches!(
            report.claims[0],
            ClaimOutcome::Stored {
                status: EvidenceStatus::Superseded,
                ..
            }
        ));
        assert_eq!(status(&v, 1), EvidenceStatus::Unverified);
        let mut replay = obs(3, "db", 5, "12");
        replay.source.version = "r5".into();
        let (_, report) = write(&v, &tenant(), &replay).unwrap();
        assert_eq!(
            report.claims,
            vec![ClaimOutcome::Duplicate {
                id: RecordId::from_u128(3),
                of: RecordId::from_u128(1)
            }]
        );
    }

    #[test]
    fn refusals_name_the_input() {
        let v = MemoryView::new();
        let mut o = obs(1, "db", 1, "12");
        o.access.tenant = "other".into();
        assert!(matches!(
            write(&v, &tenant(), &o),
            Err(WriteError::ScopeViolation { .. })
        ));
        let mut o = obs(1, "db", 1, "12");
        o.derived_from = vec![RecordId::from_u128(9)];
        o.status = EvidenceStatus::Verified;
        assert_eq!(
            write(&v, &tenant(), &o).unwrap_err(),
            WriteError::DerivedCannotBeVerified {
                id: RecordId::from_u128(100)
            }
        );
        o.status = EvidenceStatus::Unverified;
        assert!(matches!(
            write(&v, &tenant(), &o),
            Err(WriteError::UnknownSource { .. })
        ));
        let mut o = obs(1, "db", 1, "12");
        o.claims[0].kind = MemoryKind::Working;
        assert!(matches!(
            write(&v, &tenant(), &o),
            Err(WriteError::WorkingNeedsTask { .. })
        ));
        let mut o = obs(1, "db", 1, "12");
        o.status = EvidenceStatus::Superseded;
        assert!(matches!(
            write(&v, &tenant(), &o),
            Err(WriteError::StatusNotWritable { .. })
        ));
        let (v, _) = write(&v, &tenant(), &obs(1, "db", 1, "12")).unwrap();
        assert!(matches!(
            write(&v, &tenant(), &obs(1, "db", 2, "12")),
            Err(WriteError::IdInUse { .. })
        ));
        // A narrower summary of a tenant-wide record is fine; a wider one of a private one is not.
        let mut private = obs(2, "hr", 2, "salary 10");
        private.access.principal = Some("alice".into());
        private.claims[0].object = "alice".into();
        let (v, _) = write(&v, &tenant(), &private).unwrap();
        let mut leak = obs(3, "model", 3, "alice earns 10");
        leak.derived_from = vec![RecordId::from_u128(2)];
        assert!(matches!(
            write(&v, &tenant(), &leak),
            Err(WriteError::WidensAccess { .. })
        ));
        leak.access.principal = Some("alice".into());
        assert!(write(&v, &tenant(), &leak).is_ok());
    }
}
