//! The embedded default backend: [`MemoryStore`] and [`MemoryLog`].

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::{DashMap, SharedValue};
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
    /// Keys come from callers: a randomly keyed fast hash.
    /// Boxed keys: a large store holds one per key, and a `Box<str>` is a word smaller than a
    /// `String`.
    map: DashMap<Box<str>, Versioned<V>, ahash::RandomState>,
    revision: AtomicU64,
    /// Compare-and-swaps (and creates) refused because the key had moved on: counted on the
    /// conflict path only, so a commit costs nothing more (see [`MemoryStore::conflicts`]).
    conflicts: AtomicU64,
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
            map: DashMap::with_hasher(ahash::RandomState::new()),
            revision: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
        }
    }

    /// An empty store with room for `keys` keys (no rehashing, and no momentary double table,
    /// while it fills up to that).
    #[must_use]
    pub fn with_capacity(keys: usize) -> Self {
        Self {
            map: DashMap::with_capacity_and_hasher(keys, ahash::RandomState::new()),
            revision: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
        }
    }

    /// How many compare-and-swaps (and creates) this store refused with
    /// [`CasOutcome::Conflict`] so far: the writer had read an older version, or the key was
    /// already there (the run's metrics publish it as `quorate_cas_conflicts_total`).
    ///
    /// ```
    /// use quorate_state::MemoryStore;
    ///
    /// let store = MemoryStore::new();
    /// let _ = store.cas_now("k", None, 1u32);
    /// assert_eq!(store.conflicts(), 0);
    /// let _ = store.cas_now("k", None, 2);
    /// assert_eq!(store.conflicts(), 1);
    /// ```
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    fn conflict(&self, current: Option<Versioned<V>>) -> CasOutcome<V> {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
        CasOutcome::Conflict { current }
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
                Some(slot) => self.conflict(Some(slot.clone())),
                None => self.conflict(None),
            },
            None => self.create_now(key, value),
        }
    }

    /// `cas_now(key, None, value)`: creates `key` unless it exists, keeping an owned key as the
    /// stored one (a `String` of exact capacity moves in without a copy of its text).
    ///
    /// ```
    /// use quorate_state::{CasOutcome, MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// assert!(matches!(store.create_now(String::from("k"), 1), CasOutcome::Committed(_)));
    /// assert!(matches!(store.create_now("k", 2), CasOutcome::Conflict { current: Some(c) } if c.value == 1));
    /// ```
    pub fn create_now(&self, key: impl Into<Box<str>>, value: V) -> CasOutcome<V> {
        match self.map.entry(key.into()) {
            Entry::Vacant(vacant) => {
                let version = self.next_version();
                vacant.insert(Versioned { value, version });
                CasOutcome::Committed(version)
            }
            Entry::Occupied(occupied) => self.conflict(Some(occupied.get().clone())),
        }
    }

    /// [`create_now`](Self::create_now) for every item, in one pass per shard of the map: each
    /// shard's lock is taken once for all of the batch's keys in it. `answer` gets each item's
    /// outcome, in the items' order, once all are written. The versions follow that order too:
    /// item `i`, if created, gets version `base + i + 1` for one `base` drawn for the whole
    /// batch (an item refused as a conflict leaves its number unused; versions still never
    /// repeat). A key given twice is created by its first item and refused for the second.
    ///
    /// Why a batch is cheaper: writing a new entry into a large map touches a random line of
    /// memory, and releasing a lock right after waits until that write is done. Under one lock,
    /// the writes of a batch wait together instead of one after the other (the star
    /// supervisor's shell commits the results of each drive this way; docs/performance.md). The
    /// gain is largest where a batch falls several keys to a shard (dashmap makes 4 x cores
    /// shards).
    /// The one allocation is the batch's own list.
    ///
    /// ```
    /// use quorate_state::{CasOutcome, MemoryStore};
    ///
    /// let store = MemoryStore::new();
    /// let _ = store.create_now("b", 0);
    /// let mut out = Vec::new();
    /// store.create_many_now([("a", 1), ("b", 2), ("c", 3), ("a", 4)], |o| out.push(o));
    /// let CasOutcome::Committed(a) = out[0] else { panic!("{:?}", out[0]) };
    /// assert!(matches!(&out[1], CasOutcome::Conflict { current: Some(c) } if c.value == 0));
    /// // Versions follow the items: c's is two above a's (b's number went unused).
    /// assert!(matches!(out[2], CasOutcome::Committed(c) if c.raw() == a.raw() + 2));
    /// assert!(matches!(&out[3], CasOutcome::Conflict { current: Some(c) } if c.value == 1));
    /// assert_eq!(store.get_now("c").unwrap().value, 3);
    /// ```
    pub fn create_many_now<K: Into<Box<str>>>(
        &self,
        items: impl IntoIterator<Item = (K, V)>,
        mut answer: impl FnMut(CasOutcome<V>),
    ) {
        let hasher = self.map.hasher();
        let mut batch: Vec<BatchItem<V>> = items
            .into_iter()
            .map(|(key, value)| {
                let key: Box<str> = key.into();
                // As the map hashes a key (`DashMap::hash_u64`: build, hash, finish; the trait's
                // `hash_one`, not ahash's own, which may hash some types differently) and picks
                // its shard.
                let hash = BuildHasher::hash_one(hasher, &key);
                BatchItem {
                    shard: self.map.determine_shard(hash as usize),
                    hash,
                    state: BatchState::Asked(key, value),
                }
            })
            .collect();
        // One locked increment for the batch, before any write (one after a write would wait
        // for it).
        let base = self
            .revision
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let mut conflicts = 0;
        // One pass per shard the batch touches, from its first unanswered item: the items stay
        // where they are, and each shard's in their order (no sort: a pass per shard costs
        // little while shards are few; dashmap makes 4 x cores of them, 8 on a 2-core host).
        let mut first = 0;
        while let Some(at) = batch[first..]
            .iter()
            .position(|item| matches!(item.state, BatchState::Asked(..)))
        {
            first += at;
            let number = batch[first].shard;
            let mut shard = self.map.shards()[number].write();
            for (index, item) in batch.iter_mut().enumerate().skip(first) {
                if item.shard != number {
                    continue;
                }
                let BatchState::Asked(key, value) =
                    std::mem::replace(&mut item.state, BatchState::Taken)
                else {
                    unreachable!("an item of a shard not yet visited is still asked");
                };
                let outcome = match shard.get(item.hash, |(k, _)| *k == key) {
                    Some((_, held)) => {
                        conflicts += 1;
                        CasOutcome::Conflict {
                            current: Some(held.get().clone()),
                        }
                    }
                    None => {
                        let version = Version::new(base + index as u64 + 1);
                        let entry = (key, SharedValue::new(Versioned { value, version }));
                        shard.insert(item.hash, entry, |(k, _)| BuildHasher::hash_one(hasher, k));
                        CasOutcome::Committed(version)
                    }
                };
                item.state = BatchState::Answered(outcome);
            }
        }
        if conflicts > 0 {
            self.conflicts.fetch_add(conflicts, Ordering::Relaxed);
        }
        for item in batch {
            match item.state {
                BatchState::Answered(outcome) => answer(outcome),
                _ => unreachable!("every item is answered"),
            }
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
            .map(|e| (e.key().to_string(), e.value().clone()))
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

/// One item of [`MemoryStore::create_many_now`]: where it goes, and how far it got.
struct BatchItem<V> {
    shard: usize,
    hash: u64,
    state: BatchState<V>,
}

enum BatchState<V> {
    Asked(Box<str>, V),
    Taken,
    Answered(CasOutcome<V>),
}

/// In-memory [`RunLog`]: one vector per run behind its own lock.
///
/// A run's entries are kept in fixed-size chunks, so a long log grows without ever copying what
/// it already holds.
#[derive(Debug)]
pub struct MemoryLog<E> {
    runs: DashMap<RunId, Arc<Mutex<Chunks<E>>>>,
}

/// Entries per chunk.
const CHUNK: usize = 4096;

#[derive(Debug)]
struct Chunks<E> {
    chunks: Vec<Vec<E>>,
    len: usize,
}

impl<E> Default for Chunks<E> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<E> Chunks<E> {
    fn push(&mut self, entry: E) -> usize {
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(last) = self.chunks.last_mut() {
            last.push(entry);
        }
        self.len += 1;
        self.len - 1
    }

    fn iter_from(&self, start: usize) -> impl Iterator<Item = &E> {
        let first = start / CHUNK;
        let skip = start % CHUNK;
        self.chunks.iter().skip(first).flatten().skip(skip)
    }
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

    fn run(&self, run: RunId) -> Arc<Mutex<Chunks<E>>> {
        self.runs.entry(run).or_default().clone()
    }

    /// [`RunLog::append`], synchronously.
    pub fn append_now(&self, run: RunId, entry: E) -> Seq {
        let log = self.run(run);
        let seq = log.lock().push(entry);
        Seq(seq as u64)
    }

    /// [`RunLog::read`], synchronously.
    pub fn read_now(&self, run: RunId, from: Seq, limit: usize) -> Vec<(Seq, E)> {
        let Some(log) = self.runs.get(&run).map(|l| l.clone()) else {
            return Vec::new();
        };
        let entries = log.lock();
        let start = usize::try_from(from.0)
            .unwrap_or(usize::MAX)
            .min(entries.len);
        entries
            .iter_from(start)
            .take(limit)
            .enumerate()
            .map(|(i, e)| (Seq((start + i) as u64), e.clone()))
            .collect()
    }

    /// Number of entries in `run`'s log.
    pub fn len(&self, run: RunId) -> usize {
        self.runs.get(&run).map_or(0, |l| l.lock().len)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_reads_across_chunk_boundaries() {
        let log = MemoryLog::new();
        let run = RunId::from_u128(1);
        for i in 0..(2 * CHUNK as u64 + 10) {
            assert_eq!(log.append_now(run, i), Seq(i));
        }
        let got = log.read_now(run, Seq(CHUNK as u64 - 3), 6);
        let want: Vec<(Seq, u64)> = (CHUNK as u64 - 3..CHUNK as u64 + 3)
            .map(|i| (Seq(i), i))
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            log.read_now(run, Seq(2 * CHUNK as u64 + 9), 5),
            vec![(Seq(2 * CHUNK as u64 + 9), 2 * CHUNK as u64 + 9)]
        );
        assert!(log.read_now(run, Seq(10 * CHUNK as u64), 5).is_empty());
        assert_eq!(log.len(run), 2 * CHUNK + 10);
    }
}
