//! The networked backend: [`EtcdStore`] and [`EtcdLog`] on an etcd cluster ([`Etcd`]).
//!
//! # Semantics
//!
//! * **CAS** is one etcd transaction: *if* the key's `mod_revision` equals the expected version
//!   (and the key exists) *then* put the value, *else* get the key. etcd evaluates the
//!   comparison inside Raft, so a CAS is linearizable across every client of the cluster, and a
//!   conflict returns the current value read in the same transaction (one round trip).
//!   **Create** (`expected = None`) compares `create_revision == 0`, etcd's "the key is absent".
//! * **Versions** are etcd revisions: a key's [`Version`](quorate_protocols::Version) is its
//!   `mod_revision`, the cluster-wide revision of the transaction that last wrote it. Revisions
//!   only grow (across restarts, leader changes and compaction), so a key deleted and created
//!   again never gets a version it had before (no ABA). They are opaque to callers all the same:
//!   several keys written by one transaction share its revision, and the numbers are not dense
//!   per key. etcd never hands out revision 0, and a CAS or delete expecting a version also
//!   requires the key to exist, so no version matches an absent key.
//! * **Reads** (`get`, `scan`, `read`) are linearizable (etcd's default read, confirmed by the
//!   leader), never served stale by a follower. A scan or read longer than one page
//!   is read page by page at the revision of its first page: one consistent snapshot.
//! * **Errors**: an unreachable cluster, a lost leader or a timed-out request is
//!   [`StoreError::Unavailable`](crate::StoreError::Unavailable). A write that failed so may
//!   have been applied (outcome unknown): re-read before acting on it. The one failure retried
//!   inside the store is a request that was never sent (the TCP connection to the member the
//!   client picked was refused, as when that member is down): it goes again, to the next
//!   member, up to twice per endpoint of the URL.
//!
//! # Key layout
//!
//! Everything lives under the root `/PREFIX` of the [`EtcdUrl`](crate::EtcdUrl) (default
//! `/quorate`):
//!
//! ```text
//! /PREFIX/kv/STORE/KEY                     a Store's value at KEY (CBOR)
//! /PREFIX/log/LOG/RUN/SEQ                  a RunLog entry; SEQ is 20 decimal digits,
//!                                          so key order is sequence order (CBOR)
//! ```
//!
//! A store or log name may contain `/`, so one name can hold a worker's own keys
//! (`claims/WORKER`, `actions/WORKER`): each such name is one key range, `/PREFIX/kv/NAME/`,
//! which is what an etcd role grants (read or readwrite on a prefix). The security issue's
//! least-privilege roles map onto this: a worker's role gets readwrite on its own names'
//! prefixes and read on what its tasks need; the supervisor's gets results, budget accounts and
//! `/PREFIX/log/`. Names are used as given, so `results` and `results2` are different ranges
//! (every range ends in `/`).
//!
//! # Runtime
//!
//! The trait methods return futures, but the etcd client is tied to the tokio runtime it was
//! created on (its channel runs background tasks there). An [`Etcd`] therefore owns a small
//! dedicated multi-threaded tokio runtime ([`EtcdOptions::threads`] threads, named
//! `quorate-etcd`): every request is spawned onto it and the caller's future only awaits the
//! answer. A store can so be used from any executor (an actix arbiter, a test's
//! current-thread runtime, another tokio runtime) without blocking that executor's thread on
//! network I/O, and the connection outlives the runtime it was made from. Only
//! [`Etcd::connect_blocking`] blocks its caller (until the client is built).
//!
//! ```no_run
//! # async fn demo() -> Result<(), quorate_state::StoreError> {
//! use quorate_state::{CasOutcome, Etcd, EtcdUrl, Store};
//! let url: EtcdUrl = "etcd://127.0.0.1:2379/demo".parse().expect("a valid URL");
//! let etcd = Etcd::connect(&url).await?;
//! let store = etcd.store::<u32>("counters");
//! let CasOutcome::Committed(v1) = store.cas("k", None, 1).await? else { unreachable!() };
//! assert!(store.cas("k", Some(v1), 2).await?.is_committed());
//! # Ok(())
//! # }
//! ```

mod access;
mod guarded;
mod held_lease;
mod lease;
mod log;
mod secure;
mod store;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{AuthClient, Client, ConnectOptions, GetOptions, KvClient, LeaseClient};

pub use access::{
    grants, EtcdAccount, EtcdRole, Grant, PEER_STORES, SUPERVISOR_STORES, WORKER_READS,
    WORKER_SHARED_WRITES,
};
pub use guarded::{Guard, Guarded};
pub use held_lease::EtcdLease;
pub use lease::KeyChange;
pub use log::EtcdLog;
pub use secure::{EtcdConnectError, EtcdSecurity, EtcdTls, Secret};
pub use store::{AtomicOutcome, EtcdStore};

use crate::{EtcdUrl, StoreError};

/// Most operations one etcd transaction may carry (etcd's `--max-txn-ops` default is 128);
/// larger batches are split.
const MAX_TXN_OPS: usize = 100;
/// Most value bytes one transaction carries (etcd's `--max-request-bytes` default is 1.5 MiB).
const MAX_TXN_BYTES: usize = 1 << 20;
/// gRPC status codes (fixed by the gRPC specification) of a refused caller.
const GRPC_PERMISSION_DENIED: i32 = 7;
const GRPC_UNAUTHENTICATED: i32 = 16;
/// Keys per page of a scan or a log read.
const PAGE: i64 = 1000;

/// How an [`Etcd`] connection is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// A request not answered within this time fails with `StoreError::Unavailable`.
    pub request_timeout: Duration,
    /// Connecting to a member gives up after this time (the next request tries again).
    pub connect_timeout: Duration,
    /// Worker threads of the connection's own tokio runtime.
    pub threads: usize,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            threads: 2,
        }
    }
}

/// A connection to an etcd cluster: the stores and logs made from it share its client and its
/// runtime (see the module documentation).
///
/// Cloning is cheap (a shared handle). The runtime stops when the last clone and the last
/// handle made from it are dropped (without waiting: a request still in flight then is
/// abandoned, with the outcome-unknown rule of any lost request).
#[derive(Clone)]
pub struct Etcd {
    shared: Arc<Shared>,
}

struct Shared {
    kv: KvClient,
    /// Users, roles and auth (used by [`Etcd::provision`]).
    auth: AuthClient,
    /// Leases (used by [`Etcd::put_leased`], [`Etcd::keep_alive`] and [`Etcd::grant_lease`]).
    lease: LeaseClient,
    /// Watches (used by [`Etcd::watch_keys`]).
    watch: etcd_client::WatchClient,
    /// `Some` until drop.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    url: EtcdUrl,
    root: String,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Dropping a runtime blocks; this drop may run inside an async task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl fmt::Debug for Etcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("url", &self.shared.url.to_string())
            .finish()
    }
}

fn unavailable(url: &EtcdUrl, e: impl fmt::Display) -> StoreError {
    StoreError::Unavailable {
        reason: format!("etcd at {}: {e}", url.endpoints().join(",")),
    }
}

impl Etcd {
    /// Connects to the cluster at `url` with the default options. The connection is lazy: an
    /// unreachable cluster shows at the first request, not here.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]: the runtime could not be started or the client refused the
    /// endpoints.
    pub async fn connect(url: &EtcdUrl) -> Result<Self, StoreError> {
        Self::connect_with(url, EtcdOptions::default()).await
    }

    /// Connects to the cluster at `url`.
    ///
    /// # Errors
    /// As [`Etcd::connect`].
    pub async fn connect_with(url: &EtcdUrl, options: EtcdOptions) -> Result<Self, StoreError> {
        let endpoints = url
            .endpoints()
            .iter()
            .map(|e| format!("http://{e}"))
            .collect();
        Self::open(url, options, endpoints, ConnectOptions::new()).await
    }

    /// Starts the connection's runtime and builds the client on it: `endpoints` are full URLs
    /// (`http://` or `https://`), `connect` carries TLS and credentials if any.
    async fn open(
        url: &EtcdUrl,
        options: EtcdOptions,
        endpoints: Vec<String>,
        connect: ConnectOptions,
    ) -> Result<Self, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads.max(1))
            .thread_name("quorate-etcd")
            .enable_all()
            .build()
            .map_err(|e| unavailable(url, format!("could not start its runtime: {e}")))?;
        let handle = runtime.handle().clone();
        let connect = connect
            .with_timeout(options.request_timeout)
            .with_connect_timeout(options.connect_timeout);
        let connected = handle
            .spawn(async move { Client::connect(endpoints, Some(connect)).await })
            .await
            .map_err(|e| unavailable(url, e))
            .and_then(|done| done.map_err(|e| failed(url, e)));
        let client = match connected {
            Ok(client) => client,
            Err(e) => {
                // Dropping a runtime blocks, which panics inside an async caller.
                runtime.shutdown_background();
                return Err(e);
            }
        };
        Ok(Self {
            shared: Arc::new(Shared {
                kv: client.kv_client(),
                auth: client.auth_client(),
                lease: client.lease_client(),
                watch: client.watch_client(),
                runtime: Some(runtime),
                handle,
                url: url.clone(),
                root: url.root(),
            }),
        })
    }

    /// [`Etcd::connect`] for synchronous callers: blocks the calling thread until the client is
    /// built (no request is made). Works inside or outside an async runtime.
    ///
    /// # Errors
    /// As [`Etcd::connect`].
    pub fn connect_blocking(url: &EtcdUrl) -> Result<Self, StoreError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let url2 = url.clone();
        // A thread of its own: `block_on` would panic on a thread that already runs a runtime.
        std::thread::Builder::new()
            .name("quorate-etcd-connect".into())
            .spawn(move || {
                let done = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| unavailable(&url2, e))
                    .and_then(|rt| rt.block_on(Self::connect(&url2)));
                let _ = tx.send(done);
            })
            .map_err(|e| unavailable(url, e))?;
        rx.recv()
            .map_err(|_| unavailable(url, "the connecting thread stopped"))?
    }

    /// The address this connection was made to.
    #[must_use]
    pub fn url(&self) -> &EtcdUrl {
        &self.shared.url
    }

    /// The [`Store`](crate::Store) named `name`: the keys under `/PREFIX/kv/NAME/`. Values of
    /// one store must all be of type `V`.
    #[must_use]
    pub fn store<V>(&self, name: &str) -> EtcdStore<V> {
        EtcdStore::new(self.clone(), format!("{}/kv/{name}/", self.shared.root))
    }

    /// The [`RunLog`](crate::RunLog) named `name`: the keys under `/PREFIX/log/NAME/`. Entries
    /// of one log must all be of type `E`.
    #[must_use]
    pub fn log<E>(&self, name: &str) -> EtcdLog<E> {
        EtcdLog::new(self.clone(), format!("{}/log/{name}/", self.shared.root))
    }

    /// Runs `request` on the connection's runtime with its own clone of the KV client and
    /// awaits its answer from wherever the caller runs. A request that never reached a member
    /// (the connection to the member the client picked was refused: a member is down) is sent
    /// again, up to twice per endpoint, so a cluster with a member down serves every request;
    /// any other failure is returned at once.
    async fn call<T, F>(
        &self,
        request: impl Fn(KvClient) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
        T: Send + 'static,
    {
        let kv = self.shared.kv.clone();
        let endpoints = self.shared.url.endpoints().len();
        let task = async move {
            let mut attempt = 0;
            loop {
                match request(kv.clone()).await {
                    Err(e) if not_sent(&e) && attempt < 2 * endpoints => {
                        attempt += 1;
                        if attempt % endpoints == 0 {
                            // Every endpoint was tried: give a restarting member a moment.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                    done => return done,
                }
            }
        };
        self.shared
            .handle
            .spawn(task)
            .await
            .map_err(|e| self.unavailable(e))?
            .map_err(|e| failed(&self.shared.url, e))
    }

    fn unavailable(&self, e: impl fmt::Display) -> StoreError {
        unavailable(&self.shared.url, e)
    }

    /// The keys from `start` up to (not including) `end`, at most `limit` of them, as of one
    /// revision (the first page's, so later pages see the same snapshot), read
    /// [`PAGE`] keys at a time.
    async fn range(
        &self,
        mut start: Vec<u8>,
        end: Vec<u8>,
        limit: usize,
    ) -> Result<Vec<etcd_client::KeyValue>, StoreError> {
        let mut out = Vec::new();
        let mut at_revision = 0;
        while out.len() < limit {
            let page = PAGE.min(i64::try_from(limit - out.len()).unwrap_or(PAGE));
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(page);
            if at_revision > 0 {
                options = options.with_revision(at_revision);
            }
            let from = start.clone();
            let mut response = self
                .call(move |mut kv| {
                    let (from, options) = (from.clone(), options.clone());
                    async move { kv.get(from, Some(options)).await }
                })
                .await?;
            if at_revision == 0 {
                at_revision = response
                    .header()
                    .map_or(0, etcd_client::ResponseHeader::revision);
            }
            let more = response.more();
            let kvs = response.take_kvs();
            let next = kvs.last().filter(|_| more).map(|last| {
                let mut key = last.key().to_vec();
                key.push(0);
                key
            });
            out.extend(kvs);
            match next {
                Some(key) => start = key,
                None => break,
            }
        }
        Ok(out)
    }
}

/// An etcd error as a [`StoreError`]: [`StoreError::Denied`] when etcd refused the caller's
/// credentials or permissions, [`StoreError::Unavailable`] otherwise.
fn failed(url: &EtcdUrl, e: etcd_client::Error) -> StoreError {
    if let etcd_client::Error::GRpcStatus(status) = &e {
        let code = i32::from(status.code());
        if code == GRPC_PERMISSION_DENIED
            || code == GRPC_UNAUTHENTICATED
            || status.message().contains("authentication failed")
        {
            return StoreError::Denied {
                reason: format!(
                    "etcd at {}: {}",
                    url.endpoints().join(","),
                    status.message()
                ),
            };
        }
    }
    unavailable(url, e)
}

/// `true` if `e` says the request was never sent: the client could not open a TCP connection to
/// the member it picked. Sending it again cannot apply it twice, a write included.
fn not_sent(e: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(status) = e else {
        return false;
    };
    if status.message().starts_with("tcp connect error") {
        return true;
    }
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: the range runs to the end of the key space.
    vec![0]
}

/// A key read back from etcd, as text (keys are written from `&str`).
fn key_text(kv: &etcd_client::KeyValue) -> Result<&str, StoreError> {
    kv.key_str().map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: format!("the key is not UTF-8: {e}"),
    })
}

/// A revision as a [`Version`](quorate_protocols::Version) (etcd revisions are positive).
fn version(revision: i64) -> quorate_protocols::Version {
    quorate_protocols::Version::new(u64::try_from(revision).unwrap_or(0))
}

/// A [`Version`](quorate_protocols::Version) as the revision a comparison expects (-1, which
/// never matches, for a version no etcd revision can be).
fn revision(version: quorate_protocols::Version) -> i64 {
    i64::try_from(version.raw()).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key_after_the_prefix() {
        assert_eq!(prefix_end("/q/kv/a/"), b"/q/kv/a0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }

    #[test]
    fn versions_and_revisions_convert_both_ways() {
        assert_eq!(version(42).raw(), 42);
        assert_eq!(revision(version(42)), 42);
        assert_eq!(revision(quorate_protocols::Version::new(u64::MAX)), -1);
    }
}
