//! Leases and watches: a key that lives only while its holder renews its lease
//! ([`Etcd::put_leased`], [`Etcd::keep_alive`]), and a watch on every key under a prefix
//! ([`Etcd::watch_keys`]). Worker liveness is made of them (docs/distributed.md, "A lost
//! worker"). The names are below the URL's root (`/PREFIX/NAME`), outside the stores' and
//! logs' ranges.

use std::future::Future;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, PutOptions, WatchOptions};
use tokio::sync::mpsc;

use super::{failed, key_text, Etcd};
use crate::StoreError;

/// A change of a watched key, named as below the watched prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyChange {
    /// The key was written (created, or written again).
    Put(String),
    /// The key was deleted (by a client, or because its lease expired).
    Deleted(String),
}

/// `ttl` in etcd's unit: whole seconds, rounded up, at least one.
fn ttl_secs(ttl: Duration) -> i64 {
    let ms = ttl.as_millis().max(1);
    i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
}

impl Etcd {
    /// The full key of `name` (below the URL's root).
    fn rooted(&self, name: &str) -> String {
        format!("{}/{name}", self.shared.root)
    }

    /// Runs `task` on the connection's runtime and awaits it from wherever the caller runs.
    async fn spawn<T: Send + 'static>(
        &self,
        task: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.shared
            .handle
            .spawn(task)
            .await
            .map_err(|e| self.unavailable(e))?
            .map_err(|e| failed(&self.shared.url, e))
    }

    /// Grants a lease of `ttl` (etcd counts whole seconds: rounded up, at least one) and
    /// writes `name` with `value` under it: etcd deletes the key when the lease expires
    /// (unless [`Etcd::keep_alive`] renews it in time). Returns the lease's id.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] (or `Denied`) as any request.
    pub async fn put_leased(
        &self,
        name: &str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> Result<i64, StoreError> {
        let (key, secs) = (self.rooted(name), ttl_secs(ttl));
        let (mut lease, mut kv) = (self.shared.lease.clone(), self.shared.kv.clone());
        self.spawn(async move {
            let id = lease.grant(secs, None).await?.id();
            kv.put(key, value, Some(PutOptions::new().with_lease(id)))
                .await?;
            Ok(id)
        })
        .await
    }

    /// Renews lease `id` once: `true` if it was renewed, `false` if it had expired already (its
    /// keys are gone; grant a new one).
    ///
    /// # Errors
    /// As [`Etcd::put_leased`].
    pub async fn keep_alive(&self, id: i64) -> Result<bool, StoreError> {
        let mut lease = self.shared.lease.clone();
        self.spawn(async move {
            // The client sends the first renewal when it opens the stream, and reads its answer:
            // an expired lease is an error there.
            match lease.keep_alive(id).await {
                Ok(_) => Ok(true),
                Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Revokes lease `id`: its keys are deleted now.
    ///
    /// # Errors
    /// As [`Etcd::put_leased`].
    pub async fn revoke(&self, id: i64) -> Result<(), StoreError> {
        let mut lease = self.shared.lease.clone();
        self.spawn(async move { lease.revoke(id).await.map(|_| ()) })
            .await
    }

    /// The keys below `prefix` (below the URL's root) now, and a receiver of every change to
    /// keys below it from then on, in order. The watch runs on the connection's runtime until
    /// the receiver is dropped; one the cluster breaks (a member lost) is opened again from the
    /// revision after the last change seen, so no change is missed.
    ///
    /// # Errors
    /// As [`Etcd::put_leased`], for the first read and the opening of the watch.
    pub async fn watch_keys(
        &self,
        prefix: &str,
    ) -> Result<(Vec<String>, mpsc::UnboundedReceiver<KeyChange>), StoreError> {
        let full = self.rooted(prefix);
        let mut kv = self.shared.kv.clone();
        let key = full.clone();
        let now = self
            .spawn(async move {
                kv.get(key, Some(GetOptions::new().with_prefix().with_keys_only()))
                    .await
            })
            .await?;
        let revision = now
            .header()
            .map_or(0, etcd_client::ResponseHeader::revision);
        let mut keys = Vec::with_capacity(now.kvs().len());
        for kv in now.kvs() {
            keys.push(below(key_text(kv)?, &full));
        }
        let mut watch = self.shared.watch.clone();
        let key = full.clone();
        let first = self
            .spawn(async move {
                let options = WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision + 1);
                watch.watch(key, Some(options)).await
            })
            .await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut watch = self.shared.watch.clone();
        self.shared.handle.spawn(async move {
            let mut seen = revision;
            let mut stream = Some(first);
            while !tx.is_closed() {
                let Some(open) = stream.as_mut() else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let options = WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(seen + 1);
                    stream = watch.watch(full.clone(), Some(options)).await.ok();
                    continue;
                };
                let answer = tokio::select! {
                    answer = open.message() => answer,
                    () = tx.closed() => return,
                };
                let Ok(Some(answer)) = answer else {
                    stream = None;
                    continue;
                };
                for event in answer.events() {
                    let Some(kv) = event.kv() else { continue };
                    seen = seen.max(kv.mod_revision());
                    let Ok(key) = kv.key_str() else { continue };
                    let name = below(key, &full);
                    let change = match event.event_type() {
                        EventType::Put => KeyChange::Put(name),
                        EventType::Delete => KeyChange::Deleted(name),
                    };
                    if tx.send(change).is_err() {
                        return;
                    }
                }
                if answer.canceled() {
                    stream = None;
                }
            }
        });
        Ok((keys, rx))
    }
}

/// `key` without `prefix` (and the `/` after it).
fn below(key: &str, prefix: &str) -> String {
    let rest = key.strip_prefix(prefix).unwrap_or(key);
    rest.strip_prefix('/').unwrap_or(rest).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ttl_is_whole_seconds_rounded_up() {
        assert_eq!(ttl_secs(Duration::from_millis(1)), 1);
        assert_eq!(ttl_secs(Duration::ZERO), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ttl_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ttl_secs(Duration::from_secs(3)), 3);
    }

    #[test]
    fn a_watched_key_is_named_below_its_prefix() {
        assert_eq!(below("/q/workers/r/w1", "/q/workers/r"), "w1");
        assert_eq!(below("/q/workers/r/w1", "/q/workers/r/"), "w1");
    }
}
