//! Leases and watches on a real etcd member (spawned by the test): a leased key lives while its
//! lease is renewed, is deleted when renewals stop, and a watch sees both, in order; a key
//! created under a lease renewed in the background ([`quorate_state::EtcdLease`]) stays past its
//! time to live, goes once the lease is dropped, and a second create of it loses to the first.

#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;

use std::time::{Duration, Instant};

use etcd_cluster::EtcdCluster;
use quorate_state::{CasOutcome, Etcd, KeyChange, Store};

#[test]
fn a_leased_key_lives_while_renewed_and_a_watch_sees_it_expire_and_come_back() {
    let Some(cluster) = EtcdCluster::start_in_memory(1) else {
        return;
    };
    let etcd = Etcd::connect_blocking(&cluster.url("lease")).expect("connected");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let ttl = Duration::from_millis(1000);
        let id = etcd
            .put_leased("workers/r/w1", b"w1".to_vec(), ttl)
            .await
            .unwrap();
        let (present, mut changes) = etcd.watch_keys("workers/r").await.unwrap();
        assert_eq!(present, vec!["w1".to_string()]);
        // Renewed every third of the TTL for three TTLs: still there, nothing changed.
        let started = Instant::now();
        while started.elapsed() < 3 * ttl {
            tokio::time::sleep(ttl / 3).await;
            assert!(etcd.keep_alive(id).await.unwrap());
        }
        assert!(changes.try_recv().is_err());
        // Not renewed: deleted within the TTL and etcd's expiry check.
        let stopped = Instant::now();
        let change = tokio::time::timeout(Duration::from_secs(5), changes.recv())
            .await
            .expect("an expiry within 5 s");
        assert_eq!(change, Some(KeyChange::Deleted("w1".into())));
        assert!(stopped.elapsed() >= ttl / 2, "{:?}", stopped.elapsed());
        assert!(!etcd.keep_alive(id).await.unwrap());
        // A new lease writes the key again.
        let again = etcd
            .put_leased("workers/r/w1", b"w1".to_vec(), ttl)
            .await
            .unwrap();
        let change = tokio::time::timeout(Duration::from_secs(5), changes.recv())
            .await
            .expect("a put");
        assert_eq!(change, Some(KeyChange::Put("w1".into())));
        etcd.revoke(again).await.unwrap();
        let change = tokio::time::timeout(Duration::from_secs(5), changes.recv())
            .await
            .expect("a delete");
        assert_eq!(change, Some(KeyChange::Deleted("w1".into())));
    });
}

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
