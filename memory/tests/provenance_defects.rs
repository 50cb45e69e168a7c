//! The three provenance defects of issue 20, each tried through the public API only, as a user of
//! the crate would: a derivation that erased itself and its source, expired records retrieved
//! until housekeeping ran, and a private record that changed what others see.

mod common;

use common::timeless;
use quorate_memory::ClaimSpec;
use quorate_memory::{
    write, ClaimOutcome, FreshnessPolicy, MemoryObservation, MemoryView, Principal, Query,
    Relation, Retrieval, WriteReport,
};
use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, RecordId, Source, Timestamp, Validity,
};

fn id(n: u128) -> RecordId {
    RecordId::from_u128(n)
}

fn shared() -> AccessRule {
    AccessRule {
        tenant: "acme".into(),
        principal: None,
        task: None,
    }
}

fn only(principal: &str) -> AccessRule {
    AccessRule {
        principal: Some(principal.into()),
        ..shared()
    }
}

/// An unverified observation (event `100 + n`) by `source` at `version`, observed at `at`, with
/// one semantic claim `n` about `object`.
fn obs(
    n: u128,
    source: &str,
    version: &str,
    at: u64,
    access: AccessRule,
    object: &str,
    claim: &str,
) -> MemoryObservation {
    MemoryObservation {
        event: id(100 + n),
        episode: format!("{source} reported on {object}"),
        source: Source {
            name: source.into(),
            version: version.into(),
        },
        observed_at: Timestamp(at),
        access,
        status: EvidenceStatus::Unverified,
        derived_from: vec![],
        claims: vec![ClaimSpec::new(
            id(n),
            MemoryKind::Semantic,
            object,
            claim,
            Validity::default(),
        )],
    }
}

/// `o` with its claims procedural.
fn procedural(mut o: MemoryObservation) -> MemoryObservation {
    for c in &mut o.claims {
        c.kind = MemoryKind::Procedural;
    }
    o
}

fn apply(view: &MemoryView, o: &MemoryObservation) -> (MemoryView, WriteReport) {
    write(view, &shared(), o).expect("write accepted")
}

/// The claims `reader` gets for `text` at `now`, with room for everything: (id, status) in id
/// order.
fn seen(
    view: &MemoryView,
    reader: &Principal,
    text: &str,
    now: u64,
    policy: &FreshnessPolicy,
) -> Vec<(RecordId, EvidenceStatus)> {
    let query = Query::new(text, u32::MAX, Timestamp(now))
        .redundancy(0.0)
        .expect("valid");
    let got: Retrieval = quorate_memory::retrieve(view, reader, &query, policy);
    let mut out: Vec<_> = got
        .chosen
        .iter()
        .filter(|s| !s.record.is_event())
        .map(|s| (s.record.id(), s.record.record().status))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

/// Defect 1: a model's step 2, derived from its own step 1 about the same object, superseded
/// step 1 (same source, newer) and was then invalidated as derived from what it had just
/// superseded; both left current retrieval while the report said step 2 was stored.
#[test]
fn a_derivation_never_erases_itself_or_its_source() {
    let reader = Principal::new("acme", "ann", None);
    let (v, _) = apply(
        &MemoryView::new(),
        &obs(1, "erp", "r1", 10, shared(), "order/7", "order 7 paid"),
    );
    let step = |n: u128, from: u128, at: u64, claim: &str| MemoryObservation {
        derived_from: vec![id(from)],
        ..obs(n, "model", "m1", at, shared(), "plan/7", claim)
    };
    let (v, _) = apply(&v, &step(2, 1, 20, "ship order 7 today"));
    let (v, report) = apply(&v, &step(3, 2, 30, "ship order 7 today by courier"));

    // Step 2 is not superseded by what was derived from it, and nothing was invalidated.
    assert!(report.superseded.is_empty(), "{report:?}");
    assert!(report.invalidated.is_empty(), "{report:?}");
    let ClaimOutcome::Stored {
        id: stored, status, ..
    } = &report.claims[0]
    else {
        panic!("step 3 was not stored: {report:?}");
    };
    assert_eq!(*stored, id(3));
    // Against its own source a derivation only corroborates or disputes: the disagreement is
    // kept open, and step 2 keeps its status.
    assert!(
        matches!(&report.claims[0], ClaimOutcome::Stored { relations, .. }
            if relations == &[Relation::Disputes { with: id(2) }]),
        "{report:?}"
    );
    assert_eq!(
        v.get(id(2)).map(|r| r.effective_status()),
        Some(EvidenceStatus::Unverified)
    );
    // The report agrees with the view it left.
    let after = v.get(id(3)).expect("stored");
    assert!(after.is_active(), "step 3 is not retrievable: {after:?}");
    assert_eq!(after.record().status, *status);
    // Both steps are retrievable.
    let got = seen(&v, &reader, "plan 7 ship order", 40, &timeless());
    let ids: Vec<RecordId> = got.iter().map(|(i, _)| *i).collect();
    assert!(ids.contains(&id(2)) && ids.contains(&id(3)), "{got:?}");
}

/// Defect 2: a record whose validity ended at 5000 was returned by a query at 6000 unless
/// `expire_due(6000)` had run first.
#[test]
fn expired_validity_is_filtered_without_housekeeping() {
    let reader = Principal::new("acme", "ann", None);
    let mut o = obs(
        1,
        "erp",
        "r1",
        1_000,
        shared(),
        "promo/9",
        "promo 9 is 20% off",
    );
    o.claims[0].validity = Validity {
        from: Some(Timestamp(1_000)),
        until: Some(Timestamp(5_000)),
    };
    let (v, _) = apply(&MemoryView::new(), &o);
    assert_eq!(
        seen(&v, &reader, "promo 9", 4_000, &timeless()),
        vec![(id(1), EvidenceStatus::Unverified)],
        "valid at 4000"
    );
    assert_eq!(
        seen(&v, &reader, "promo 9", 6_000, &timeless()),
        vec![],
        "ended at 5000"
    );
    let (after, _) = quorate_memory::expire_due(&v, Timestamp(6_000));
    assert_eq!(seen(&after, &reader, "promo 9", 6_000, &timeless()), vec![]);
    // History is there for a caller who asks for it: before housekeeping the record still says
    // unverified, after it, expired.
    let history = |view: &MemoryView| {
        let query = Query::new("promo 9", u32::MAX, Timestamp(6_000))
            .include_history()
            .statuses(&[EvidenceStatus::Unverified, EvidenceStatus::Expired]);
        let got = quorate_memory::retrieve(view, &reader, &query, &timeless());
        got.chosen
            .iter()
            .filter(|s| !s.record.is_event())
            .map(|s| (s.record.id(), s.record.record().status))
            .collect::<Vec<_>>()
    };
    assert_eq!(history(&v), vec![(id(1), EvidenceStatus::Unverified)]);
    assert_eq!(history(&after), vec![(id(1), EvidenceStatus::Expired)]);
    // A query about another time still answers for that time.
    let then = Query::new("promo 9", u32::MAX, Timestamp(6_000)).valid_at(Timestamp(2_000));
    let got = quorate_memory::retrieve(&v, &reader, &then, &timeless());
    assert!(got.chosen.iter().any(|s| s.record.id() == id(1)));
}

/// Defect 2, through a derivation: housekeeping invalidates what was derived from a record whose
/// validity ended, so a query must not return it either before housekeeping ran.
#[test]
fn a_derivation_ends_with_what_it_was_derived_from() {
    let reader = Principal::new("acme", "ann", None);
    let mut promo = obs(
        1,
        "erp",
        "r1",
        1_000,
        shared(),
        "promo/9",
        "promo 9 is 20% off",
    );
    promo.claims[0].validity = Validity {
        from: Some(Timestamp(1_000)),
        until: Some(Timestamp(5_000)),
    };
    let (v, _) = apply(&MemoryView::new(), &promo);
    let quote = MemoryObservation {
        derived_from: vec![id(1)],
        ..obs(
            2,
            "model",
            "m1",
            2_000,
            shared(),
            "quote/9",
            "quote 9 at 20% off",
        )
    };
    let (v, _) = apply(&v, &quote);
    assert_eq!(
        seen(&v, &reader, "promo quote 9", 4_000, &timeless()),
        vec![
            (id(1), EvidenceStatus::Unverified),
            (id(2), EvidenceStatus::Unverified)
        ]
    );
    let (after, report) = quorate_memory::expire_due(&v, Timestamp(6_000));
    assert!(report.invalidated.contains(&id(2)), "{report:?}");
    assert_eq!(
        seen(&after, &reader, "promo quote 9", 6_000, &timeless()),
        vec![]
    );
    assert_eq!(
        seen(&v, &reader, "promo quote 9", 6_000, &timeless()),
        vec![],
        "the same answer before housekeeping"
    );
}

/// Defect 3, conflict: a record only ann may read marked a tenant-wide record conflicting for
/// bob, who cannot see the other side.
#[test]
fn a_private_record_never_puts_a_shared_one_in_conflict() {
    let bob = Principal::new("acme", "bob", None);
    let private = obs(
        1,
        "scanner",
        "s1",
        10,
        only("ann"),
        "stock/sku-1",
        "3 units",
    );
    let public = obs(2, "db", "d1", 20, shared(), "stock/sku-1", "9 units");
    // Ann's private reading first, then the shared one disagreeing with it.
    let (v, _) = apply(&MemoryView::new(), &private);
    let (v, report) = apply(&v, &public);
    assert!(report.needs.is_empty(), "{report:?}");
    assert_eq!(
        seen(&v, &bob, "stock sku 1", 30, &timeless()),
        vec![(id(2), EvidenceStatus::Unverified)]
    );
    // And the other way round: the shared reading first, ann's disagreeing one after.
    let (v, _) = apply(&MemoryView::new(), &public);
    let (v, _) = apply(&v, &private);
    assert_eq!(
        seen(&v, &bob, "stock sku 1", 30, &timeless()),
        vec![(id(2), EvidenceStatus::Unverified)]
    );
}

/// Defect 3, supersession: a newer private reading from the same source made a late shared
/// reading arrive as already superseded, so bob retrieved nothing.
#[test]
fn a_private_record_never_supersedes_a_shared_one() {
    let bob = Principal::new("acme", "bob", None);
    let (v, _) = apply(
        &MemoryView::new(),
        &obs(1, "db", "d2", 20, only("ann"), "stock/sku-1", "3 units"),
    );
    let (v, report) = apply(
        &v,
        &obs(2, "db", "d1", 10, shared(), "stock/sku-1", "9 units"),
    );
    assert!(
        !matches!(&report.claims[0], ClaimOutcome::Stored { relations, .. }
            if relations.iter().any(|r| matches!(r, Relation::SupersededBy { .. }))),
        "{report:?}"
    );
    assert_eq!(
        seen(&v, &bob, "stock sku 1", 30, &timeless()),
        vec![(id(2), EvidenceStatus::Unverified)]
    );
}

/// Defect 3, staleness: a newer version from the same source that only ann may read made the
/// shared procedure stale (version-based freshness 0) for bob.
#[test]
fn a_private_version_never_makes_a_shared_record_stale() {
    let bob = Principal::new("acme", "bob", None);
    let ann = Principal::new("acme", "ann", None);
    let (v, _) = apply(
        &MemoryView::new(),
        &procedural(obs(
            1,
            "config",
            "v1",
            10,
            shared(),
            "config/restock",
            "restock at 5",
        )),
    );
    let (v, _) = apply(
        &v,
        &procedural(obs(
            2,
            "config",
            "v2",
            20,
            only("ann"),
            "config/restock",
            "restock at 8",
        )),
    );
    let versioned = FreshnessPolicy::default();
    assert_eq!(
        seen(&v, &bob, "restock", 30, &versioned),
        vec![(id(1), EvidenceStatus::Unverified)],
        "bob cannot see version 2: version 1 is the latest he knows"
    );
    // Ann can see version 2, so for her version 1 is behind its source.
    assert_eq!(
        seen(&v, &ann, "restock", 30, &versioned),
        vec![(id(2), EvidenceStatus::Unverified)]
    );
}

/// Defect 3, support: a private record that agrees with a shared one added a vote for readers
/// who cannot see it.
#[test]
fn a_private_record_never_adds_support_for_others() {
    let bob = Principal::new("acme", "bob", None);
    let ann = Principal::new("acme", "ann", None);
    let (v, _) = apply(
        &MemoryView::new(),
        &obs(1, "db", "d1", 10, shared(), "stock/sku-1", "3 units"),
    );
    let (v, _) = apply(
        &v,
        &obs(
            2,
            "scanner",
            "s1",
            20,
            only("ann"),
            "stock/sku-1",
            "3 units",
        ),
    );
    let at = Timestamp(30);
    assert_eq!(v.support(&bob, "stock/sku-1", "3 units", at), 1);
    assert_eq!(v.support(&ann, "stock/sku-1", "3 units", at), 2);
    let query = Query::new("stock sku 1", u32::MAX, at);
    let support_of = |reader: &Principal| {
        let got = quorate_memory::retrieve(&v, reader, &query, &timeless());
        got.chosen
            .iter()
            .find(|s| s.record.id() == id(1))
            .map(|s| s.support)
    };
    assert_eq!(support_of(&bob), Some(1));
    assert_eq!(support_of(&ann), Some(2));
}
