//! [`EtcdLease`]: a process's liveness on the cluster. Keys written under a lease
//! ([`EtcdStore::create_leased`](super::EtcdStore::create_leased)) are deleted by etcd when the
//! lease expires, that is when its holder stopped renewing it for its time to live (the process
//! died, or lost the cluster for that long). etcd itself decides the expiry (its leader's clock),
//! so no two processes' clocks are ever compared.

use std::fmt;
use std::time::Duration;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{failed, Etcd};
use crate::StoreError;

/// A lease granted by the cluster and renewed in the background (on the connection's runtime)
/// every third of its time to live, until it is dropped or found expired ([`Self::is_lost`]).
/// A renewal that fails (the member it went to died) is tried again on a new stream at once;
/// only the cluster saying the lease is gone makes it lost. Dropping it stops the renewals
/// without revoking: its keys then go when the time to live runs out.
pub struct EtcdLease {
    id: i64,
    ttl: Duration,
    lost: watch::Receiver<bool>,
    renewals: JoinHandle<()>,
}

impl fmt::Debug for EtcdLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLease")
            .field("id", &self.id)
            .field("ttl", &self.ttl)
            .field("lost", &*self.lost.borrow())
            .finish()
    }
}

impl Drop for EtcdLease {
    fn drop(&mut self) {
        self.renewals.abort();
    }
}

impl EtcdLease {
    /// The lease's id (what keys are attached to).
    #[must_use]
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Its time to live, in whole seconds as etcd grants it.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// `true` once the cluster said the lease is gone (expired or revoked): every key attached
    /// to it was deleted.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// A receiver that changes to `true` when the lease is lost (for a `select!`).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }
}

impl Etcd {
    /// Grants a lease of `ttl` (rounded up to whole seconds, at least one) and keeps it alive
    /// in the background.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] (or `Denied`): the cluster did not grant it.
    pub async fn grant_lease(&self, ttl: Duration) -> Result<EtcdLease, StoreError> {
        let secs = i64::try_from(ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
        let mut client = self.shared.lease.clone();
        let url = self.shared.url.clone();
        let granted = self
            .shared
            .handle
            .spawn(async move { client.grant(secs, None).await })
            .await
            .map_err(|e| self.unavailable(e))?
            .map_err(|e| failed(&url, e))?;
        let id = granted.id();
        let ttl = Duration::from_secs(u64::try_from(granted.ttl()).unwrap_or(1));
        let (tx, lost) = watch::channel(false);
        let renewals = self
            .shared
            .handle
            .spawn(renew(self.shared.lease.clone(), id, ttl, tx));
        Ok(EtcdLease {
            id,
            ttl,
            lost,
            renewals,
        })
    }
}

/// Renews lease `id` every third of `ttl` until the cluster says it is gone (then `lost` turns
/// `true`).
async fn renew(
    mut client: etcd_client::LeaseClient,
    id: i64,
    ttl: Duration,
    lost: watch::Sender<bool>,
) {
    let every = (ttl / 3).max(Duration::from_millis(100));
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    loop {
        let (keeper, answers) = match &mut stream {
            Some(s) => s,
            None => match client.keep_alive(id).await {
                Ok(s) => stream.insert(s),
                // The first answer on a new stream said the lease is not found.
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => {
                    let _ = lost.send(true);
                    return;
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // An answer that does not come within a third of the time to live counts as a broken
        // stream (a member that stopped answering without closing its connection).
        let answer = tokio::time::timeout(every, async {
            keeper.keep_alive().await?;
            answers.message().await
        })
        .await;
        match answer {
            Ok(Ok(Some(a))) if a.ttl() > 0 => tokio::time::sleep(every).await,
            Ok(Ok(Some(_))) => {
                let _ = lost.send(true);
                return;
            }
            // The stream broke (its member died): open another one, on a live member.
            Ok(Ok(None) | Err(_)) | Err(_) => {
                stream = None;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
