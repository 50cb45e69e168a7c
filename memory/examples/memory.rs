//! Memory with provenance, end to end:
//!
//! 1. two sources disagree about a price: the conflict is kept open (both sides, a verification
//!    need), a model's answer built on one side does not count as a second source, and a later
//!    check resolves it;
//! 2. a worker's remembered stock level goes stale while it works: before its write depends on
//!    it, the record is refreshed (the new reading supersedes it and invalidates the inference
//!    built on it) and the write is gated on the target's version.
//!
//! Run with `cargo run -p quorate-memory --example memory`.

use quorate_memory::*;
use quorate_protocols::*;
use quorate_state::{CasOutcome, MemoryStore};

type Demo = Result<(), Box<dyn std::error::Error>>;

fn id(n: u128) -> RecordId {
    RecordId::from_u128(n)
}

/// Human names for the demo's record ids (event records are `100 + n`).
fn name(r: RecordId) -> String {
    const NAMES: [(u128, &str); 7] = [
        (1, "catalog:price"),
        (2, "erp:price"),
        (3, "model:quote"),
        (4, "erp-check:price"),
        (11, "inventory@v1"),
        (12, "model:order-7-ships"),
        (13, "inventory@v2"),
    ];
    for (n, label) in NAMES {
        if id(n) == r {
            return label.to_string();
        }
        if id(100 + n) == r {
            return format!("event({label})");
        }
    }
    r.to_string()
}

fn names(ids: &[RecordId]) -> String {
    let v: Vec<String> = ids.iter().map(|i| name(*i)).collect();
    format!("[{}]", v.join(", "))
}

/// An unverified observation with one semantic claim (event id `100 + n`, claim id `n`).
fn observation(
    n: u128,
    source: Source,
    at: u64,
    access: &AccessRule,
    object: &str,
    claim: &str,
) -> MemoryObservation {
    MemoryObservation {
        event: id(100 + n),
        episode: format!("{} reported on {object}", source.name),
        source,
        observed_at: Timestamp(at),
        access: access.clone(),
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

fn src(name: &str, version: &str) -> Source {
    Source {
        name: name.into(),
        version: version.into(),
    }
}

fn show(view: &MemoryView, ids: &[u128]) {
    for n in ids {
        if let Some(r) = view.get(id(*n)) {
            let rec = r.record();
            let derived = if rec.is_derived() {
                format!(" derived from {}", names(&rec.derived_from))
            } else {
                String::new()
            };
            let invalid = r
                .invalidated_by()
                .map(|by| format!(", invalidated by {}", name(by)))
                .unwrap_or_default();
            println!(
                "   {:<20} {:<12} {:?} (source {} {}){derived}{invalid}",
                name(rec.id),
                format!("{:?}", rec.status),
                rec.claim,
                rec.source.name,
                rec.source.version,
            );
        }
    }
}

async fn conflict_kept_open_then_resolved() -> Demo {
    println!("== 1. A conflict kept open, then resolved ==");
    let memory = Memory::new(MemoryStore::new(), "acme");
    let ops = AccessRule {
        tenant: "acme".into(),
        principal: None,
        task: None,
    };
    let object = "price/sku-42";
    let first = memory
        .write(
            &ops,
            &observation(
                1,
                src("supplier-catalog", "2024-06"),
                1_000,
                &ops,
                object,
                "10 EUR",
            ),
        )
        .await?;
    assert!(first.report.needs.is_empty());
    let w = memory
        .write(
            &ops,
            &observation(2, src("erp", "r18"), 2_000, &ops, object, "12 EUR"),
        )
        .await?;
    let need = w.report.needs[0];
    println!("-- catalog says 10 EUR, the ERP says 12 EUR: both kept, verification need opened");
    // A model answers a customer from the ERP record: a derived record, not a new source.
    let quote = memory
        .write(
            &ops,
            &MemoryObservation {
                derived_from: vec![id(2)],
                ..observation(3, src("model", "gpt-x"), 2_500, &ops, object, "12 EUR")
            },
        )
        .await?;
    assert_eq!(quote.report.needs, vec![need]);
    let snap = memory.snapshot().await?;
    show(&snap.view, &[1, 2, 3]);
    let open = snap.view.need(need).ok_or("need")?;
    let mut members: Vec<RecordId> = open.records.iter().copied().collect();
    members.sort_by_key(|r| name(*r));
    println!("   open need on {}: {}", open.object, names(&members));
    let agent = Principal::new("acme", "pricing-agent", None);
    println!(
        "   independent sources for \"12 EUR\": {} (the model's answer counts zero)",
        snap.view
            .support(&agent, object, "12 EUR", Timestamp(3_000))
    );

    let recall = memory
        .retrieve(
            &agent,
            &Query::new("price sku 42", 200, Timestamp(3_000)).kinds(&[MemoryKind::Semantic]),
            &FreshnessPolicy::default(),
        )
        .await?;
    let got: Vec<String> = recall
        .retrieval
        .chosen
        .iter()
        .map(|s| format!("{} ({:?})", name(s.record.id()), s.record.record().status))
        .collect();
    println!(
        "   an agent asking about the price sees: {}",
        got.join(", ")
    );

    println!("-- a tool call re-reads the ERP with a receipt: 12 EUR, verified");
    let check = MemoryObservation {
        status: EvidenceStatus::Verified,
        ..observation(4, src("erp", "r19"), 4_000, &ops, object, "12 EUR")
    };
    let w = memory.write(&ops, &check).await?;
    println!(
        "   it supersedes {} (same source, newer), invalidates {}, and joins the open need: {}",
        names(&w.report.superseded),
        names(&w.report.invalidated),
        w.report.needs.contains(&need)
    );
    let r = memory.resolve(&ops, need, id(4), Timestamp(4_100)).await?;
    println!(
        "   resolved for {}: superseded {}, agreeing {}",
        name(r.report.winner),
        names(&r.report.superseded),
        names(&r.report.agreeing)
    );
    let snap = memory.snapshot().await?;
    show(&snap.view, &[1, 2, 3, 4]);
    println!("   open needs: {}", snap.view.open_needs().count());
    Ok(())
}

async fn stale_inventory_refreshed_before_write() -> Demo {
    println!();
    println!("== 2. A stale inventory record superseded before a write ==");
    let inventory: MemoryStore<u32> = MemoryStore::new();
    let key = "inventory/sku-42";
    let CasOutcome::Committed(v1) = inventory.cas_now(key, None, 12) else {
        return Err("seed".into());
    };
    let memory = Memory::new(MemoryStore::new(), "acme");
    let task = TaskId::from_u128(7);
    let worker = AccessRule {
        tenant: "acme".into(),
        principal: Some("fulfilment".into()),
        task: Some(task),
    };
    let read = |n, version, at, units: u32| MemoryObservation {
        status: EvidenceStatus::Verified,
        ..observation(
            n,
            store_source("inventory", version),
            at,
            &worker,
            key,
            &format!("{units} units in stock"),
        )
    };
    let first = memory.write(&worker, &read(11, v1, 10_000, 12)).await?;
    assert_eq!(first.conflicts, 0);
    let mut inference = MemoryObservation {
        derived_from: vec![id(11)],
        ..observation(
            12,
            src("model", "gpt-x"),
            10_500,
            &worker,
            "order/7",
            "order 7 (10 units of sku-42) can ship from stock",
        )
    };
    inference.claims[0].kind = MemoryKind::Working;
    let planned = memory.write(&worker, &inference).await?;
    assert!(planned.report.superseded.is_empty());
    println!("-- the worker read the stock level ({v1}) and a model planned order 7 on it");

    let me = Principal::new("acme", "fulfilment", Some(task));
    let policy = FreshnessPolicy::default().with(MemoryKind::Semantic, Freshness::VersionBased);
    let recall = memory
        .retrieve(
            &me,
            &Query::new("sku 42 stock order 7", 100, Timestamp(11_000))
                .kinds(&[MemoryKind::Semantic, MemoryKind::Working]),
            &policy,
        )
        .await?;
    let mut assignment = Envelope::new(
        RunId::from_u128(1),
        task,
        Sender {
            agent: AgentId::from_u128(1),
            role: Role::Supervisor,
        },
        "reserve 10 units of sku-42 for order 7",
        &mut quorate_protocols::IdSource::seeded(1),
    );
    assignment.evidence = recall.evidence_refs();
    println!("   the assignment carries evidence (memory key at memory version):");
    for (r, s) in assignment.evidence.iter().zip(&recall.retrieval.chosen) {
        let quorate_protocols::EvidenceRef::Record { key, version } = r else {
            continue;
        };
        println!(
            "     {:<20} {} at {}",
            name(s.record.id()),
            key.replace(&s.record.id().to_string(), "<id>"),
            version
        );
    }

    // Meanwhile another agent sells 9 units.
    let CasOutcome::Committed(v2) = inventory.cas_now(key, Some(v1), 3) else {
        return Err("concurrent sale".into());
    };
    println!("-- meanwhile another agent sold 9 units: {key} is now at {v2}");

    println!("-- before reserving 10 units, check the memory the write depends on");
    let snap = memory.snapshot().await?;
    let held = snap.view.get(id(11)).ok_or("record")?.record().clone();
    let current = inventory.get_now(key).map(|v| v.version);
    match before_write(&held, current) {
        BeforeWrite::Refresh { key, held, current } => {
            let current = current.map_or_else(|| "absent".to_string(), |v| v.to_string());
            println!(
                "   stale: memory holds {key} at {held}, the store has {current}: refresh first"
            );
        }
        BeforeWrite::Ready(p) => println!("   unexpectedly fresh: {p:?}"),
    }
    let now = inventory.get_now(key).ok_or("inventory")?;
    let w = memory
        .write(&worker, &read(13, now.version, 12_000, now.value))
        .await?;
    println!(
        "   new reading superseded {}; invalidated {}",
        names(&w.report.superseded),
        names(&w.report.invalidated)
    );
    let snap = memory.snapshot().await?;
    show(&snap.view, &[11, 12, 13]);
    let again = memory
        .retrieve(
            &me,
            &Query::new("sku 42 stock order 7", 100, Timestamp(12_500))
                .kinds(&[MemoryKind::Semantic, MemoryKind::Working]),
            &policy,
        )
        .await?;
    let ids: Vec<RecordId> = again
        .retrieval
        .chosen
        .iter()
        .map(|s| s.record.id())
        .collect();
    println!("   evidence now offered: {}", names(&ids));
    let fresh = snap.view.get(id(13)).ok_or("record")?.record().clone();
    let BeforeWrite::Ready(precondition) = before_write(&fresh, Some(now.version)) else {
        return Err("still stale".into());
    };
    println!("   write gated on {precondition:?}");
    let reserve = now.value.min(10);
    match inventory.cas_now(key, Some(now.version), now.value - reserve) {
        CasOutcome::Committed(v) => println!(
            "   reserved {reserve} of 10 units ({} left, {v}); order 7 back-orders {}",
            now.value - reserve,
            10 - reserve
        ),
        CasOutcome::Conflict { .. } => println!("   the target moved again: refresh and retry"),
    }
    Ok(())
}

fn main() -> Demo {
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    rt.block_on(async {
        conflict_kept_open_then_resolved().await?;
        stale_inventory_refreshed_before_write().await
    })
}
