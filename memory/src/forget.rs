//! Forgetting has four distinct meanings, each its own operation:
//!
//! | operation          | the record…                         | retrievable? | evidence? | reversible |
//! |--------------------|-------------------------------------|--------------|-----------|------------|
//! | [`evict_from_hot`] | leaves the hot context              | yes, budgeted| yes       | by a write |
//! | [`deprioritize`]   | scores lower in retrieval           | yes, lower   | yes       | no         |
//! | [`expire`]         | is marked expired; derived invalid  | no           | no        | no         |
//! | [`delete`]         | is removed with everything copying it| no          | no        | no         |
//!
//! `delete` removes the record, every record derived from it (transitively: summaries, a model's
//! answers), and every index entry and link that refers to any of them.

use std::collections::BTreeSet;

use quorate_protocols::{AccessRule, RecordId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::ForgetError;
use crate::record::{authorize, MemoryRecord, FULL_PRIORITY};
use crate::view::MemoryView;

/// One forgetting operation, for [`Memory::forget`](crate::Memory::forget).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Forget {
    /// [`evict_from_hot`].
    EvictFromHot(RecordId),
    /// [`deprioritize`] to this priority (percent).
    Deprioritize(RecordId, u8),
    /// [`expire`] at this time.
    Expire(RecordId, Timestamp),
    /// [`delete`].
    Delete(RecordId),
}

/// What a forgetting operation changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "the report says which records were invalidated or removed"]
pub struct ForgetReport {
    /// Records whose flags or status changed.
    pub changed: Vec<RecordId>,
    /// Derived records invalidated because an ancestor expired.
    pub invalidated: Vec<RecordId>,
    /// Records removed (the target and everything derived from it).
    pub deleted: Vec<RecordId>,
    /// Index entries removed with them.
    pub index_entries_removed: usize,
}

impl Forget {
    /// Applies the operation to a copy of `view`.
    pub fn apply(
        self,
        view: &MemoryView,
        authority: &AccessRule,
    ) -> Result<(MemoryView, ForgetReport), ForgetError> {
        match self {
            Forget::EvictFromHot(id) => evict_from_hot(view, authority, id),
            Forget::Deprioritize(id, to) => deprioritize(view, authority, id, to),
            Forget::Expire(id, at) => expire(view, authority, id, at),
            Forget::Delete(id) => delete(view, authority, id),
        }
    }
}

/// A copy of `view` to change record `id` in, if the record exists and `authority` covers it.
fn target(
    view: &MemoryView,
    authority: &AccessRule,
    id: RecordId,
) -> Result<MemoryView, ForgetError> {
    let r = view.get(id).ok_or(ForgetError::UnknownRecord { id })?;
    authorize(authority, &r.record().access)?;
    Ok(view.clone())
}

/// Applies `change` to record `id` in a copy of `view` ([`target`]); `change` returns whether it
/// changed the record, and the report lists the record as changed if it did.
fn change_record(
    view: &MemoryView,
    authority: &AccessRule,
    id: RecordId,
    change: impl FnOnce(&mut MemoryRecord) -> bool,
) -> Result<(MemoryView, ForgetReport), ForgetError> {
    let mut next = target(view, authority, id)?;
    let mut report = ForgetReport::default();
    if next.record_mut(id).is_some_and(change) {
        report.changed.push(id);
    }
    Ok((next, report))
}

/// The record leaves the hot context: it is still retrievable, but only when it earns its place
/// in the budget.
pub fn evict_from_hot(
    view: &MemoryView,
    authority: &AccessRule,
    id: RecordId,
) -> Result<(MemoryView, ForgetReport), ForgetError> {
    change_record(view, authority, id, |r| {
        std::mem::replace(&mut r.hot, false)
    })
}

/// Lowers the record's retrieval priority to `priority` percent (never raises it): its relevance
/// is scaled by `priority / 100`.
pub fn deprioritize(
    view: &MemoryView,
    authority: &AccessRule,
    id: RecordId,
    priority: u8,
) -> Result<(MemoryView, ForgetReport), ForgetError> {
    if priority > FULL_PRIORITY {
        return Err(ForgetError::InvalidPriority { priority });
    }
    change_record(view, authority, id, |r| {
        let lower = priority < r.priority;
        if lower {
            r.priority = priority;
        }
        lower
    })
}

/// Marks the record expired (its validity ended at `at`): it is kept as history but no longer
/// retrieved or counted, and everything derived from it is invalidated.
pub fn expire(
    view: &MemoryView,
    authority: &AccessRule,
    id: RecordId,
    at: Timestamp,
) -> Result<(MemoryView, ForgetReport), ForgetError> {
    let (mut next, mut report) = change_record(view, authority, id, |r| r.expire(at))?;
    report.invalidated = next.invalidate_derived(id);
    Ok((next, report))
}

/// Expires every active record whose validity interval ended at or before `now`. A system
/// operation driven by the clock: it needs no authority and changes only what already ended.
/// It is housekeeping: retrieval already leaves out what is not valid at the query's time (with
/// what was derived from it), so a query at `now` gets the same answer before and after it; it
/// records the expiry for history queries and frees the hot context.
pub fn expire_due(view: &MemoryView, now: Timestamp) -> (MemoryView, ForgetReport) {
    let due: Vec<RecordId> = view
        .records()
        .filter(|r| r.is_active() && r.record().validity.until.is_some_and(|u| u <= now))
        .map(|r| r.id())
        .collect();
    let mut next = view.clone();
    let mut report = ForgetReport::default();
    for id in due {
        // Active, so not expired yet: `expire` changes it (its validity already ended by `now`).
        if next.record_mut(id).is_some_and(|r| r.expire(now)) {
            report.changed.push(id);
        }
        report.invalidated.extend(next.invalidate_derived(id));
    }
    (next, report)
}

/// Removes the record, every record derived from it (transitively), and every index entry, link
/// and verification-need membership that refers to any of them.
pub fn delete(
    view: &MemoryView,
    authority: &AccessRule,
    id: RecordId,
) -> Result<(MemoryView, ForgetReport), ForgetError> {
    let mut next = target(view, authority, id)?;
    let mut gone: BTreeSet<RecordId> = next.descendants(&[id]);
    gone.insert(id);
    let index_entries_removed = next.remove_all(&gone);
    Ok((
        next,
        ForgetReport {
            changed: Vec::new(),
            invalidated: Vec::new(),
            deleted: gone.into_iter().collect(),
            index_entries_removed,
        },
    ))
}

#[cfg(test)]
mod tests {
    use quorate_protocols::{EvidenceStatus, MemoryKind, Source, TaskId, Validity};

    use super::*;
    use crate::observation::{ClaimSpec, MemoryObservation};
    use crate::write::write;

    fn scope() -> AccessRule {
        AccessRule {
            tenant: "acme".into(),
            principal: Some("ann".into()),
            task: Some(TaskId::from_u128(1)),
        }
    }

    fn id(n: u128) -> RecordId {
        RecordId::from_u128(n)
    }

    fn obs(n: u128, claim: &str, derived: Vec<RecordId>, until: Option<u64>) -> MemoryObservation {
        MemoryObservation {
            event: id(n * 100),
            episode: "noted".into(),
            source: Source {
                name: format!("s{n}"),
                version: "1".into(),
            },
            observed_at: Timestamp(1),
            access: scope(),
            status: EvidenceStatus::Unverified,
            derived_from: derived,
            claims: vec![ClaimSpec::new(
                id(n),
                MemoryKind::Working,
                format!("note-{n}"),
                claim,
                Validity {
                    from: None,
                    until: until.map(Timestamp),
                },
            )],
        }
    }

    fn setup() -> MemoryView {
        let mut v = MemoryView::new();
        for o in [
            obs(1, "door code 1234", vec![], Some(50)),
            obs(2, "summary of the door code", vec![id(1)], None),
            obs(3, "summary of the summary", vec![id(2)], None),
            obs(4, "unrelated", vec![], None),
        ] {
            v = write(&v, &scope(), &o).unwrap().0;
        }
        v
    }

    #[test]
    fn four_meanings() {
        let v = setup();
        let (v1, r) = evict_from_hot(&v, &scope(), id(1)).unwrap();
        assert_eq!(r.changed, vec![id(1)]);
        assert!(!v1.get(id(1)).unwrap().is_hot() && v1.get(id(1)).unwrap().is_active());

        let (v2, _) = deprioritize(&v, &scope(), id(1), 30).unwrap();
        let (v2, r) = deprioritize(&v2, &scope(), id(1), 80).unwrap();
        assert_eq!(
            (v2.get(id(1)).unwrap().priority(), r.changed.len()),
            (30, 0)
        );

        let (v3, r) = expire(&v, &scope(), id(1), Timestamp(10)).unwrap();
        assert_eq!(
            v3.get(id(1)).unwrap().record().status,
            EvidenceStatus::Expired
        );
        assert_eq!(
            v3.get(id(1)).unwrap().record().validity.until,
            Some(Timestamp(10))
        );
        assert!(r.invalidated.contains(&id(2)) && r.invalidated.contains(&id(3)));

        let (v4, r) = delete(&v, &scope(), id(1)).unwrap();
        assert!(r.deleted.contains(&id(1)) && r.deleted.contains(&id(2)));
        assert!(r.deleted.contains(&id(3)) && r.deleted.contains(&id(200)));
        assert!(r.index_entries_removed > 3);
        assert!(v4.get(id(4)).is_some() && v4.get(id(100)).is_some());
        assert_eq!(v4.with_term("1234").count(), 0);
        assert!(v4.indexes_consistent());
    }

    /// An expired record is history: it leaves the hot context, whether it was expired by hand
    /// or by the clock, and the records that were not touched stay hot.
    #[test]
    fn expiring_takes_the_record_out_of_the_hot_context() {
        let v = setup();
        assert!(v.get(id(1)).unwrap().is_hot(), "a working note starts hot");

        let (by_hand, r) = expire(&v, &scope(), id(1), Timestamp(10)).unwrap();
        assert_eq!(r.changed, vec![id(1)]);
        assert!(!by_hand.get(id(1)).unwrap().is_hot());

        let (by_clock, r) = expire_due(&v, Timestamp(60));
        assert_eq!(r.changed, vec![id(1)]);
        assert!(!by_clock.get(id(1)).unwrap().is_hot());
        assert!(by_clock.get(id(4)).unwrap().is_hot());
    }

    #[test]
    fn expire_due_uses_validity_and_refusals_name_the_record() {
        let (v, r) = expire_due(&setup(), Timestamp(60));
        assert_eq!(r.changed, vec![id(1)]);
        assert_eq!(
            v.get(id(1)).unwrap().record().status,
            EvidenceStatus::Expired
        );
        let other = AccessRule {
            task: Some(TaskId::from_u128(2)),
            ..scope()
        };
        assert!(matches!(
            delete(&v, &other, id(4)),
            Err(ForgetError::ScopeViolation { .. })
        ));
        assert_eq!(
            delete(&v, &scope(), id(99)).unwrap_err(),
            ForgetError::UnknownRecord { id: id(99) }
        );
        assert!(matches!(
            deprioritize(&v, &scope(), id(4), 101),
            Err(ForgetError::InvalidPriority { priority: 101 })
        ));
    }
}
