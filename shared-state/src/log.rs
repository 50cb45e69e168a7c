//! The append-only per-run log.

use std::future::Future;

use quorate_protocols::RunId;
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// Position of an entry in a run's log: 0 for the first entry, then strictly increasing by one.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Seq(pub u64);

/// An append-only log per run: everything needed to explain and to resume a run.
///
/// Entries are never changed or removed. Within a run, `append` assigns consecutive sequence
/// numbers in the order the appends took effect, and `read` returns them in that order.
pub trait RunLog<E>: Send + Sync {
    /// Appends `entry` to `run`'s log; returns its sequence number.
    fn append(&self, run: RunId, entry: E) -> impl Future<Output = Result<Seq, StoreError>> + Send;

    /// Up to `limit` entries of `run` starting at `from`, in order.
    fn read(
        &self,
        run: RunId,
        from: Seq,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Seq, E)>, StoreError>> + Send;
}
