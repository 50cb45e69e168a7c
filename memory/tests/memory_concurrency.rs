//! The commit is a CAS on the memory's version: a write that loses the race re-runs the write
//! path against the view that won and never overwrites it. A racing store commits an
//! interloper's write between every read and CAS of ours.

mod common;

use std::collections::VecDeque;
use std::sync::Mutex;

use common::{arb_obs, build};
use proptest::prelude::*;
use quorate_memory::{write, ClaimOutcome, Memory, MemoryObservation, MemoryView, Relation};
use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, RecordId, Source, Timestamp, Validity, Version,
};
use quorate_state::{CasOutcome, DeleteOutcome, MemoryStore, Store, StoreError, Versioned};

/// A store where, before each CAS, a concurrent writer commits its next queued observation.
struct RacingStore {
    inner: MemoryStore<MemoryView>,
    interlopers: Mutex<VecDeque<(AccessRule, MemoryObservation)>>,
    /// Ids the interlopers stored, per their own reports.
    stored_by_interlopers: Mutex<Vec<RecordId>>,
    injected: Mutex<u32>,
}

impl RacingStore {
    fn new(interlopers: Vec<(AccessRule, MemoryObservation)>) -> Self {
        Self {
            inner: MemoryStore::new(),
            interlopers: Mutex::new(interlopers.into()),
            stored_by_interlopers: Mutex::new(Vec::new()),
            injected: Mutex::new(0),
        }
    }

    fn interfere(&self) {
        let next = self.interlopers.lock().expect("lock").pop_front();
        let Some((authority, obs)) = next else { return };
        let current = self.inner.get_now("memory/ns");
        let base = current
            .as_ref()
            .map(|c| c.value.clone())
            .unwrap_or_default();
        let Ok((view, report)) = write(&base, &authority, &obs) else {
            return;
        };
        let committed = self
            .inner
            .cas_now("memory/ns", current.map(|c| c.version), view)
            .is_committed();
        assert!(committed, "nobody else writes the inner store");
        *self.injected.lock().expect("lock") += 1;
        let mut stored = self.stored_by_interlopers.lock().expect("lock");
        stored.push(report.event);
        stored.extend(report.claims.iter().filter_map(|c| match c {
            ClaimOutcome::Stored { id, .. } => Some(*id),
            ClaimOutcome::Duplicate { .. } => None,
        }));
    }
}

impl Store<MemoryView> for RacingStore {
    async fn get(&self, key: &str) -> Result<Option<Versioned<MemoryView>>, StoreError> {
        Ok(self.inner.get_now(key))
    }

    async fn cas(
        &self,
        key: &str,
        expected: Option<Version>,
        value: MemoryView,
    ) -> Result<CasOutcome<MemoryView>, StoreError> {
        self.interfere();
        Ok(self.inner.cas_now(key, expected, value))
    }

    async fn delete(
        &self,
        key: &str,
        expected: Version,
    ) -> Result<DeleteOutcome<MemoryView>, StoreError> {
        Ok(self.inner.delete_now(key, expected))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Versioned<MemoryView>)>, StoreError> {
        Ok(self.inner.scan_now(prefix))
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

proptest! {
    /// Every record that either side's committed write stored is in the final view with its
    /// source, and every conflict was merged (counted) rather than overwritten.
    #[test]
    fn concurrent_updates_are_never_overwritten(
        ours in prop::collection::vec(arb_obs(), 1..8),
        theirs in prop::collection::vec(arb_obs(), 0..12),
    ) {
        let mut next = 0u128;
        let interlopers: Vec<_> = theirs.iter().map(|s| build(s, &mut next, &[])).collect();
        let mine: Vec<_> = ours.iter().map(|s| build(s, &mut next, &[])).collect();
        let memory = Memory::new(RacingStore::new(interlopers), "ns");
        let mut stored_by_us: Vec<(RecordId, Source)> = Vec::new();
        let mut conflicts = 0;
        block_on(async {
            for (authority, obs) in &mine {
                // A refused write (bad scope or status) is refused before any CAS.
                if let Ok(done) = memory.write(authority, obs).await {
                    conflicts += done.conflicts;
                    stored_by_us.push((done.report.event, obs.source.clone()));
                    for c in &done.report.claims {
                        if let ClaimOutcome::Stored { id, .. } = c {
                            stored_by_us.push((*id, obs.source.clone()));
                        }
                    }
                }
            }
        });
        let store = memory.store();
        let view = store.inner.get_now("memory/ns").map(|v| v.value).unwrap_or_default();
        for (id, source) in &stored_by_us {
            let r = view.get(*id);
            prop_assert!(r.is_some(), "our record {} was overwritten", id);
            prop_assert_eq!(&r.map(|r| r.record().source.clone()), &Some(source.clone()));
        }
        for id in store.stored_by_interlopers.lock().expect("lock").iter() {
            prop_assert!(view.get(*id).is_some(), "concurrent record {} was overwritten", id);
        }
        // Each committed interloper landed between one of our reads and our CAS (refused
        // writes of ours are refused before any CAS), and each one was merged as a conflict.
        let injected = *store.injected.lock().expect("lock");
        prop_assert_eq!(conflicts, injected);
        prop_assert!(view.indexes_consistent());
    }
}

fn inventory(id: u128, source: &str, at: u64, claim: &str) -> (AccessRule, MemoryObservation) {
    let ops = AccessRule {
        tenant: "acme".into(),
        principal: None,
        task: None,
    };
    let obs = MemoryObservation {
        event: RecordId::from_u128(id * 100),
        episode: format!("read {source}"),
        source: Source {
            name: source.into(),
            version: format!("r{at}"),
        },
        observed_at: Timestamp(at),
        access: ops.clone(),
        status: EvidenceStatus::Unverified,
        derived_from: vec![],
        claims: vec![quorate_memory::ClaimSpec::new(
            RecordId::from_u128(id),
            MemoryKind::Semantic,
            "inventory/sku-42",
            claim,
            Validity::default(),
        )],
    };
    (ops, obs)
}

/// The retry is a merge, not a replay of the stale result: our claim is classified against the
/// record the concurrent writer committed while we were in flight.
#[test]
fn a_lost_race_is_reclassified_against_the_winner() {
    let memory = Memory::new(
        RacingStore::new(vec![inventory(1, "db", 2, "3 units")]),
        "ns",
    );
    let (ops, ours) = inventory(2, "scanner", 3, "9 units");
    let done = block_on(memory.write(&ops, &ours)).expect("write");
    assert_eq!(done.conflicts, 1);
    assert_eq!(
        done.report.claims,
        vec![ClaimOutcome::Stored {
            id: RecordId::from_u128(2),
            status: EvidenceStatus::Conflicting,
            relations: vec![Relation::Conflicts {
                with: RecordId::from_u128(1)
            }],
        }]
    );
    let view = memory
        .store()
        .inner
        .get_now("memory/ns")
        .expect("written")
        .value;
    assert_eq!(view.open_needs().count(), 1);
    assert_eq!(view.len(), 4);
}
