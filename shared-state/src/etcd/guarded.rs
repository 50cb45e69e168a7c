//! A compare-and-set that also requires another key of the cluster to hold a given value: the
//! fence of worker failover (a worker writes its own action book only while the supervisor's
//! fence key names its attempt; docs/distributed.md, "A lost worker").

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use quorate_protocols::Version;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::store::{at, send};
use super::EtcdStore;
use crate::codec::encode;
use crate::{CasOutcome, StoreError, Versioned};

/// A condition on one key of the cluster ([`EtcdStore::guard`]): it holds exactly one value,
/// or it is absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The full etcd key.
    key: String,
    /// Its encoded value; `None`: the key is absent.
    value: Option<Vec<u8>>,
}

/// What an [`EtcdStore::cas_guarded`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a guarded write may have been refused"]
pub enum Guarded<V> {
    /// The guard held: the write's outcome, as [`Store::cas`](crate::Store::cas)'s.
    Held(CasOutcome<V>),
    /// The guard did not hold: nothing was written.
    Unmet,
}

impl<V: Serialize + DeserializeOwned + Send + Sync> EtcdStore<V> {
    /// The condition that this store's `key` holds `value` (`None`: is absent), for
    /// [`cas_guarded`](Self::cas_guarded) of any store of the same connection.
    ///
    /// # Errors
    /// [`StoreError::Unencodable`]: `value` does not encode.
    pub fn guard(&self, key: &str, value: Option<&V>) -> Result<Guard, StoreError> {
        let key = self.full(key);
        let value = value.map(|v| encode(&key, v)).transpose()?;
        Ok(Guard { key, value })
    }

    /// [`Store::cas`](crate::Store::cas) of `key`, in one etcd transaction that also requires
    /// `guard` to hold: if it does not, nothing is written ([`Guarded::Unmet`]), whatever
    /// `key`'s version.
    ///
    /// # Errors
    /// As [`Store::cas`](crate::Store::cas).
    pub async fn cas_guarded(
        &self,
        key: &str,
        expected: Option<Version>,
        value: V,
        guard: &Guard,
    ) -> Result<Guarded<V>, StoreError> {
        let full = self.full(key);
        let bytes = encode(&full, &value)?;
        let mut compares = at(&full, expected);
        let guard_holds = match &guard.value {
            None => Compare::create_revision(guard.key.clone(), CompareOp::Equal, 0),
            Some(v) => Compare::value(guard.key.clone(), CompareOp::Equal, v.clone()),
        };
        compares.push(guard_holds);
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::put(full.clone(), bytes, None)])
            .or_else([TxnOp::get(full, None), TxnOp::get(guard.key.clone(), None)]);
        let response = self.etcd().call(move |kv| send(kv, txn.clone())).await?;
        if response.succeeded() {
            return Ok(Guarded::Held(CasOutcome::Committed(Self::committed(
                &response,
            ))));
        }
        let guard_now = match response.op_responses().get(1) {
            Some(etcd_client::TxnOpResponse::Get(get)) => {
                get.kvs().first().map(|kv| kv.value().to_vec())
            }
            _ => {
                return Err(self
                    .etcd()
                    .unavailable("a transaction answered without its read"))
            }
        };
        if guard_now != guard.value {
            return Ok(Guarded::Unmet);
        }
        let current: Option<Versioned<V>> = self.found(&response, 0)?;
        Ok(Guarded::Held(CasOutcome::Conflict { current }))
    }
}
