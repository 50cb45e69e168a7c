//! [`PackedLog`]: an in-memory [`RunLog`] that keeps each entry as a few bytes.
//!
//! A run of a million tasks logs several million events; kept as structs, the log alone would
//! hold most of the run's memory. A `PackedLog` stores each entry in the compact form its
//! [`Pack`] implementation chooses (varints, names written once per run) and decodes entries
//! only when they are read, which happens on resume, in tests and in reports, not on the hot
//! path. Names are written once per chunk of entries (see [`Pack`]).

use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::Mutex;
use quorate_protocols::RunId;

use crate::{RunLog, Seq, StoreError};

/// An entry that a [`PackedLog`] keeps as bytes.
///
/// `pack` appends the entry to `out`; `unpack` reads one entry back from the front of `input`
/// and advances it. Both see where the entry sits (`at`) and a dictionary that lives for one
/// chunk of entries (a fresh one at every chunk start, when packing and when unpacking): `pack`
/// may note a name it wrote so that later entries of the chunk refer to it by number, and
/// `unpack`, decoding the chunk in order, learns the same names as it goes.
///
/// ```
/// use quorate_protocols::RunId;
/// use quorate_state::{Pack, PackedLog, Seq, Slot};
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Tick(u8);
/// impl Pack for Tick {
///     type Dict = ();
///     fn pack(&self, _: Slot, _: &mut (), out: &mut Vec<u8>) { out.push(self.0) }
///     fn unpack(_: Slot, _: &mut (), input: &mut &[u8]) -> Option<Self> {
///         let (&b, rest) = input.split_first()?;
///         *input = rest;
///         Some(Tick(b))
///     }
/// }
///
/// let log = PackedLog::new();
/// let run = RunId::from_u128(1);
/// assert_eq!(log.append_now(run, &Tick(7)), Seq(0));
/// assert_eq!(log.append_now(run, &Tick(9)), Seq(1));
/// assert_eq!(log.read_now(run, Seq(1), 10), vec![(Seq(1), Tick(9))]);
/// assert_eq!(log.bytes(run), 2);
/// ```
pub trait Pack: Sized {
    /// What the entries of one chunk share (names already written, ...).
    type Dict: Default + Send;

    /// Appends `self`, the entry at `at`, to `out`.
    fn pack(&self, at: Slot, dict: &mut Self::Dict, out: &mut Vec<u8>);

    /// Reads the entry at `at` from the front of `input`; `None` if the bytes are not one.
    fn unpack(at: Slot, dict: &mut Self::Dict, input: &mut &[u8]) -> Option<Self>;

    /// A new chunk starts: `dict` must pack as a fresh one would (the default replaces it; an
    /// implementation may instead reset it in place, keeping its allocations).
    fn chunk_start(dict: &mut Self::Dict) {
        *dict = Self::Dict::default();
    }
}

/// Appends `v` as a varint: 7 bits a byte, low bits first, so small numbers take one byte.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint written by [`put_varint`] from the front of `input` and advances it; `None`
/// if the bytes end first or run past 64 bits.
#[inline]
pub fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = input.split_first()?;
        *input = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// A number packs as a varint, so small numbers take one byte.
impl Pack for u64 {
    type Dict = ();

    fn pack(&self, _: Slot, _: &mut (), out: &mut Vec<u8>) {
        put_varint(out, *self);
    }

    fn unpack(_: Slot, _: &mut (), input: &mut &[u8]) -> Option<Self> {
        take_varint(input)
    }
}

/// Where an entry sits: its run and its position in the run's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The run.
    pub run: RunId,
    /// The entry's position.
    pub seq: Seq,
}

/// Entries per chunk: reading from a position decodes at most this many entries to skip, and
/// a dictionary never holds more.
const CHUNK: usize = 1024;

/// One run's entries.
struct Packed<E: Pack> {
    run: RunId,
    /// Full chunks (shrunk to fit) and the one being filled, each `CHUNK` entries at most.
    chunks: Vec<Vec<u8>>,
    len: usize,
    dict: E::Dict,
}

impl<E: Pack> Packed<E> {
    fn new(run: RunId) -> Self {
        Self {
            run,
            chunks: Vec::new(),
            len: 0,
            dict: E::Dict::default(),
        }
    }

    fn push(&mut self, entry: &E) -> Seq {
        self.push_with(|at, dict, out| entry.pack(at, dict, out))
    }

    /// Appends the entry that `pack` writes (as [`Pack::pack`] would write it).
    fn push_with(&mut self, pack: impl FnOnce(Slot, &mut E::Dict, &mut Vec<u8>)) -> Seq {
        let seq = Seq(self.len as u64);
        if self.len.is_multiple_of(CHUNK) {
            // The next chunk starts with room for as much as the last one took (entries of one
            // log are alike), so it seldom grows by copying.
            let mut room = 0;
            if let Some(full) = self.chunks.last_mut() {
                full.shrink_to_fit();
                room = full.len();
            }
            self.chunks.push(Vec::with_capacity(room));
            E::chunk_start(&mut self.dict);
        }
        let at = Slot { run: self.run, seq };
        if let Some(chunk) = self.chunks.last_mut() {
            pack(at, &mut self.dict, chunk);
        }
        self.len += 1;
        seq
    }

    fn read(&self, from: usize, limit: usize) -> Result<Vec<(Seq, E)>, StoreError> {
        let mut out = Vec::new();
        let mut index = from - from % CHUNK;
        for chunk in self.chunks.iter().skip(from / CHUNK) {
            let mut input = chunk.as_slice();
            let mut dict = E::Dict::default();
            while !input.is_empty() && out.len() < limit {
                let at = Slot {
                    run: self.run,
                    seq: Seq(index as u64),
                };
                let Some(entry) = E::unpack(at, &mut dict, &mut input) else {
                    // Only `pack` wrote these bytes: a mismatch is a bug in the `Pack` impl, and
                    // a log cut short there would mislead a resume.
                    return Err(StoreError::Corrupt {
                        key: format!("log/{}/{index}", self.run),
                        reason: "the entry does not unpack".to_string(),
                    });
                };
                if index >= from {
                    out.push((at.seq, entry));
                }
                index += 1;
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn bytes(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}

/// In-memory [`RunLog`] whose entries are kept packed (see [`Pack`]). Same behaviour as
/// [`crate::MemoryLog`]: consecutive sequence numbers per run, reads in order.
pub struct PackedLog<E: Pack> {
    runs: DashMap<RunId, Arc<Mutex<Packed<E>>>>,
}

impl<E: Pack> std::fmt::Debug for PackedLog<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedLog")
            .field("runs", &self.runs.len())
            .finish()
    }
}

/// Appends to one run's [`PackedLog`] without looking the run up each time.
pub struct PackedWriter<E: Pack> {
    run: Arc<Mutex<Packed<E>>>,
}

impl<E: Pack> Clone for PackedWriter<E> {
    fn clone(&self) -> Self {
        Self {
            run: self.run.clone(),
        }
    }
}

/// Appends to one run's log while it holds the log's lock (see [`PackedWriter::hold`]): many
/// entries for one lock and unlock, where [`PackedWriter::append`] takes the lock per entry.
pub struct PackedAppender<'a, E: Pack> {
    run: parking_lot::MutexGuard<'a, Packed<E>>,
}

impl<E: Pack> std::fmt::Debug for PackedAppender<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedAppender").finish_non_exhaustive()
    }
}

impl<E: Pack> PackedAppender<'_, E> {
    /// Appends `entry`; returns its sequence number.
    pub fn append(&mut self, entry: &E) -> Seq {
        self.run.push(entry)
    }

    /// Appends the entry that `pack` writes, for an appender that has the entry's parts but
    /// not an `E` (building one would cost more than packing it). `pack` must write exactly
    /// what [`Pack::pack`] writes for that entry, so that it reads back as one.
    pub fn append_with(&mut self, pack: impl FnOnce(Slot, &mut E::Dict, &mut Vec<u8>)) -> Seq {
        self.run.push_with(pack)
    }
}

impl<E: Pack> std::fmt::Debug for PackedWriter<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWriter").finish_non_exhaustive()
    }
}

impl<E: Pack> PackedWriter<E> {
    /// Appends `entry`; returns its sequence number.
    pub fn append(&self, entry: &E) -> Seq {
        self.run.lock().push(entry)
    }

    /// Holds the run's log for a series of appends: readers of the run wait until the
    /// appender is dropped, so hold it for one burst of work, not across an await.
    ///
    /// ```
    /// use quorate_protocols::RunId;
    /// use quorate_state::{PackedLog, Seq};
    ///
    /// let log = PackedLog::<u64>::new();
    /// let run = RunId::from_u128(1);
    /// let writer = log.writer(run);
    /// {
    ///     let mut held = writer.hold();
    ///     assert_eq!(held.append(&5), Seq(0));
    ///     assert_eq!(held.append(&300), Seq(1));
    /// }
    /// assert_eq!(log.read_now(run, Seq(0), 10), vec![(Seq(0), 5), (Seq(1), 300)]);
    /// ```
    pub fn hold(&self) -> PackedAppender<'_, E> {
        PackedAppender {
            run: self.run.lock(),
        }
    }
}

impl<E: Pack> Default for PackedLog<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Pack> PackedLog<E> {
    /// An empty log.
    #[must_use]
    pub fn new() -> Self {
        Self {
            runs: DashMap::new(),
        }
    }

    fn run(&self, run: RunId) -> Arc<Mutex<Packed<E>>> {
        self.runs
            .entry(run)
            .or_insert_with(|| Arc::new(Mutex::new(Packed::new(run))))
            .clone()
    }

    /// A handle that appends to `run`'s log.
    pub fn writer(&self, run: RunId) -> PackedWriter<E> {
        PackedWriter { run: self.run(run) }
    }

    /// [`RunLog::append`], synchronously.
    pub fn append_now(&self, run: RunId, entry: &E) -> Seq {
        self.run(run).lock().push(entry)
    }

    /// [`RunLog::read`], synchronously.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] if an entry does not unpack (a bug in its [`Pack`] impl).
    pub fn try_read_now(
        &self,
        run: RunId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, E)>, StoreError> {
        let Some(log) = self.runs.get(&run).map(|l| l.clone()) else {
            return Ok(Vec::new());
        };
        let log = log.lock();
        let from = usize::try_from(from.0).unwrap_or(usize::MAX);
        if from >= log.len {
            return Ok(Vec::new());
        }
        log.read(from, limit)
    }

    /// [`try_read_now`](Self::try_read_now) for callers that treat a corrupt entry as a bug.
    ///
    /// # Panics
    /// If an entry does not unpack.
    pub fn read_now(&self, run: RunId, from: Seq, limit: usize) -> Vec<(Seq, E)> {
        match self.try_read_now(run, from, limit) {
            Ok(entries) => entries,
            Err(e) => panic!("{e}"),
        }
    }

    /// Number of entries in `run`'s log.
    pub fn len(&self, run: RunId) -> usize {
        self.runs.get(&run).map_or(0, |l| l.lock().len)
    }

    /// Bytes the packed entries of `run` take.
    pub fn bytes(&self, run: RunId) -> usize {
        self.runs.get(&run).map_or(0, |l| l.lock().bytes())
    }
}

impl<E: Pack + Send + Sync> RunLog<E> for PackedLog<E>
where
    E::Dict: Sync,
{
    async fn append(&self, run: RunId, entry: E) -> Result<Seq, StoreError> {
        Ok(self.append_now(run, &entry))
    }

    async fn read(&self, run: RunId, from: Seq, limit: usize) -> Result<Vec<(Seq, E)>, StoreError> {
        self.try_read_now(run, from, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A varint of the entry's value mixed with its position (to prove `at` is passed right).
    /// Its dictionary counts the entries packed in the chunk, to prove it starts afresh at
    /// every chunk.
    #[derive(Clone, Debug, PartialEq)]
    struct N(u64);

    impl Pack for N {
        type Dict = u64;
        fn pack(&self, at: Slot, packed: &mut u64, out: &mut Vec<u8>) {
            assert_eq!(
                *packed,
                at.seq.0 % CHUNK as u64,
                "a fresh dictionary per chunk"
            );
            *packed += 1;
            put_varint(out, self.0 ^ at.seq.0);
        }
        fn unpack(at: Slot, _: &mut u64, input: &mut &[u8]) -> Option<Self> {
            take_varint(input).map(|v| N(v ^ at.seq.0))
        }
    }

    /// Packs one byte; a zero byte does not unpack (a stand-in for a broken `Pack` impl).
    #[derive(Clone, Debug, PartialEq)]
    struct Fragile(u8);

    impl Pack for Fragile {
        type Dict = ();
        fn pack(&self, _: Slot, _: &mut (), out: &mut Vec<u8>) {
            out.push(self.0);
        }
        fn unpack(_: Slot, _: &mut (), input: &mut &[u8]) -> Option<Self> {
            let (&b, rest) = input.split_first()?;
            *input = rest;
            (b != 0).then_some(Fragile(b))
        }
    }

    #[test]
    fn an_entry_that_does_not_unpack_is_an_error_not_a_shorter_log() {
        let log = PackedLog::new();
        let run = RunId::from_u128(1);
        for b in [3, 0, 4] {
            log.append_now(run, &Fragile(b));
        }
        assert_eq!(
            log.try_read_now(run, Seq(0), 1),
            Ok(vec![(Seq(0), Fragile(3))])
        );
        assert!(matches!(
            log.try_read_now(run, Seq(0), 10),
            Err(StoreError::Corrupt { .. })
        ));
        assert!(
            matches!(
                log.try_read_now(run, Seq(2), 10),
                Err(StoreError::Corrupt { .. })
            ),
            "entries before the start are decoded too (they may define names)"
        );
    }

    #[test]
    fn reads_across_chunks_from_any_position() {
        let log = PackedLog::new();
        let run = RunId::from_u128(1);
        let other = RunId::from_u128(2);
        let n = 3 * CHUNK as u64 + 17;
        for i in 0..n {
            assert_eq!(log.append_now(run, &N(i * 1000)), Seq(i));
        }
        let writer = log.writer(other);
        for e in [N(5), N(6)] {
            writer.append(&e);
        }
        assert_eq!(log.len(run), n as usize);
        for from in [
            0,
            1,
            CHUNK as u64 - 1,
            CHUNK as u64,
            2 * CHUNK as u64 + 5,
            n - 1,
        ] {
            let got = log.read_now(run, Seq(from), 3);
            let want: Vec<(Seq, N)> = (from..(from + 3).min(n))
                .map(|i| (Seq(i), N(i * 1000)))
                .collect();
            assert_eq!(got, want, "from {from}");
        }
        assert!(log.read_now(run, Seq(n), 5).is_empty());
        assert_eq!(log.read_now(run, Seq(0), usize::MAX).len(), n as usize);
        assert_eq!(
            log.read_now(other, Seq(0), 10),
            vec![(Seq(0), N(5)), (Seq(1), N(6))]
        );
        assert!(log.read_now(RunId::from_u128(3), Seq(0), 10).is_empty());
        assert!(log.bytes(run) < n as usize * 4, "varints stay small");
    }
}
