//! Leases on a real etcd member (spawned on loopback): a key created under a lease stays while
//! the lease is renewed, past its time to live, and is deleted by etcd once the holder stops
//! renewing it; a second create of the key loses to the first.

#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;

use std::time::{Duration, Instant};

use etcd_cluster::EtcdCluster;
use quorate_state::{CasOutcome, Etcd, Store};

#[test]
fn a_leased_key_lives_while_renewed_and_goes_when_its_lease_expires() {
    let Some(cluster) = EtcdCluster::start_in_memory(1) else {
        return;
    };
    let etcd = Etcd::connect_blocking(&cluster.url("lease")).expect("connected");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let store = etcd.store::<u32>("claims");
        let lease = etcd
            .grant_lease(Duration::from_secs(1))
            .await
            .expect("granted");
        assert_eq!(lease.ttl(), Duration::from_secs(1));
        let first = store.create_leased("k", 1, &lease).await.expect("created");
        assert!(first.is_committed());
        let CasOutcome::Conflict { current } = store.create_leased("k", 2, &lease).await.unwrap()
        else {
            panic!("a second create must lose");
        };
        assert_eq!(current.map(|c| c.value), Some(1));
        // Renewed: still there after twice its time to live.
        tokio::time::sleep(Duration::from_millis(2200)).await;
        assert!(!lease.is_lost());
        assert_eq!(store.get("k").await.unwrap().map(|v| v.value), Some(1));
        // Not renewed any more: etcd deletes the key once the time to live ran out.
        drop(lease);
        let dropped = Instant::now();
        while store.get("k").await.unwrap().is_some() {
            assert!(
                dropped.elapsed() < Duration::from_secs(5),
                "the key outlived its lease"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let gone_after = dropped.elapsed();
        assert!(gone_after >= Duration::from_millis(500), "{gone_after:?}");
        eprintln!("the leased key went {gone_after:?} after the renewals stopped");
    });
}
