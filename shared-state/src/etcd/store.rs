//! [`EtcdStore`]: a [`Store`] on a key range of an etcd cluster.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse, TxnResponse};
use quorate_protocols::Version;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{key_text, prefix_end, revision, version, Etcd, MAX_TXN_BYTES, MAX_TXN_OPS};
use crate::codec::{decode, encode};
use crate::{CasOutcome, DeleteOutcome, Store, StoreError, Versioned};

/// A [`Store`] on the keys `/PREFIX/kv/NAME/` of an etcd cluster ([`Etcd::store`]).
///
/// CAS and delete are single etcd transactions on `mod_revision`; a key's version is its
/// `mod_revision` (the module documentation of [`Etcd`]'s backend says why that is safe).
/// Values are stored as CBOR. Cloning is cheap and keeps the connection.
pub struct EtcdStore<V> {
    etcd: Etcd,
    /// `/PREFIX/kv/NAME/`.
    base: Arc<str>,
    values: PhantomData<fn() -> V>,
}

/// What an [`EtcdStore::cas_atomic`] did: all of its writes, or none.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "an atomic commit may have lost the race"]
pub enum AtomicOutcome<V> {
    /// Every write was made, in one etcd transaction; this is the version of each written key.
    Committed(Version),
    /// At least one key was not at its expected version; nothing was written. The current value
    /// and version of every key of the commit, in the order given, read in the same transaction.
    Conflict {
        /// Each key with its current value, if it exists.
        current: Vec<(String, Option<Versioned<V>>)>,
    },
}

impl<V> Clone for EtcdStore<V> {
    fn clone(&self) -> Self {
        Self {
            etcd: self.etcd.clone(),
            base: self.base.clone(),
            values: PhantomData,
        }
    }
}

impl<V> fmt::Debug for EtcdStore<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.etcd.url().to_string())
            .field("keys", &self.base)
            .finish()
    }
}

/// Sends `txn`.
pub(super) async fn send(
    mut kv: etcd_client::KvClient,
    txn: Txn,
) -> Result<TxnResponse, etcd_client::Error> {
    kv.txn(txn).await
}

/// One write of a `cas_all`: key, expected version, encoded value, value.
type Write<V> = (String, Option<Version>, Vec<u8>, V);

/// The comparison that holds when `key` is at `expected` (`None`: absent).
pub(super) fn at(key: &str, expected: Option<Version>) -> Vec<Compare> {
    match expected {
        None => vec![Compare::create_revision(key, CompareOp::Equal, 0)],
        // etcd compares an absent key's mod_revision as 0: require the key to exist too.
        Some(v) => vec![
            Compare::mod_revision(key, CompareOp::Equal, revision(v)),
            Compare::create_revision(key, CompareOp::Greater, 0),
        ],
    }
}

impl<V> EtcdStore<V> {
    pub(super) fn new(etcd: Etcd, base: String) -> Self {
        Self {
            etcd,
            base: Arc::from(base),
            values: PhantomData,
        }
    }

    /// The connection this store uses.
    #[must_use]
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// The etcd key of the store's `key`.
    pub(super) fn full(&self, key: &str) -> String {
        format!("{}{key}", self.base)
    }
}

impl<V: Serialize + DeserializeOwned + Send + Sync> EtcdStore<V> {
    /// The store's key and value of an etcd key-value pair read back.
    fn entry(&self, kv: &etcd_client::KeyValue) -> Result<(String, Versioned<V>), StoreError> {
        let full = key_text(kv)?;
        let key = full.strip_prefix(&*self.base).unwrap_or(full).to_owned();
        let value = decode(full, kv.value())?;
        Ok((
            key,
            Versioned {
                value,
                version: version(kv.mod_revision()),
            },
        ))
    }

    /// The value a transaction's `index`-th (get) response found, if any.
    pub(super) fn found(
        &self,
        response: &TxnResponse,
        index: usize,
    ) -> Result<Option<Versioned<V>>, StoreError> {
        match response.op_responses().get(index) {
            Some(TxnOpResponse::Get(get)) => get
                .kvs()
                .first()
                .map(|kv| self.entry(kv).map(|(_, v)| v))
                .transpose(),
            _ => Err(self
                .etcd
                .unavailable("a transaction answered without its read")),
        }
    }

    /// One transaction for `writes` (encoded, distinct keys): all put if all are at their
    /// expected versions, else every key read.
    async fn txn(
        &self,
        writes: Vec<(String, Option<Version>, Vec<u8>)>,
    ) -> Result<TxnResponse, StoreError> {
        let mut compares = Vec::new();
        let mut puts = Vec::new();
        let mut gets = Vec::new();
        for (key, expected, bytes) in writes {
            let full = self.full(&key);
            compares.extend(at(&full, expected));
            gets.push(TxnOp::get(full.clone(), None));
            puts.push(TxnOp::put(full, bytes, None));
        }
        let txn = Txn::new().when(compares).and_then(puts).or_else(gets);
        self.etcd.call(move |kv| send(kv, txn.clone())).await
    }

    /// Writes every `(key, expected, value)` of `writes` in **one** etcd transaction if every
    /// key is at its expected version (`None`: absent), and none of them otherwise: the
    /// multi-key atomic commit (claim a task, debit a budget and record a dedupe key together).
    ///
    /// # Errors
    /// [`StoreError::Unencodable`], nothing written: a value does not encode, a key appears
    /// twice, or the commit has more writes (100) or value bytes (1 MiB) than one etcd
    /// transaction takes. [`StoreError::Unavailable`]: the cluster did not answer (outcome
    /// unknown).
    pub async fn cas_atomic(
        &self,
        writes: impl IntoIterator<Item = (String, Option<Version>, V)>,
    ) -> Result<AtomicOutcome<V>, StoreError> {
        let mut encoded = Vec::new();
        let mut keys = HashSet::new();
        let mut bytes = 0;
        for (key, expected, value) in writes {
            let refuse = |reason: &str| StoreError::Unencodable {
                key: self.full(&key),
                reason: reason.to_owned(),
            };
            if !keys.insert(key.clone()) {
                return Err(refuse("the key appears twice in one atomic commit"));
            }
            let value = encode(&self.full(&key), &value)?;
            bytes += value.len();
            if keys.len() > MAX_TXN_OPS || bytes > MAX_TXN_BYTES {
                return Err(refuse(
                    "the atomic commit is larger than one etcd transaction takes \
                     (100 writes, 1 MiB of values)",
                ));
            }
            encoded.push((key, expected, value));
        }
        let keys: Vec<String> = encoded.iter().map(|(k, _, _)| k.clone()).collect();
        let response = self.txn(encoded).await?;
        if response.succeeded() {
            return Ok(AtomicOutcome::Committed(Self::committed(&response)));
        }
        let mut current = Vec::with_capacity(keys.len());
        for (i, key) in keys.into_iter().enumerate() {
            current.push((key, self.found(&response, i)?));
        }
        Ok(AtomicOutcome::Conflict { current })
    }

    /// The version a successful write transaction gave its keys.
    pub(super) fn committed(response: &TxnResponse) -> Version {
        version(
            response
                .header()
                .map_or(0, etcd_client::ResponseHeader::revision),
        )
    }

    /// CASes every `(key, expected, value)` of `writes`, in order, with the outcomes of
    /// [`Store::cas`] made one after the other (the same contract as `RedbStore::cas_all`), in
    /// as few round trips as it can: up to 100 writes on distinct keys go as one transaction;
    /// only if one of its writes conflicts (or a key repeats) are that group's writes made one
    /// by one, so each gets its own outcome.
    ///
    /// # Errors
    /// [`StoreError::Unencodable`] (nothing written), or [`StoreError::Unavailable`] (the
    /// writes before the failed request were made; the failed one's outcome is unknown).
    pub async fn cas_all(
        &self,
        writes: impl IntoIterator<Item = (String, Option<Version>, V)>,
    ) -> Result<Vec<CasOutcome<V>>, StoreError> {
        let mut groups: Vec<Vec<Write<V>>> = vec![Vec::new()];
        let mut bytes = 0;
        for (key, expected, value) in writes {
            let encoded = encode(&self.full(&key), &value)?;
            let group = groups.last_mut().expect("never empty");
            if group.len() == MAX_TXN_OPS || bytes + encoded.len() > MAX_TXN_BYTES {
                bytes = 0;
                groups.push(Vec::new());
            }
            bytes += encoded.len();
            groups
                .last_mut()
                .expect("never empty")
                .push((key, expected, encoded, value));
        }
        let mut out = Vec::new();
        for group in groups.into_iter().filter(|g| !g.is_empty()) {
            let distinct = group.iter().map(|w| &w.0).collect::<HashSet<_>>().len() == group.len();
            if distinct {
                let writes = group
                    .iter()
                    .map(|(k, e, b, _)| (k.clone(), *e, b.clone()))
                    .collect();
                let response = self.txn(writes).await?;
                if response.succeeded() {
                    let v = Self::committed(&response);
                    out.extend(group.iter().map(|_| CasOutcome::Committed(v)));
                    continue;
                }
            }
            for (key, expected, _, value) in group {
                out.push(self.cas(&key, expected, value).await?);
            }
        }
        Ok(out)
    }

    /// Creates `key` with `value` if it is absent, attached to `lease`: etcd deletes the key
    /// when the lease expires (its holder stopped keeping it alive). Otherwise the conflict with
    /// what the key holds, as [`Store::cas`] from absent.
    ///
    /// # Errors
    /// As [`Store::cas`]; a lease that expired already is [`StoreError::Unavailable`] (etcd
    /// refuses the put: "requested lease not found").
    pub async fn create_leased(
        &self,
        key: &str,
        value: V,
        lease: &super::EtcdLease,
    ) -> Result<CasOutcome<V>, StoreError> {
        let full = self.full(key);
        let bytes = encode(&full, &value)?;
        let put = etcd_client::PutOptions::new().with_lease(lease.id());
        let txn = Txn::new()
            .when(at(&full, None))
            .and_then([TxnOp::put(full.clone(), bytes, Some(put))])
            .or_else([TxnOp::get(full, None)]);
        let response = self.etcd.call(move |kv| send(kv, txn.clone())).await?;
        if response.succeeded() {
            Ok(CasOutcome::Committed(Self::committed(&response)))
        } else {
            Ok(CasOutcome::Conflict {
                current: self.found(&response, 0)?,
            })
        }
    }
}

impl<V: Serialize + DeserializeOwned + Send + Sync> Store<V> for EtcdStore<V> {
    async fn get(&self, key: &str) -> Result<Option<Versioned<V>>, StoreError> {
        let full = self.full(key);
        let response = self
            .etcd
            .call(move |mut kv| {
                let full = full.clone();
                async move { kv.get(full, None).await }
            })
            .await?;
        response
            .kvs()
            .first()
            .map(|kv| self.entry(kv).map(|(_, v)| v))
            .transpose()
    }

    async fn cas(
        &self,
        key: &str,
        expected: Option<Version>,
        value: V,
    ) -> Result<CasOutcome<V>, StoreError> {
        let bytes = encode(&self.full(key), &value)?;
        let response = self.txn(vec![(key.to_owned(), expected, bytes)]).await?;
        if response.succeeded() {
            Ok(CasOutcome::Committed(Self::committed(&response)))
        } else {
            Ok(CasOutcome::Conflict {
                current: self.found(&response, 0)?,
            })
        }
    }

    async fn delete(&self, key: &str, expected: Version) -> Result<DeleteOutcome<V>, StoreError> {
        let full = self.full(key);
        let txn = Txn::new()
            .when(at(&full, Some(expected)))
            .and_then([TxnOp::delete(full.clone(), None)])
            .or_else([TxnOp::get(full, None)]);
        let response = self.etcd.call(move |kv| send(kv, txn.clone())).await?;
        if response.succeeded() {
            Ok(DeleteOutcome::Deleted)
        } else {
            Ok(DeleteOutcome::Conflict {
                current: self.found(&response, 0)?,
            })
        }
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Versioned<V>)>, StoreError> {
        let full = self.full(prefix);
        let end = prefix_end(&full);
        let kvs = self.etcd.range(full.into_bytes(), end, usize::MAX).await?;
        kvs.iter().map(|kv| self.entry(kv)).collect()
    }
}
