//! # quorate-state
//!
//! Shared state for quorate runs.
//!
//! * [`Store`]: versioned compare-and-swap over string keys. No blind writes: a writer names the
//!   version it read, and a conflict hands back the current value to merge into.
//! * [`RunLog`]: an append-only log per run, from which a run can be explained and resumed.
//! * [`MemoryStore`] and [`MemoryLog`]: the embedded default backend (dashmap).
//! * `RedbStore` and `RedbLog` on a `RedbDb` (feature `redb`): the durable backend, one
//!   crash-safe file holding many runs (docs/durable.md).
//! * `EtcdStore` and `EtcdLog` on an `Etcd` connection (feature `etcd`): the networked backend,
//!   an etcd cluster as the store of record for several machines (docs/distributed.md); its
//!   address is an [`EtcdUrl`].
//! * Ledgers built only on CAS, so they work on any backend: [`BudgetLedger`] (hierarchical
//!   budget accounts: reserve before spending, settle after, return what is unused) and
//!   [`IdempotencyRegistry`] (one `ActionId`, one set of parameters, one effect: the
//!   store-backed form of a worker's action book, whose [`ActionRecord`]s it keeps, read back
//!   per task for a worker that takes the task over).
//!   Envelopes are deduplicated by the cores themselves (the supervisor keeps each task's dedupe
//!   keys), not by a ledger.
//! * [`update`]: the one CAS-retry loop (read, pure update, CAS, retry from the value that won)
//!   under the ledgers and `quorate-memory`; it reports the committed version and the conflicts
//!   lost ([`Updated`]).
//! * [`conformance`]: the test suite every backend must pass.

#![forbid(unsafe_code)]

#[cfg(any(feature = "redb", feature = "etcd"))]
mod codec;
pub mod conformance;
#[cfg(feature = "redb")]
mod durable;
#[cfg(feature = "etcd")]
mod etcd;
mod etcd_url;
mod ledger;
pub mod linearizability;
mod log;
mod memory;
mod packed;
mod precondition;
mod queue;
mod retry;
mod store;

use std::future::Future;
use std::sync::Arc;

#[cfg(feature = "redb")]
pub use durable::{Commit, RedbDb, RedbLog, RedbOptions, RedbStore};
#[cfg(feature = "etcd")]
pub use etcd::{
    grants, AtomicOutcome, Etcd, EtcdAccount, EtcdConnectError, EtcdLease, EtcdLog, EtcdOptions,
    EtcdRole, EtcdSecurity, EtcdStore, EtcdTls, Grant, Guard, Guarded, KeyChange, Secret,
    PEER_STORES, SUPERVISOR_STORES, WORKER_READS, WORKER_SHARED_WRITES,
};
pub use etcd_url::{EtcdUrl, EtcdUrlError, DEFAULT_ETCD_PREFIX};
pub use ledger::{
    Account, AccountId, AccountMap, ActionRecord, Begin, BudgetLedger, BudgetLedgerError,
    IdempotencyError, IdempotencyRegistry, LedgerError, ReservationId, Settlement,
};
pub use log::{RunLog, Seq};
pub use memory::{MemoryLog, MemoryStore};
pub use packed::{put_varint, take_varint, Pack, PackedAppender, PackedLog, PackedWriter, Slot};
pub use precondition::{check_preconditions, PreconditionFailure};
pub use queue::pop_rewinding;
pub use retry::{update, Change, UpdateError, Updated, MAX_CAS_ATTEMPTS};
pub use store::{CasOutcome, DeleteOutcome, FileOp, Store, StoreError, Versioned};

use quorate_protocols::{RunId, Version};

impl<V, S: Store<V> + ?Sized> Store<V> for Arc<S> {
    fn get(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<V>>, StoreError>> + Send {
        (**self).get(key)
    }

    fn cas(
        &self,
        key: &str,
        expected: Option<Version>,
        value: V,
    ) -> impl Future<Output = Result<CasOutcome<V>, StoreError>> + Send {
        (**self).cas(key, expected, value)
    }

    fn delete(
        &self,
        key: &str,
        expected: Version,
    ) -> impl Future<Output = Result<DeleteOutcome<V>, StoreError>> + Send {
        (**self).delete(key, expected)
    }

    fn scan(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<(String, Versioned<V>)>, StoreError>> + Send {
        (**self).scan(prefix)
    }
}

impl<E, L: RunLog<E> + ?Sized> RunLog<E> for Arc<L> {
    fn append(&self, run: RunId, entry: E) -> impl Future<Output = Result<Seq, StoreError>> + Send {
        (**self).append(run, entry)
    }

    fn read(
        &self,
        run: RunId,
        from: Seq,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Seq, E)>, StoreError>> + Send {
        (**self).read(run, from, limit)
    }
}
