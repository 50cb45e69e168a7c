//! The conformance suite every [`Store`] and [`RunLog`] backend must pass.
//!
//! Each check is a public async function that panics with a message naming the violated rule.
//! [`run_all`] runs them all on a multi-threaded tokio runtime. Checks use their own key
//! prefixes, so one store instance can serve the whole suite.
//!
//! ```
//! use quorate_state::{conformance, MemoryLog, MemoryStore};
//! conformance::run_all(MemoryStore::new, MemoryStore::new, MemoryLog::new);
//! ```

use std::sync::Arc;

use quorate_protocols::{Budget, RunId, TaskId};

use crate::{
    Account, AccountId, BudgetLedger, CasOutcome, DeleteOutcome, LedgerError, RunLog, Seq, Store,
    Versioned,
};

/// Runs every check. `make_counter_store` builds an empty `Store<u64>`, `make_account_store` an
/// empty `Store<Account>`, `make_log` an empty `RunLog<u64>`.
pub fn run_all<S, A, L>(
    make_counter_store: impl Fn() -> S,
    make_account_store: impl Fn() -> A,
    make_log: impl Fn() -> L,
) where
    S: Store<u64> + 'static,
    A: Store<Account> + 'static,
    L: RunLog<u64> + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        cas_semantics(&make_counter_store()).await;
        delete_semantics(&make_counter_store()).await;
        scan_by_prefix(&make_counter_store()).await;
        no_lost_update(Arc::new(make_counter_store()), 8, 250).await;
        log_order(Arc::new(make_log())).await;
        ledger_invariants(Arc::new(make_account_store())).await;
    });
}

fn committed<V: std::fmt::Debug>(outcome: CasOutcome<V>, what: &str) -> quorate_protocols::Version {
    match outcome {
        CasOutcome::Committed(v) => v,
        other => panic!("{what}: expected a commit, got {other:?}"),
    }
}

/// Create-if-absent, update-at-version, and conflicts that return the current value.
pub async fn cas_semantics<S: Store<u64>>(store: &S) {
    let k = "conf/cas/k";
    assert_eq!(store.get(k).await.unwrap(), None, "a fresh key is absent");
    // Updating an absent key with a version conflicts and reports absence.
    let ghost = quorate_protocols::Version::new(12_345);
    assert_eq!(
        store.cas(k, Some(ghost), 1).await.unwrap(),
        CasOutcome::Conflict { current: None },
        "CAS on an absent key with a version must conflict with current = None"
    );
    let v1 = committed(store.cas(k, None, 1).await.unwrap(), "create");
    assert_eq!(
        store.get(k).await.unwrap(),
        Some(Versioned {
            value: 1,
            version: v1
        })
    );
    // Creating again conflicts and returns the winner.
    assert_eq!(
        store.cas(k, None, 2).await.unwrap(),
        CasOutcome::Conflict {
            current: Some(Versioned {
                value: 1,
                version: v1
            })
        },
        "create of an existing key must conflict and return the current value"
    );
    let v2 = committed(store.cas(k, Some(v1), 2).await.unwrap(), "update");
    assert_ne!(v1, v2, "an update must produce a new version");
    // The old version is stale now.
    assert_eq!(
        store.cas(k, Some(v1), 3).await.unwrap(),
        CasOutcome::Conflict {
            current: Some(Versioned {
                value: 2,
                version: v2
            })
        },
        "a stale version must conflict and return the current value"
    );
    assert_eq!(
        store.get(k).await.unwrap().unwrap().value,
        2,
        "a failed CAS changes nothing"
    );
}

/// Delete needs the current version; a recreated key never reuses an old version.
pub async fn delete_semantics<S: Store<u64>>(store: &S) {
    let k = "conf/delete/k";
    let v1 = committed(store.cas(k, None, 1).await.unwrap(), "create");
    let v2 = committed(store.cas(k, Some(v1), 2).await.unwrap(), "update");
    assert_eq!(
        store.delete(k, v1).await.unwrap(),
        DeleteOutcome::Conflict {
            current: Some(Versioned {
                value: 2,
                version: v2
            })
        },
        "delete at a stale version must conflict"
    );
    assert_eq!(store.delete(k, v2).await.unwrap(), DeleteOutcome::Deleted);
    assert_eq!(store.get(k).await.unwrap(), None, "deleted keys are absent");
    assert_eq!(
        store.delete(k, v2).await.unwrap(),
        DeleteOutcome::Conflict { current: None },
        "deleting an absent key conflicts"
    );
    let v3 = committed(store.cas(k, None, 3).await.unwrap(), "recreate");
    assert!(
        v3 != v1 && v3 != v2,
        "a recreated key must not reuse a version (ABA)"
    );
    assert!(
        !store.cas(k, Some(v2), 4).await.unwrap().is_committed(),
        "a version from before the delete must not match the recreated key"
    );
}

/// Prefix scan returns exactly the keys under the prefix, in key order.
pub async fn scan_by_prefix<S: Store<u64>>(store: &S) {
    for (i, k) in [
        "conf/scan/b",
        "conf/scan/a",
        "conf/scan/c/d",
        "conf/scanx",
        "conf/other",
    ]
    .iter()
    .enumerate()
    {
        committed(store.cas(k, None, i as u64).await.unwrap(), "create");
    }
    let keys: Vec<String> = store
        .scan("conf/scan/")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(keys, ["conf/scan/a", "conf/scan/b", "conf/scan/c/d"]);
}

/// `tasks` concurrent tasks each add 1 to one counter `increments` times with CAS-retry; the
/// final value must be exactly `tasks * increments`.
pub async fn no_lost_update<S: Store<u64> + 'static>(
    store: Arc<S>,
    tasks: usize,
    increments: usize,
) {
    let k = "conf/counter";
    let _ = store.cas(k, None, 0).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..increments {
                let mut cur = store.get(k).await.unwrap().expect("counter exists");
                loop {
                    match store
                        .cas(k, Some(cur.version), cur.value + 1)
                        .await
                        .unwrap()
                    {
                        CasOutcome::Committed(_) => break,
                        CasOutcome::Conflict { current } => {
                            cur = current.expect("counter is never deleted");
                        }
                    }
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("increment task panicked");
    }
    let total = store.get(k).await.unwrap().unwrap().value;
    assert_eq!(
        total,
        (tasks * increments) as u64,
        "lost update: CAS let two writers win"
    );
}

/// Appends from concurrent tasks get consecutive sequence numbers; reads return them in order;
/// runs are separate.
pub async fn log_order<L: RunLog<u64> + 'static>(log: Arc<L>) {
    // Fixed ids: a backend's conformance run must not depend on which ids it sees.
    let run = RunId::from_u128(0xc0f0_0001);
    let other = RunId::from_u128(0xc0f0_0002);
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let log = log.clone();
        handles.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..100u64 {
                seqs.push(log.append(run, t * 1000 + i).await.unwrap());
            }
            seqs
        }));
    }
    let _ = log.append(other, 7).await.unwrap();
    let mut seen = Vec::new();
    for h in handles {
        let seqs = h.await.unwrap();
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "one writer's appends are in order"
        );
        seen.extend(seqs);
    }
    seen.sort();
    let expected: Vec<Seq> = (0..400).map(Seq).collect();
    assert_eq!(
        seen, expected,
        "sequence numbers are 0..n without gaps or repeats"
    );
    let entries = log.read(run, Seq(0), usize::MAX).await.unwrap();
    assert_eq!(entries.len(), 400);
    assert!(entries
        .iter()
        .enumerate()
        .all(|(i, (s, _))| s.0 == i as u64));
    // Each writer's entries appear in the order it appended them.
    for t in 0..4u64 {
        let mine: Vec<u64> = entries
            .iter()
            .map(|(_, e)| *e)
            .filter(|e| e / 1000 == t)
            .collect();
        assert_eq!(mine, (0..100).map(|i| t * 1000 + i).collect::<Vec<_>>());
    }
    let tail = log.read(run, Seq(398), 10).await.unwrap();
    assert_eq!(
        tail.iter().map(|(s, _)| s.0).collect::<Vec<_>>(),
        [398, 399]
    );
    assert_eq!(
        log.read(other, Seq(0), 10).await.unwrap(),
        vec![(Seq(0), 7)]
    );
}

/// Concurrent allocations and reservations against one root never exceed it, and closing every
/// child returns exactly what it did not spend.
pub async fn ledger_invariants<S: Store<Account> + 'static>(store: Arc<S>) {
    let run = RunId::from_u128(0xc0f0_0003);
    let ledger = Arc::new(BudgetLedger::new(store, run));
    ledger
        .open_root(
            Budget::new(100, 50, 10_000, 1_000),
            Budget::new(10, 0, 0, 0),
        )
        .await
        .unwrap();
    let mut handles = Vec::new();
    for t in 0..40u128 {
        let ledger = ledger.clone();
        handles.push(tokio::spawn(async move {
            let child = AccountId::Task(TaskId::from_u128(t + 1));
            match ledger
                .allocate(AccountId::Root, child, Budget::new(5, 3, 500, 50))
                .await
            {
                Ok(()) => {
                    let r = ledger
                        .reserve(child, Budget::new(2, 1, 200, 20))
                        .await
                        .unwrap();
                    ledger
                        .settle(child, r, Budget::new(1, 1, 100, 10))
                        .await
                        .unwrap();
                    ledger.close(child).await.unwrap();
                    true
                }
                Err(crate::BudgetLedgerError::Refused(LedgerError::Insufficient { .. })) => false,
                Err(e) => panic!("unexpected ledger error: {e}"),
            }
        }));
    }
    let mut granted = 0u64;
    for h in handles {
        granted += u64::from(h.await.unwrap());
    }
    let root = ledger.account(AccountId::Root).await.unwrap();
    assert!(root.invariant_holds(), "root invariant broken: {root:?}");
    assert!(root.children.is_empty(), "every child was closed");
    // At least the 16 slices that fit at once (50 tool calls / 3) must have been granted.
    assert!(granted >= 16, "granted only {granted} slices");
    assert_eq!(
        root.children_spent,
        Budget::new(granted, granted, 100 * granted, 10 * granted)
    );
    assert_eq!(
        root.returned,
        Budget::new(4 * granted, 2 * granted, 400 * granted, 40 * granted)
    );
}
