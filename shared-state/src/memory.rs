//! The embedded default backend: [`MemoryStore`] and [`MemoryLog`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use parking_lot::Mutex;
use quorate_protocols::{RunId, Version};

use crate::{CasOutcome, DeleteOutcome, RunLog, Seq, Store, StoreError, Versioned};

/// In-memory [`Store`] on a sharded concurrent map (dashmap).
///
/// Versions come from one store-wide counter, like etcd's revisions, so a key that is deleted
/// and created again never reuses a version. Every operation completes before it returns; the
/// `*_now` methods expose that synchronously, and the [`Store`] futures are ready at once.
/// No map guard is ever held across an `.await` (there is none inside; `clippy.toml` forbids it
/// elsewhere).
///
/// ```
/// use quorate_state::{CasOutcome, MemoryStore};
///
/// let store = MemoryStore::new();
/// let CasOutcome::Committed(v1) = store.cas_now("k", None, 1u32) else { unreachable!() };
/// // A writer that read nothing and tries to create the key again loses and sees the winner.
/// match store.cas_now("k", None, 2) {
///     CasOutcome::Conflict { current: Some(cur) } => assert_eq!((cur.value, cur.version), (1, v1)),
///     other => panic!("{other:?}"),
/// }
/// assert!(store.cas_now("k", Some(v1), 3).is_committed());
/// assert_eq!(store.get_now("k").unwrap().value, 3);
/// ```
#[derive(Debug)]
pub struct MemoryStore<V> {
    map: DashMap<String, Versioned<V>>,
    revision: AtomicU64,
}

impl<V: Clone> Default for MemoryStore<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> MemoryStore<V> {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self {
            map: DashMap::new(),
            revision: AtomicU64::new(0),
        }
    }

    fn next_version(&self) -> Version {
        Version::new(self.revision.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// [`Store::get`], synchronously.
    pub fn get_now(&self, key: &str) -> Option<Versioned<V>> {
        self.map.get(key).map(|slot| slot.clone())
    }

    /// [`Store::cas`], synchronously.
    pub fn cas_now(&self, key: &str, expected: Option<Version>, value: V) -> CasOutcome<V> {
        match expected {
            Some(expected) => match self.map.get_mut(key) {
                #[cfg(feature = "mutants")]
                Some(mut slot)
                    if quorate_protocols::mutant::is(
                        quorate_protocols::mutant::Mutant::CasIgnoresVersion,
                    ) =>
                {
                    let version = self.next_version();
                    *slot = Versioned { value, version };
                    CasOutcome::Committed(version)
                }
                Some(mut slot) if slot.version == expected => {
                    let version = self.next_version();
                    *slot = Versioned { value, version };
                    CasOutcome::Committed(version)
                }
                Some(slot) => CasOutcome::Conflict {
                    current: Some(slot.clone()),
                },
                None => CasOutcome::Conflict { current: None },
            },
            None => match self.map.entry(key.to_owned()) {
                Entry::Vacant(vacant) => {
                    let version = self.next_version();
                    vacant.insert(Versioned { value, version });
                    CasOutcome::Committed(version)
                }
                Entry::Occupied(occupied) => CasOutcome::Conflict {
                    current: Some(occupied.get().clone()),
                },
            },
        }
    }

    /// [`Store::delete`], synchronously.
    pub fn delete_now(&self, key: &str, expected: Version) -> DeleteOutcome<V> {
        let removed = self.map.remove_if(key, |_, slot| slot.version == expected);
        match removed {
            Some(_) => DeleteOutcome::Deleted,
            None => DeleteOutcome::Conflict {
                current: self.get_now(key),
            },
        }
    }

    /// [`Store::scan`], synchronously. Visits every key (the map is unordered), then sorts.
    pub fn scan_now(&self, prefix: &str) -> Vec<(String, Versioned<V>)> {
        let mut out: Vec<(String, Versioned<V>)> = self
            .map
            .iter()
            .filter(|e| e.key().starts_with(prefix))
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// `true` if the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl<V: Clone + Send + Sync> Store<V> for MemoryStore<V> {
    async fn get(&self, key: &str) -> Result<Option<Versioned<V>>, StoreError> {
        Ok(self.get_now(key))
    }

    async fn cas(
        &self,
        key: &str,
        expected: Option<Version>,
        value: V,
    ) -> Result<CasOutcome<V>, StoreError> {
        Ok(self.cas_now(key, expected, value))
    }

    async fn delete(&self, key: &str, expected: Version) -> Result<DeleteOutcome<V>, StoreError> {
        Ok(self.delete_now(key, expected))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Versioned<V>)>, StoreError> {
        Ok(self.scan_now(prefix))
    }
}

/// In-memory [`RunLog`]: one vector per run behind its own lock.
#[derive(Debug)]
pub struct MemoryLog<E> {
    runs: DashMap<RunId, Arc<Mutex<Vec<E>>>>,
}

impl<E: Clone> Default for MemoryLog<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Clone> MemoryLog<E> {
    /// An empty log.
    #[must_use]
    pub fn new() -> Self {
        Self {
            runs: DashMap::new(),
        }
    }

    fn run(&self, run: RunId) -> Arc<Mutex<Vec<E>>> {
        self.runs.entry(run).or_default().clone()
    }

    /// [`RunLog::append`], synchronously.
    pub fn append_now(&self, run: RunId, entry: E) -> Seq {
        let log = self.run(run);
        let mut entries = log.lock();
        entries.push(entry);
        Seq(entries.len() as u64 - 1)
    }

    /// [`RunLog::read`], synchronously.
    pub fn read_now(&self, run: RunId, from: Seq, limit: usize) -> Vec<(Seq, E)> {
        let Some(log) = self.runs.get(&run).map(|l| l.clone()) else {
            return Vec::new();
        };
        let entries = log.lock();
        let start = usize::try_from(from.0)
            .unwrap_or(usize::MAX)
            .min(entries.len());
        entries[start..]
            .iter()
            .take(limit)
            .enumerate()
            .map(|(i, e)| (Seq((start + i) as u64), e.clone()))
            .collect()
    }

    /// Number of entries in `run`'s log.
    pub fn len(&self, run: RunId) -> usize {
        self.runs.get(&run).map_or(0, |l| l.lock().len())
    }
}

impl<E: Clone + Send + Sync> RunLog<E> for MemoryLog<E> {
    async fn append(&self, run: RunId, entry: E) -> Result<Seq, StoreError> {
        Ok(self.append_now(run, entry))
    }

    async fn read(&self, run: RunId, from: Seq, limit: usize) -> Result<Vec<(Seq, E)>, StoreError> {
        Ok(self.read_now(run, from, limit))
    }
}
