//! Closing a verification need once someone checked: the checked record becomes verified, the
//! records that disagreed with it are superseded by it (and what was derived from them is
//! invalidated), the records that agreed with it go back to unverified.

use quorate_protocols::{AccessRule, EvidenceStatus, RecordId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::ResolveError;
use crate::record::{authorize, normalized_claim};
use crate::view::{MemoryView, NeedId, Resolution};

/// What a resolution changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "the report says which records were superseded and invalidated"]
pub struct ResolveReport {
    /// The need that was closed.
    pub need: NeedId,
    /// The record kept, now verified.
    pub winner: RecordId,
    /// Records that disagreed and are now superseded by the winner.
    pub superseded: Vec<RecordId>,
    /// Records that agreed with the winner and are unverified again.
    pub agreeing: Vec<RecordId>,
    /// Derived records invalidated because an ancestor was superseded.
    pub invalidated: Vec<RecordId>,
}

/// Resolves `need` in favour of `winner`, which the caller checked against its source (for
/// example with a tool call whose receipt confirmed it). Pure: returns the new view.
///
/// Refused if the winner is not an active, independent record of the need, or if `authority`
/// does not cover every record of the need.
pub fn resolve(
    view: &MemoryView,
    authority: &AccessRule,
    need: NeedId,
    winner: RecordId,
    at: Timestamp,
) -> Result<(MemoryView, ResolveReport), ResolveError> {
    let n = view.need(need).ok_or(ResolveError::UnknownNeed { need })?;
    if !n.is_open() {
        return Err(ResolveError::AlreadyResolved { need });
    }
    if !n.records.contains(&winner) {
        return Err(ResolveError::NotInNeed { need, id: winner });
    }
    let w = view
        .get(winner)
        .ok_or(ResolveError::NotInNeed { need, id: winner })?;
    if !w.is_active() {
        return Err(ResolveError::NotActive {
            id: winner,
            status: w.record.status,
        });
    }
    if w.record.is_derived() {
        return Err(ResolveError::DerivedCannotBeVerified { id: winner });
    }
    for r in n.records.iter().filter_map(|id| view.get(*id)) {
        authorize(authority, &r.record.access)?;
    }
    let winning_claim = normalized_claim(&w.record.claim);
    let members: Vec<RecordId> = n
        .records
        .iter()
        .copied()
        .filter(|id| *id != winner)
        .collect();

    let mut next = view.clone();
    if let Some(nm) = next.need_mut(need) {
        nm.resolution = Some(Resolution { winner, at });
    }
    if let Some(w) = next.record_mut(winner) {
        w.record.status = EvidenceStatus::Verified;
    }
    let mut report = ResolveReport {
        need,
        winner,
        superseded: Vec::new(),
        agreeing: Vec::new(),
        invalidated: Vec::new(),
    };
    for id in members {
        let Some(r) = next.get(id) else { continue };
        if !r.is_active() {
            continue;
        }
        if normalized_claim(&r.record.claim) == winning_claim {
            let still_disputed = !next.open_needs_of(id).is_empty();
            if let Some(r) = next.record_mut(id) {
                if !still_disputed && r.record.status == EvidenceStatus::Conflicting {
                    r.record.status = EvidenceStatus::Unverified;
                }
            }
            report.agreeing.push(id);
        } else {
            report.invalidated.extend(next.supersede(id, winner));
            report.superseded.push(id);
        }
    }
    Ok((next, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{observation, tenant};
    use crate::observation::MemoryObservation;
    use crate::write::write;

    /// One semantic claim about `price/sku-42`, read from `source` at version 1 at time `n`.
    fn obs(n: u128, source: &str, claim: &str, derived: Vec<RecordId>) -> MemoryObservation {
        MemoryObservation {
            derived_from: derived,
            ..observation(n, source, "1", n as u64, "price/sku-42", claim)
        }
    }

    fn id(n: u128) -> RecordId {
        RecordId::from_u128(n)
    }

    fn setup() -> MemoryView {
        let mut v = MemoryView::new();
        for o in [
            obs(1, "catalog", "10 EUR", vec![]),
            obs(2, "erp", "12 EUR", vec![]),
            obs(3, "supplier", "12 EUR", vec![]),
            obs(4, "model", "12 EUR", vec![id(2)]),
        ] {
            v = write(&v, &tenant(), &o).unwrap().0;
        }
        v
    }

    #[test]
    fn winner_verified_losers_superseded_agreeing_unverified() {
        let v = setup();
        let need = NeedId(id(2));
        assert_eq!(v.need(need).map(|n| n.records.len()), Some(4));
        let (v, report) = resolve(&v, &tenant(), need, id(2), Timestamp(9)).unwrap();
        assert_eq!(report.superseded, vec![id(1)]);
        assert_eq!(report.agreeing, vec![id(3), id(4)]);
        let status = |n| v.get(id(n)).unwrap().record().status;
        assert_eq!(status(2), EvidenceStatus::Verified);
        assert_eq!(status(1), EvidenceStatus::Superseded);
        assert_eq!(status(3), EvidenceStatus::Unverified);
        assert_eq!(status(4), EvidenceStatus::Unverified);
        let reader = crate::record::Principal::new("acme", "ann", None);
        assert_eq!(
            v.support(&reader, "price/sku-42", "12 eur", Timestamp(9)),
            2
        );
        assert_eq!(v.open_needs().count(), 0);
        assert!(matches!(
            resolve(&v, &tenant(), need, id(2), Timestamp(10)),
            Err(ResolveError::AlreadyResolved { .. })
        ));
    }

    #[test]
    fn refusals() {
        let v = setup();
        let need = NeedId(id(2));
        assert!(matches!(
            resolve(&v, &tenant(), need, id(4), Timestamp(9)),
            Err(ResolveError::DerivedCannotBeVerified { .. })
        ));
        assert!(matches!(
            resolve(&v, &tenant(), NeedId(id(77)), id(2), Timestamp(9)),
            Err(ResolveError::UnknownNeed { .. })
        ));
        assert!(matches!(
            resolve(&v, &tenant(), need, id(100), Timestamp(9)),
            Err(ResolveError::NotInNeed { .. })
        ));
        let narrow = AccessRule {
            principal: Some("bob".into()),
            ..tenant()
        };
        assert!(matches!(
            resolve(&v, &narrow, need, id(2), Timestamp(9)),
            Err(ResolveError::ScopeViolation { .. })
        ));
    }
}
