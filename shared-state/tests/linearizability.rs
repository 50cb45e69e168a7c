//! Linearizability of the versioned CAS store under concurrent clients, with lost replies,
//! checked by the WGL search in `quorate_state::linearizability`; a check-then-act store must
//! be flagged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use quorate_protocols::Version;
use quorate_state::linearizability::{check_histories, stress, RegisterRet, RegisterStore};
use quorate_state::MemoryStore;

#[test]
fn memory_store_is_linearizable_with_lost_replies() {
    for seed in 0..20 {
        let store = MemoryStore::<u64>::new();
        let histories = stress(&store, 4, 150, 3, 50, seed);
        let ops: usize = histories.iter().map(|(_, h)| h.len()).sum();
        assert_eq!(ops, 600);
        if let Err((key, e)) = check_histories(&histories) {
            panic!("seed {seed}: key {key}: {e}");
        }
    }
}

/// Reads, lets go of the lock, then writes: two writers that read the same version both win.
#[derive(Default)]
struct CheckThenAct {
    map: Mutex<HashMap<String, (u64, Version)>>,
    revision: AtomicU64,
}

impl CheckThenAct {
    fn read(&self, key: &str) -> Option<(u64, Version)> {
        self.map.lock().unwrap().get(key).copied()
    }
}

impl RegisterStore for CheckThenAct {
    fn get(&self, key: &str) -> RegisterRet<u64> {
        RegisterRet::Value(self.read(key))
    }

    fn cas(&self, key: &str, expected: Option<Version>, value: u64) -> RegisterRet<u64> {
        let current = self.read(key);
        if current.map(|c| c.1) != expected {
            return RegisterRet::Conflict(current);
        }
        std::thread::yield_now();
        let version = Version::new(self.revision.fetch_add(1, Ordering::SeqCst) + 1);
        self.map
            .lock()
            .unwrap()
            .insert(key.to_owned(), (value, version));
        RegisterRet::Committed(version)
    }

    fn delete(&self, key: &str, expected: Version) -> RegisterRet<u64> {
        let current = self.read(key);
        if current.map(|c| c.1) != Some(expected) {
            return RegisterRet::Conflict(current);
        }
        std::thread::yield_now();
        self.map.lock().unwrap().remove(key);
        RegisterRet::Deleted
    }
}

#[test]
fn a_check_then_act_store_is_flagged() {
    let flagged = (0..50).any(|seed| {
        let store = CheckThenAct::default();
        check_histories(&stress(&store, 4, 150, 2, 50, seed)).is_err()
    });
    assert!(flagged, "the broken store must be caught within 50 seeds");
}
