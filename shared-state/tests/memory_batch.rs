//! `MemoryStore::create_many_now` (a batch of creates, each shard locked once) does what the
//! same creates one at a time do, and what it wrote the map's own lookups find.

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;
use quorate_state::{CasOutcome, MemoryStore};

/// The value an outcome shows: `Ok(())` for a create, `Err(held)` for a refusal.
fn shape(outcome: &CasOutcome<u32>) -> Result<(), u32> {
    match outcome {
        CasOutcome::Committed(_) => Ok(()),
        CasOutcome::Conflict { current } => Err(current
            .as_ref()
            .expect("a create refused for a held key")
            .value),
    }
}

proptest! {
    /// Batches over a few keys (so that keys repeat, within a batch and across batches) end in
    /// the same store, with the same outcomes and conflict count, as the same creates one by one;
    /// each batch's versions rise with its items and are above every version before it.
    #[test]
    fn a_batch_is_its_creates_one_by_one(
        batches in prop::collection::vec(prop::collection::vec((0u8..12, any::<u32>()), 0..20), 1..8)
    ) {
        let batched = MemoryStore::new();
        let single = MemoryStore::new();
        let mut highest = 0;
        for batch in &batches {
            let items: Vec<(String, u32)> = batch.iter().map(|&(k, v)| (format!("k{k}"), v)).collect();
            let one_by_one: Vec<_> = items.iter().map(|(k, v)| single.create_now(k.as_str(), *v)).collect();
            let mut together = Vec::new();
            batched.create_many_now(items, |o| together.push(o));
            prop_assert_eq!(together.len(), one_by_one.len());
            let mut last = highest;
            for (a, b) in together.iter().zip(&one_by_one) {
                prop_assert_eq!(shape(a), shape(b));
                if let CasOutcome::Committed(v) = a {
                    prop_assert!(v.raw() > last, "version {} after {}", v.raw(), last);
                    last = v.raw();
                }
            }
            // The batch drew one number per item, used or not.
            highest += batch.len() as u64;
            prop_assert!(last <= highest);
        }
        prop_assert_eq!(batched.conflicts(), single.conflicts());
        prop_assert_eq!(batched.len(), single.len());
        for k in 0u8..12 {
            let key = format!("k{k}");
            prop_assert_eq!(
                batched.get_now(&key).map(|v| v.value),
                single.get_now(&key).map(|v| v.value)
            );
        }
    }
}

/// A batch far larger than the map's room: every shard is locked, the tables grow while the
/// batch writes, and every key is then found by the map's own lookups (same hash, same shard)
/// and refused to the one-at-a-time create.
#[test]
fn a_large_batch_is_found_by_single_lookups() {
    let store = MemoryStore::new();
    let n = 20_000u32;
    let mut outcomes = Vec::new();
    store.create_many_now((0..n).map(|i| (format!("run/task-{i}"), i)), |o| {
        outcomes.push(o)
    });
    let mut versions = HashSet::new();
    for outcome in &outcomes {
        let CasOutcome::Committed(v) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(versions.insert(*v), "version {v} given twice");
    }
    assert_eq!(store.len(), n as usize);
    for i in (0..n).step_by(97) {
        let key = format!("run/task-{i}");
        assert_eq!(store.get_now(&key).map(|v| v.value), Some(i));
        assert!(!store.create_now(key, 0).is_committed());
    }
    assert_eq!(store.conflicts(), u64::from(n).div_ceil(97));
}

/// Threads racing batches over the same keys: each key is created once, by exactly one item,
/// whose value the store holds; every other item saw that value.
#[test]
fn racing_batches_create_each_key_once() {
    let store = Arc::new(MemoryStore::new());
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut won = Vec::new();
                for round in 0..50u32 {
                    let items: Vec<_> = (0..40u32)
                        .map(|j| {
                            (
                                format!("k{}", (round * 7 + j * (t + 1)) % 300),
                                t * 1_000_000 + round * 1000 + j,
                            )
                        })
                        .collect();
                    let mut outcomes = Vec::new();
                    store.create_many_now(items.clone(), |o| outcomes.push(o));
                    assert_eq!(outcomes.len(), items.len());
                    for ((key, value), outcome) in items.into_iter().zip(outcomes) {
                        match outcome {
                            CasOutcome::Committed(_) => won.push((key, value)),
                            CasOutcome::Conflict { current } => {
                                let held = current.expect("a refused create saw the held value");
                                assert_eq!(store.get_now(&key).map(|v| v.value), Some(held.value));
                            }
                        }
                    }
                }
                won
            })
        })
        .collect();
    let mut winners = std::collections::HashMap::new();
    for thread in threads {
        for (key, value) in thread.join().expect("no thread panicked") {
            assert!(
                winners.insert(key.clone(), value).is_none(),
                "{key} created twice"
            );
        }
    }
    assert_eq!(winners.len(), store.len());
    for (key, value) in winners {
        assert_eq!(store.get_now(&key).map(|v| v.value), Some(value));
    }
}
