//! Retrieval: the scope filter comes first and is exact, the budgeted choice respects the
//! budget, the exact search is optimal, the greedy is within its stated bound, and freshness
//! follows the per-kind policy.

mod common;

use std::collections::BTreeSet;

use common::{arb_obs, arb_reader, build, everything, timeless, ALL_STATUSES};
use proptest::prelude::*;
use quorate_memory::{
    deprioritize, evict_from_hot, expire_due, objective, retrieve, select_using, terms, write,
    ClaimSpec, Freshness, FreshnessPolicy, Hazard, Item, MemoryObservation, MemoryView, Method,
    Principal, Query,
};
use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, ProvenanceRecord, RecordId, Source, TaskId, Timestamp,
    Validity,
};

/// The access rule, restated independently of the crate: same tenant, principal unset or equal,
/// task unset or equal.
fn may_read(reader: &Principal, access: &AccessRule) -> bool {
    access.tenant == reader.tenant
        && match &access.principal {
            None => true,
            Some(p) => *p == reader.principal,
        }
        && match access.task {
            None => true,
            Some(t) => reader.task == Some(t),
        }
}

fn arb_view() -> impl Strategy<Value = MemoryView> {
    prop::collection::vec(arb_obs(), 0..25).prop_map(|specs| {
        let mut view = MemoryView::new();
        let mut next = 0;
        let mut known = Vec::new();
        for spec in &specs {
            let (authority, obs) = build(spec, &mut next, &known);
            if let Ok((v, _)) = write(&view, &authority, &obs) {
                view = v;
                known = view.records().map(|r| r.id()).collect();
            }
        }
        view
    })
}

proptest! {
    /// Retrieval never returns a record outside the reader's scope, the asked statuses or (unless
    /// history is asked for) its validity at the query's time and that of every record it was
    /// derived from, and (so the filter is not simply empty) with room for everything and no
    /// redundancy penalty it returns exactly the records the reader may see.
    #[test]
    fn retrieval_never_leaves_the_callers_scope(
        view in arb_view(),
        reader in arb_reader(),
        statuses in prop::sample::subsequence(ALL_STATUSES.to_vec(), 1..=5),
        lambda in prop_oneof![Just(0.0), Just(0.5), Just(3.0)],
        budget in prop_oneof![Just(0u32), 1..200u32, Just(u32::MAX)],
        now in 0..45u64,
        history in any::<bool>(),
    ) {
        let query = Query::new(&everything(), budget, Timestamp(now))
            .statuses(&statuses)
            .redundancy(lambda)
            .expect("valid lambda");
        let query = if history { query.include_history() } else { query };
        // Validity at `now`, restated: from ≤ now < until, each bound optional, for the record
        // and everything it was derived from.
        let holds = |v: &Validity| v.from.is_none_or(|f| f.0 <= now) && v.until.is_none_or(|u| now < u.0);
        let valid = |r: &ProvenanceRecord| {
            let mut stack = vec![r.clone()];
            while let Some(r) = stack.pop() {
                if !holds(&r.validity) {
                    return history;
                }
                stack.extend(r.derived_from.iter().filter_map(|p| view.get(*p)).map(|p| p.record().clone()));
            }
            true
        };
        let got = retrieve(&view, &reader, &query, &timeless());
        let mut used = 0u64;
        for s in &got.chosen {
            let r = s.record.record();
            prop_assert!(may_read(&reader, &r.access), "{:?} read {:?}", reader, r.access);
            let status = if s.record.invalidated_by().is_some() {
                EvidenceStatus::Superseded
            } else {
                r.status
            };
            prop_assert!(statuses.contains(&status));
            prop_assert!(valid(r), "{:?} is not valid at {}", r, now);
            used += u64::from(s.record.tokens());
        }
        prop_assert!(used <= u64::from(budget));
        prop_assert_eq!(used, u64::from(got.tokens_used));
        let expected: BTreeSet<RecordId> = view
            .records()
            .filter(|r| {
                let status = if r.invalidated_by().is_some() { EvidenceStatus::Superseded } else { r.record().status };
                may_read(&reader, &r.record().access)
                    && statuses.contains(&status)
                    && valid(r.record())
            })
            .map(|r| r.id())
            .collect();
        prop_assert_eq!(got.visible, expected.len());
        if lambda == 0.0 && budget == u32::MAX {
            let chosen: BTreeSet<RecordId> = got.chosen.iter().map(|s| s.record.id()).collect();
            prop_assert_eq!(chosen, expected);
        }
    }

    /// Housekeeping never changes an answer: a query at `now` gets the same retrieval before and
    /// after `expire_due(now)`.
    #[test]
    fn housekeeping_never_changes_an_answer(
        view in arb_view(),
        reader in arb_reader(),
        now in 0..45u64,
        statuses in prop::sample::subsequence(ALL_STATUSES.to_vec(), 1..=5),
    ) {
        let query = Query::new(&everything(), u32::MAX, Timestamp(now)).statuses(&statuses);
        let (kept, report) = expire_due(&view, Timestamp(now));
        let before = retrieve(&view, &reader, &query, &FreshnessPolicy::default());
        let after = retrieve(&kept, &reader, &query, &FreshnessPolicy::default());
        prop_assert_eq!(before, after, "expire_due changed {:?}", report);
    }

    /// The exact search matches an independent knapsack DP when there is no penalty; greedy never
    /// beats exact, never goes below the fixed items, and is within a factor 2 when λ = 0.
    #[test]
    fn selection_is_optimal_or_within_its_bound(
        raw in prop::collection::vec((1..30u32, 0..100u32, prop::collection::btree_set(0..6u8, 0..4)), 0..10),
        budget in 0..80u32,
        lambda in prop_oneof![Just(0.0), Just(0.4), Just(2.0)],
        fix_first in any::<bool>(),
    ) {
        let items: Vec<Item> = raw
            .iter()
            .map(|(cost, rel, keys)| Item {
                cost: *cost,
                relevance: f64::from(*rel) / 100.0,
                terms: keys.iter().map(|k| format!("k{k}")).collect(),
            })
            .collect();
        let fixed: Vec<usize> = if fix_first && !items.is_empty() && items[0].cost <= budget { vec![0] } else { vec![] };
        let (exact, m1) = select_using(Method::Exact, &items, &fixed, budget, lambda);
        let (greedy, m2) = select_using(Method::Greedy, &items, &fixed, budget, lambda);
        prop_assert_eq!((m1, m2), (Method::Exact, Method::Greedy));
        for chosen in [&exact, &greedy] {
            let cost: u32 = chosen.iter().map(|&i| items[i].cost).sum();
            prop_assert!(cost <= budget);
            prop_assert!(fixed.iter().all(|f| chosen.contains(f)));
            let unique: BTreeSet<_> = chosen.iter().collect();
            prop_assert_eq!(unique.len(), chosen.len());
        }
        let f_exact = objective(&items, &exact, lambda);
        let f_greedy = objective(&items, &greedy, lambda);
        let f_fixed = objective(&items, &fixed, lambda);
        prop_assert!(f_greedy <= f_exact + 1e-9);
        prop_assert!(f_greedy >= f_fixed - 1e-9);
        if lambda == 0.0 {
            // Independent optimum: 0/1 knapsack DP over the free items' integer relevances.
            let room = (budget - fixed.iter().map(|&i| items[i].cost).sum::<u32>()) as usize;
            let mut best = vec![0u32; room + 1];
            for (i, (cost, rel, _)) in raw.iter().enumerate() {
                if fixed.contains(&i) { continue; }
                let c = *cost as usize;
                for b in (c..=room).rev() {
                    best[b] = best[b].max(best[b - c] + rel);
                }
            }
            let dp = f_fixed + f64::from(best[room]) / 100.0;
            prop_assert!((f_exact - dp).abs() < 1e-9, "exact {} vs dp {}", f_exact, dp);
            prop_assert!(f_greedy - f_fixed >= (f_exact - f_fixed) / 2.0 - 1e-9);
        }
    }
}

/// Greedy by density alone can be arbitrarily bad; the best-single fallback restores the
/// factor-2 bound.
#[test]
fn greedy_falls_back_to_the_best_single_item() {
    let item = |cost, relevance| Item {
        cost,
        relevance,
        terms: BTreeSet::new(),
    };
    let items = [item(1, 0.02), item(80, 1.0)];
    let (greedy, _) = select_using(Method::Greedy, &items, &[], 80, 0.0);
    assert_eq!(greedy, vec![1]);
}

fn ops() -> AccessRule {
    AccessRule {
        tenant: "acme".into(),
        principal: None,
        task: None,
    }
}

fn claim(
    id: u128,
    kind: MemoryKind,
    object: &str,
    text: &str,
    source: &str,
    version: &str,
    at: u64,
) -> MemoryObservation {
    MemoryObservation {
        event: RecordId::from_u128(id + 1000),
        episode: "noted".into(),
        source: Source {
            name: source.into(),
            version: version.into(),
        },
        observed_at: Timestamp(at),
        access: AccessRule {
            task: (kind == MemoryKind::Working).then(|| TaskId::from_u128(1)),
            ..ops()
        },
        status: EvidenceStatus::Unverified,
        derived_from: vec![],
        claims: vec![ClaimSpec::new(
            RecordId::from_u128(id),
            kind,
            object,
            text,
            Validity::default(),
        )],
    }
}

fn ids(got: &quorate_memory::Retrieval) -> Vec<RecordId> {
    got.chosen.iter().map(|s| s.record.id()).collect()
}

#[test]
fn freshness_is_per_kind() {
    let mut v = MemoryView::new();
    for o in [
        claim(
            1,
            MemoryKind::Semantic,
            "stock/sku-1",
            "stock level low",
            "db",
            "1",
            0,
        ),
        claim(
            2,
            MemoryKind::Episodic,
            "stock/sku-2",
            "stock level low",
            "db",
            "1",
            0,
        ),
        claim(
            3,
            MemoryKind::Procedural,
            "config/restock",
            "stock level threshold 5",
            "cfg",
            "a",
            0,
        ),
        // Same source, newer version, other object kind: the procedural record above is now
        // behind its source only if the same object moved. Write a new version of it, as a
        // different kind so it does not supersede it in the write path.
        claim(
            4,
            MemoryKind::Semantic,
            "config/restock",
            "stock level threshold 8",
            "cfg",
            "b",
            10,
        ),
    ] {
        v = write(&v, &ops(), &o).expect("write").0;
    }
    let reader = Principal::new("acme", "ann", None);
    let day = 86_400_000;
    let policy = FreshnessPolicy::default().with(
        MemoryKind::Semantic,
        Freshness::Exponential(Hazard::half_life_ms(day).expect("valid")),
    );
    let got = retrieve(
        &v,
        &reader,
        &Query::new("stock level", 1000, Timestamp(day)),
        &policy,
    );
    let score = |id: u128| {
        got.chosen
            .iter()
            .find(|s| s.record.id() == RecordId::from_u128(id))
            .map(|s| s.freshness)
    };
    assert!(
        (score(1).expect("semantic chosen") - 0.5).abs() < 1e-9,
        "half-life of a day"
    );
    assert_eq!(score(2), Some(1.0), "episodes never go stale");
    // Version-based: record 3's source showed another version of its object later.
    assert_eq!(got.stale, vec![RecordId::from_u128(3)]);
    assert_eq!(score(3), None);
}

#[test]
fn hot_first_and_forgetting_changes_rank() {
    let mut v = MemoryView::new();
    for o in [
        claim(
            1,
            MemoryKind::Working,
            "note/a",
            "customer prefers email",
            "chat",
            "1",
            0,
        ),
        claim(
            2,
            MemoryKind::Semantic,
            "order/7",
            "order seven ships tuesday",
            "erp",
            "1",
            0,
        ),
        claim(
            3,
            MemoryKind::Semantic,
            "order/8",
            "order eight ships friday",
            "erp",
            "1",
            0,
        ),
    ] {
        v = write(&v, &ops(), &o).expect("write").0;
    }
    let reader = Principal::new("acme", "ann", Some(TaskId::from_u128(1)));
    let q = Query::new("order ships", 1000, Timestamp(0));
    let got = retrieve(&v, &reader, &q, &timeless());
    // The working note is hot: in context although irrelevant to the query, and first.
    assert_eq!(ids(&got), [1, 2, 3].map(RecordId::from_u128));
    let (v, _) = evict_from_hot(&v, &ops(), RecordId::from_u128(1)).expect("evict");
    let got = retrieve(&v, &reader, &q, &timeless());
    assert_eq!(ids(&got), [2, 3].map(RecordId::from_u128));
    // With a budget for one record, deprioritising order 7 lets order 8 win.
    let one = Query::new("order ships", 12, Timestamp(0));
    assert_eq!(
        ids(&retrieve(&v, &reader, &one, &timeless())),
        [RecordId::from_u128(2)]
    );
    let (v, _) = deprioritize(&v, &ops(), RecordId::from_u128(2), 50).expect("deprioritize");
    assert_eq!(
        ids(&retrieve(&v, &reader, &one, &timeless())),
        [RecordId::from_u128(3)]
    );
    assert!(Query::new("x", 1, Timestamp(0))
        .redundancy(f64::NAN)
        .is_err());
}

#[test]
fn redundancy_penalty_prefers_diverse_records() {
    let mut v = MemoryView::new();
    for o in [
        claim(
            1,
            MemoryKind::Semantic,
            "sku-1",
            "red shirt in stock",
            "a",
            "1",
            0,
        ),
        claim(
            2,
            MemoryKind::Semantic,
            "sku-1",
            "red shirt in stock",
            "b",
            "1",
            0,
        ),
        claim(
            3,
            MemoryKind::Semantic,
            "sku-2",
            "blue shirt price ten",
            "c",
            "1",
            0,
        ),
    ] {
        v = write(&v, &ops(), &o).expect("write").0;
    }
    let reader = Principal::new("acme", "ann", None);
    let tokens = |id: u128| v.get(RecordId::from_u128(id)).expect("stored").tokens();
    // Room for either pair.
    let budget = tokens(1) + tokens(3);
    assert!(tokens(2) <= tokens(3));
    let plain = Query::new("red shirt stock price", budget, Timestamp(0))
        .redundancy(0.0)
        .expect("ok");
    let diverse = plain.clone().redundancy(1.0).expect("ok");
    let a = retrieve(&v, &reader, &plain, &timeless());
    let b = retrieve(&v, &reader, &diverse, &timeless());
    assert_eq!(
        ids(&a),
        [1, 2].map(RecordId::from_u128),
        "the two copies score highest"
    );
    assert!(
        ids(&b).contains(&RecordId::from_u128(3)),
        "one copy gives way to the other record"
    );
    assert_eq!(
        terms("Red shirt"),
        ["red", "shirt"].map(String::from).into_iter().collect()
    );
}
