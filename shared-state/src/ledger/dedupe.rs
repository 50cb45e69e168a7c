//! [`DedupeRegistry`]: the first sighting of a dedupe key wins.

use quorate_protocols::{DedupeKey, RunId, TaskId};
use serde::{Deserialize, Serialize};

use crate::retry::{update, Change, UpdateError};
use crate::{DeleteOutcome, Store, StoreError};

/// The dedupe keys seen in one (run, task) scope.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupeSet {
    /// Keys in order of first sighting.
    pub keys: Vec<DedupeKey>,
}

/// Whether an envelope's dedupe key was new.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Sighting {
    /// First time: process the envelope.
    First,
    /// Seen before: drop it (and count it).
    Duplicate,
}

/// A dedupe check failed.
#[derive(Debug, thiserror::Error)]
pub enum DedupeError {
    /// The scope holds `capacity` keys already. The envelope must be treated as rejected: the
    /// registry is bounded and never forgets a live scope's keys to make room (that would let a
    /// duplicate through).
    #[error("dedupe scope {run}/{task} is full ({capacity} keys)")]
    ScopeFull {
        /// The run.
        run: RunId,
        /// The task.
        task: TaskId,
        /// The bound.
        capacity: usize,
    },
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Lost the CAS race too often.
    #[error("gave up after {attempts} CAS conflicts")]
    Contention {
        /// Conflicts seen.
        attempts: u32,
    },
}

/// Remembers dedupe keys per (run, task), at most `capacity` per scope, in any [`Store`].
///
/// A scope's keys are dropped with [`forget`](Self::forget) once its task is terminal: from then
/// on every envelope for that task is refused by the task's state, so the keys are no longer
/// needed. Memory is therefore bounded by live tasks × capacity.
///
/// ```
/// use quorate_protocols::{DedupeKey, RunId, TaskId};
/// use quorate_state::{DedupeRegistry, MemoryStore, Sighting};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let registry = DedupeRegistry::new(MemoryStore::new(), 8);
/// let (run, task, key) = (RunId::from_u128(1), TaskId::from_u128(2), DedupeKey::from_u128(3));
/// assert_eq!(registry.observe(run, task, key).await?, Sighting::First);
/// assert_eq!(registry.observe(run, task, key).await?, Sighting::Duplicate);
/// # Ok::<(), quorate_state::DedupeError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct DedupeRegistry<S> {
    store: S,
    capacity: usize,
}

impl<S: Store<DedupeSet>> DedupeRegistry<S> {
    /// A registry keeping at most `capacity` keys per scope.
    pub fn new(store: S, capacity: usize) -> Self {
        Self { store, capacity }
    }

    fn key(run: RunId, task: TaskId) -> String {
        format!("dedupe/{run}/{task}")
    }

    /// Records `key` in the (run, task) scope; says whether it was the first sighting.
    pub async fn observe(
        &self,
        run: RunId,
        task: TaskId,
        key: DedupeKey,
    ) -> Result<Sighting, DedupeError> {
        let capacity = self.capacity;
        update(
            &self.store,
            &Self::key(run, task),
            |current: Option<&DedupeSet>| {
                let mut set = current.cloned().unwrap_or_default();
                if set.keys.contains(&key) {
                    return Ok(Change::Keep(Sighting::Duplicate));
                }
                if set.keys.len() >= capacity {
                    return Err(DedupeError::ScopeFull {
                        run,
                        task,
                        capacity,
                    });
                }
                set.keys.push(key);
                Ok(Change::Write(set, Sighting::First))
            },
        )
        .await
        .map(|done| done.value)
        .map_err(|e| match e {
            UpdateError::Refused(e) => e,
            UpdateError::Store(e) => DedupeError::Store(e),
            UpdateError::Contention { attempts } => DedupeError::Contention { attempts },
        })
    }

    /// Drops the scope's keys (call when the task is terminal).
    pub async fn forget(&self, run: RunId, task: TaskId) -> Result<(), DedupeError> {
        let key = Self::key(run, task);
        for _ in 0..crate::MAX_CAS_ATTEMPTS {
            let Some(current) = self.store.get(&key).await? else {
                return Ok(());
            };
            if let DeleteOutcome::Deleted = self.store.delete(&key, current.version).await? {
                return Ok(());
            }
        }
        Err(DedupeError::Contention {
            attempts: crate::MAX_CAS_ATTEMPTS,
        })
    }
}
