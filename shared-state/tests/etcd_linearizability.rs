//! Linearizability of `EtcdStore` on a three-member etcd cluster while members are SIGKILLed
//! and restarted on their data directories in a loop: concurrent clients record their
//! histories (a request that fails is an operation whose reply was lost: it may or may not
//! have taken effect), and the WGL checker of `quorate_state::linearizability` must order every
//! key's history.

#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use etcd_cluster::EtcdCluster;
use quorate_protocols::Version;
use quorate_state::linearizability::{
    check_histories, KeyHistory, Operation, RegisterOp, RegisterOperation, RegisterRet,
};
use quorate_state::{CasOutcome, DeleteOutcome, Etcd, EtcdOptions, EtcdStore, Store};

const CLIENTS: usize = 4;
const OPS: usize = 150;
const KEYS: usize = 3;

/// One operation on `store`; `None` if the request failed (outcome unknown).
async fn apply(
    store: &EtcdStore<u64>,
    key: &str,
    op: &RegisterOp<u64>,
) -> Option<RegisterRet<u64>> {
    let pair = |c: Option<quorate_state::Versioned<u64>>| c.map(|c| (c.value, c.version));
    match op {
        RegisterOp::Get => store
            .get(key)
            .await
            .ok()
            .map(|c| RegisterRet::Value(pair(c))),
        RegisterOp::Cas { expected, value } => {
            match store.cas(key, *expected, *value).await.ok()? {
                CasOutcome::Committed(v) => Some(RegisterRet::Committed(v)),
                CasOutcome::Conflict { current } => Some(RegisterRet::Conflict(pair(current))),
            }
        }
        RegisterOp::Delete { expected } => match store.delete(key, *expected).await.ok()? {
            DeleteOutcome::Deleted => Some(RegisterRet::Deleted),
            DeleteOutcome::Conflict { current } => Some(RegisterRet::Conflict(pair(current))),
        },
    }
}

#[test]
fn etcd_store_is_linearizable_while_members_are_killed_and_restarted() {
    let Some(mut cluster) = EtcdCluster::start_in_memory(3) else {
        return;
    };
    let options = EtcdOptions {
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_millis(200),
        ..EtcdOptions::default()
    };
    let url = cluster.url("lin");
    let etcd = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(Etcd::connect_with(&url, options))
        .expect("connected");
    let store = etcd.store::<u64>("registers");
    let clock = AtomicU64::new(0);
    let histories: Vec<Mutex<Vec<RegisterOperation>>> =
        (0..KEYS).map(|_| Mutex::new(Vec::new())).collect();
    let names: Vec<String> = (0..KEYS).map(|k| format!("k{k}")).collect();
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let (failed, committed) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut kills = 0;
    std::thread::scope(|s| {
        for client in 0..CLIENTS {
            let (store, clock, histories, names, done) =
                (&store, &clock, &histories, &names, &done);
            let (failed, committed) = (&failed, &committed);
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let mut x = (client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut seen: Vec<Option<Version>> = vec![None; KEYS];
                for i in 0..OPS {
                    let k = (next() % KEYS as u64) as usize;
                    let value = (client * 1_000_000 + i) as u64;
                    let op = match next() % 20 {
                        0..=7 => RegisterOp::Get,
                        8..=16 => RegisterOp::Cas {
                            expected: seen[k],
                            value,
                        },
                        _ => match seen[k] {
                            Some(expected) => RegisterOp::Delete { expected },
                            None => RegisterOp::Get,
                        },
                    };
                    let call = clock.fetch_add(1, Ordering::SeqCst);
                    let ret = rt.block_on(apply(store, &names[k], &op));
                    let at = clock.fetch_add(1, Ordering::SeqCst);
                    match &ret {
                        None => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(r) => {
                            if matches!(r, RegisterRet::Committed(_)) {
                                committed.fetch_add(1, Ordering::Relaxed);
                            }
                            seen[k] = match r {
                                RegisterRet::Value(v) | RegisterRet::Conflict(v) => {
                                    v.map(|(_, ver)| ver)
                                }
                                RegisterRet::Committed(v) => Some(*v),
                                RegisterRet::Deleted => None,
                            };
                        }
                    }
                    histories[k].lock().unwrap().push(Operation {
                        client,
                        op,
                        call,
                        ret: ret.map(|r| (at, r)),
                    });
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        // The killer: SIGKILL one member at a time (round robin, so the leader too), restart it
        // on its data directory, wait for its health, and go on until the clients are done.
        let mut victim = 0;
        while done.load(Ordering::SeqCst) < CLIENTS && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(60));
            cluster.kill(victim);
            kills += 1;
            std::thread::sleep(Duration::from_millis(120));
            cluster.restart(victim);
            cluster.wait_healthy(victim);
            victim = (victim + 1) % cluster.len();
        }
    });
    let histories: Vec<KeyHistory> = names
        .into_iter()
        .zip(histories)
        .map(|(n, h)| (n, h.into_inner().unwrap()))
        .collect();
    let ops: usize = histories.iter().map(|(_, h)| h.len()).sum();
    let (failed, committed) = (failed.into_inner(), committed.into_inner());
    eprintln!("{ops} operations, {committed} committed CAS, {failed} failed requests, {kills} member kills");
    assert_eq!(ops, CLIENTS * OPS);
    assert!(kills >= 2, "the run must span member kills (had {kills})");
    assert!(
        committed >= 50,
        "too few writes went through to check anything ({committed})"
    );
    if let Err((key, e)) = check_histories(&histories) {
        panic!("key {key}: {e}");
    }
}
