//! [`EtcdLog`]: a [`RunLog`] on a key range of an etcd cluster.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use etcd_client::{
    Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use parking_lot::Mutex;
use quorate_protocols::RunId;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::store::send;
use super::{key_text, prefix_end, Etcd, MAX_TXN_BYTES, MAX_TXN_OPS};
use crate::codec::{decode, encode};
use crate::{RunLog, Seq, StoreError};

/// A [`RunLog`] on the keys `/PREFIX/log/NAME/` of an etcd cluster ([`Etcd::log`]): entry `SEQ`
/// of run `RUN` at `/PREFIX/log/NAME/RUN/SEQ`, `SEQ` in 20 decimal digits so key order is
/// sequence order.
///
/// An append is one transaction: *if* the entry's key is absent *then* put it, *else* read the
/// run's last entry (and try again after it). Entries are never removed, and a handle only
/// tries a sequence number one past an entry it saw, so a run's log is gap-free and every
/// sequence number is taken once, whichever processes append. Each handle remembers the next
/// sequence number per run (shared by its clones), so an uncontended append is one round
/// trip. Entries are stored as CBOR. Cloning is cheap and keeps the connection.
pub struct EtcdLog<E> {
    etcd: Etcd,
    /// `/PREFIX/log/NAME/`.
    base: Arc<str>,
    /// Per run, a sequence number no greater than the run's next one.
    next: Arc<Mutex<HashMap<RunId, u64>>>,
    entries: PhantomData<fn() -> E>,
}

impl<E> Clone for EtcdLog<E> {
    fn clone(&self) -> Self {
        Self {
            etcd: self.etcd.clone(),
            base: self.base.clone(),
            next: self.next.clone(),
            entries: PhantomData,
        }
    }
}

impl<E> fmt::Debug for EtcdLog<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLog")
            .field("url", &self.etcd.url().to_string())
            .field("keys", &self.base)
            .finish()
    }
}

impl<E> EtcdLog<E> {
    pub(super) fn new(etcd: Etcd, base: String) -> Self {
        Self {
            etcd,
            base: Arc::from(base),
            next: Arc::default(),
            entries: PhantomData,
        }
    }

    /// The connection this log uses.
    #[must_use]
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// `/PREFIX/log/NAME/RUN/`.
    fn run_prefix(&self, run: RunId) -> String {
        format!("{}{run}/", self.base)
    }

    fn entry_key(&self, run: RunId, seq: u64) -> String {
        format!("{}{run}/{seq:020}", self.base)
    }

    /// The sequence number of an entry key of `run`.
    fn seq_of(&self, run: RunId, kv: &etcd_client::KeyValue) -> Result<u64, StoreError> {
        let key = key_text(kv)?;
        key.strip_prefix(&self.run_prefix(run))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::Corrupt {
                key: key.to_owned(),
                reason: "not an entry key of this run's log".into(),
            })
    }

    /// Reads `run`'s last entry: one past its sequence number, 0 for an empty log.
    fn last_op(&self, run: RunId) -> TxnOp {
        let prefix = self.run_prefix(run);
        let options = GetOptions::new()
            .with_range(prefix_end(&prefix))
            .with_sort(SortTarget::Key, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        TxnOp::get(prefix, Some(options))
    }

    /// The next sequence number a failed append's read found.
    fn next_after(&self, run: RunId, response: &TxnResponse) -> Result<u64, StoreError> {
        match response.op_responses().first() {
            Some(TxnOpResponse::Get(get)) => match get.kvs().first() {
                Some(kv) => Ok(self.seq_of(run, kv)? + 1),
                None => Ok(0),
            },
            _ => Err(self
                .etcd
                .unavailable("a transaction answered without its read")),
        }
    }

    fn hint(&self, run: RunId) -> u64 {
        self.next.lock().get(&run).copied().unwrap_or(0)
    }

    fn learn(&self, run: RunId, next: u64) {
        let mut map = self.next.lock();
        let slot = map.entry(run).or_insert(0);
        *slot = (*slot).max(next);
    }

    /// Appends the encoded `entries` (at most one transaction's worth) at consecutive sequence
    /// numbers; returns the first.
    async fn append_encoded(&self, run: RunId, entries: &[Vec<u8>]) -> Result<u64, StoreError> {
        loop {
            let first = self.hint(run);
            // Entries are gap-free, so if the first key is absent so are all after it.
            let txn = Txn::new()
                .when([Compare::create_revision(
                    self.entry_key(run, first),
                    CompareOp::Equal,
                    0,
                )])
                .and_then(
                    entries
                        .iter()
                        .zip(first..)
                        .map(|(bytes, seq)| {
                            TxnOp::put(self.entry_key(run, seq), bytes.clone(), None)
                        })
                        .collect::<Vec<_>>(),
                )
                .or_else([self.last_op(run)]);
            let response = self.etcd.call(move |kv| send(kv, txn.clone())).await?;
            if response.succeeded() {
                self.learn(run, first + entries.len() as u64);
                return Ok(first);
            }
            let next = self.next_after(run, &response)?;
            self.learn(run, next);
        }
    }

    /// Number of entries in `run`'s log (one past its last sequence number).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`]: the cluster did not answer.
    pub async fn len(&self, run: RunId) -> Result<u64, StoreError> {
        // No comparison: etcd runs the success branch.
        let txn = Txn::new().and_then([self.last_op(run)]);
        let response = self.etcd.call(move |kv| send(kv, txn.clone())).await?;
        let next = self.next_after(run, &response)?;
        self.learn(run, next);
        Ok(next)
    }
}

impl<E: Serialize + DeserializeOwned + Send + Sync> EtcdLog<E> {
    /// Appends `entries` to run `run`'s log, in order, in as few transactions as etcd takes
    /// (up to 100 entries and 1 MiB each): the entries of one transaction get consecutive
    /// sequence numbers, and the numbers come back in order. An entry that cannot be encoded is
    /// refused before any is written.
    ///
    /// # Errors
    /// [`StoreError::Unencodable`] (nothing written), or [`StoreError::Unavailable`] (the
    /// transactions before the failed one were made; the failed one's outcome is unknown).
    pub async fn append_all<'a>(
        &self,
        run: RunId,
        entries: impl IntoIterator<Item = &'a E>,
    ) -> Result<Vec<Seq>, StoreError>
    where
        E: 'a,
    {
        let key = self.run_prefix(run);
        let encoded = entries
            .into_iter()
            .map(|e| encode(&key, e))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = Vec::with_capacity(encoded.len());
        let mut rest = &encoded[..];
        while !rest.is_empty() {
            let mut take = 0;
            let mut bytes = 0;
            while take < rest.len() && take < MAX_TXN_OPS {
                bytes += rest[take].len();
                if take > 0 && bytes > MAX_TXN_BYTES {
                    break;
                }
                take += 1;
            }
            let first = self.append_encoded(run, &rest[..take]).await?;
            out.extend((first..first + take as u64).map(Seq));
            rest = &rest[take..];
        }
        Ok(out)
    }
}

impl<E: Serialize + DeserializeOwned + Send + Sync> RunLog<E> for EtcdLog<E> {
    async fn append(&self, run: RunId, entry: E) -> Result<Seq, StoreError> {
        let bytes = encode(&self.run_prefix(run), &entry)?;
        self.append_encoded(run, &[bytes]).await.map(Seq)
    }

    async fn read(&self, run: RunId, from: Seq, limit: usize) -> Result<Vec<(Seq, E)>, StoreError> {
        let start = self.entry_key(run, from.0).into_bytes();
        let kvs = self
            .etcd
            .range(start, prefix_end(&self.run_prefix(run)), limit)
            .await?;
        let mut out = Vec::with_capacity(kvs.len());
        for kv in &kvs {
            let seq = self.seq_of(run, kv)?;
            out.push((Seq(seq), decode(key_text(kv)?, kv.value())?));
        }
        Ok(out)
    }
}
