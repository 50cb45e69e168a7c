//! Where fresh ids come from: [`IdSource`], a small seeded generator that every core is handed.
//!
//! The cores (supervisor, peer, worker) read no clock and no operating-system randomness: the
//! ids they mint (task-id prefixes, dedupe keys, correlation ids, the ids of delegated
//! sub-tasks) are drawn from the `IdSource` they were built with. A seeded source makes a run
//! reproducible id for id (the simulator seeds one per schedule); a production run's shell seeds
//! it from the operating system (`quorate_workers::edge::random_ids`), so ids stay random there.

use uuid::Uuid;

use crate::{AgentId, CorrelationId, DedupeKey, RecordId, RunId, TaskId};

/// A deterministic source of fresh ids: the same seed and epoch give the same ids, in the same
/// order. Ids stay well-formed uuids (v4 for tasks, agents and dedupe keys; v7 for runs,
/// correlation ids and records), so nothing on the wire or in a store changes.
///
/// The generator is wyrand ([`fastrand::Rng`]): 64 bits of state, one multiply per 64 bits, no
/// lock and no syscall. Ids need to be unique, not secret: nothing in quorate treats an id as a
/// credential (a reply is authenticated by its sender, attempt and version, and a forged one is
/// refused before its dedupe key is noted). A source does not repeat within 2^64 draws, and the
/// streams of two sources overlap only if their seeds fall within the draws made (about 2n/2^64
/// for n ids), so sources seeded from the operating system, or [forked](Self::fork) from one,
/// do not collide in practice.
///
/// A v7 id carries the source's epoch (Unix milliseconds, given by whoever built the source:
/// the time its run or process started; 0 for [`seeded`](Self::seeded) sources) as its
/// timestamp, then a 42-bit counter that starts at a random value below 2^41 and grows by one
/// per v7 id, then 32 random bits. v7 ids of one source therefore sort in the order they were
/// drawn, and those of sources built in different milliseconds by their epochs.
///
/// ```
/// use quorate_protocols::IdSource;
///
/// let (mut a, mut b) = (IdSource::seeded(7), IdSource::seeded(7));
/// assert_eq!(a.dedupe_key(), b.dedupe_key());
/// assert_eq!(a.correlation_id(), b.correlation_id());
/// assert_ne!(IdSource::seeded(8).dedupe_key(), IdSource::seeded(7).dedupe_key());
/// ```
#[derive(Clone, Debug)]
pub struct IdSource {
    rng: fastrand::Rng,
    epoch_ms: u64,
    /// The v7 counter (42 bits used).
    counter: u64,
}

impl IdSource {
    /// A source seeded with `seed` whose v7 ids carry the timestamp `epoch_ms` (Unix
    /// milliseconds; a shell passes the time its run started).
    #[must_use]
    pub fn new(seed: u64, epoch_ms: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let counter = rng.u64(..1 << 41);
        Self {
            rng,
            epoch_ms,
            counter,
        }
    }

    /// A source seeded with `seed` at epoch 0: for simulations and tests.
    #[must_use]
    pub fn seeded(seed: u64) -> Self {
        Self::new(seed, 0)
    }

    /// A new source for another core (a worker of this run, a resumed supervisor), seeded from
    /// this one, with the same epoch. Deterministic like every other draw.
    #[must_use]
    pub fn fork(&mut self) -> Self {
        Self::new(self.rng.u64(..), self.epoch_ms)
    }

    /// The timestamp this source's v7 ids carry (Unix milliseconds).
    #[must_use]
    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    /// RFC 9562 v4 from 128 random bits, with version and variant set: bit for bit
    /// `uuid::Builder::from_random_bytes(bits.to_le_bytes())`, in a few integer operations
    /// (every envelope draws one).
    fn v4(&mut self) -> Uuid {
        let v = self.rng.u128(..).swap_bytes();
        Uuid::from_u128((v & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62))
    }

    /// RFC 9562 v7: the epoch, then the counter in `rand_a` (its top 12 of 42 bits) and at the
    /// head of `rand_b` (its low 30), then 32 random bits, with version and variant.
    ///
    /// Built as one integer (every envelope draws one): bit for bit what
    /// `uuid::Builder::from_unix_timestamp_millis` makes of the same fields (see the test).
    fn v7(&mut self) -> Uuid {
        self.counter = (self.counter + 1) & ((1 << 42) - 1);
        let high = self.counter >> 30;
        let rand_b = ((self.counter & ((1 << 30) - 1)) << 32) | u64::from(self.rng.u32(..));
        let millis = u128::from(self.epoch_ms & ((1 << 48) - 1));
        Uuid::from_u128(
            (millis << 80)
                | (0x7 << 76)
                | (u128::from(high & 0xfff) << 64)
                | (0x2 << 62)
                | u128::from(rand_b & (u64::MAX >> 2)),
        )
    }

    /// A fresh run id (v7).
    pub fn run_id(&mut self) -> RunId {
        RunId::from_uuid(self.v7())
    }

    /// A fresh task id (v4), for a task that is not a plan node (a delegated sub-task, a node a
    /// replan added).
    pub fn task_id(&mut self) -> TaskId {
        TaskId::from_uuid(self.v4())
    }

    /// A fresh run prefix for [`TaskId::minted`] ids: the upper 96 bits of a v4 id.
    pub fn task_prefix(&mut self) -> u128 {
        self.v4().as_u128() & !TaskId::INDEX_BITS
    }

    /// A fresh agent id (v4).
    pub fn agent_id(&mut self) -> AgentId {
        AgentId::from_uuid(self.v4())
    }

    /// A fresh correlation id (v7).
    pub fn correlation_id(&mut self) -> CorrelationId {
        CorrelationId::from_uuid(self.v7())
    }

    /// A fresh dedupe key (v4).
    pub fn dedupe_key(&mut self) -> DedupeKey {
        DedupeKey::from_uuid(self.v4())
    }

    /// A fresh provenance record id (v7).
    pub fn record_id(&mut self) -> RecordId {
        RecordId::from_uuid(self.v7())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer-built ids are bit for bit what the `uuid` builders make of the same draws
    /// (so a seed gives the ids it gave before they were built this way).
    #[test]
    fn ids_match_the_uuid_builders() {
        for (seed, epoch) in [(1, 0), (7, 1_764_000_000_000), (9, u64::MAX), (3, 1 << 47)] {
            let mut ours = IdSource::new(seed, epoch);
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut counter = rng.u64(..1 << 41);
            for n in 0..2000 {
                if n % 2 == 0 {
                    let want =
                        uuid::Builder::from_random_bytes(rng.u128(..).to_le_bytes()).into_uuid();
                    assert_eq!(ours.v4(), want, "v4, seed {seed}, draw {n}");
                } else {
                    counter = (counter + 1) & ((1 << 42) - 1);
                    let high = counter >> 30;
                    let rand_b = ((counter & ((1 << 30) - 1)) << 32) | u64::from(rng.u32(..));
                    let mut tail = [0u8; 10];
                    tail[0] = ((high >> 8) & 0x0f) as u8;
                    tail[1] = (high & 0xff) as u8;
                    tail[2..].copy_from_slice(&rand_b.to_be_bytes());
                    let want = uuid::Builder::from_unix_timestamp_millis(epoch, &tail).into_uuid();
                    assert_eq!(ours.v7(), want, "v7, seed {seed}, epoch {epoch}, draw {n}");
                }
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_ids_and_another_seed_others() {
        let draw = |seed| {
            let mut ids = IdSource::new(seed, 1_700_000_000_000);
            let mut fork = ids.fork();
            (
                ids.run_id(),
                ids.task_prefix(),
                ids.dedupe_key(),
                ids.correlation_id(),
                fork.agent_id(),
                fork.record_id(),
            )
        };
        assert_eq!(draw(3), draw(3));
        let (a, b) = (draw(3), draw(4));
        assert_ne!(a.0, b.0);
        assert_ne!(a.1, b.1);
        assert_ne!(a.2, b.2);
        assert_ne!(a.3, b.3);
        assert_ne!(a.4, b.4);
        assert_ne!(a.5, b.5);
    }

    #[test]
    fn v7_ids_of_one_source_sort_in_order_and_carry_its_epoch() {
        let epoch = 1_764_633_600_000; // 2025-12-02T00:00:00Z
        let mut ids = IdSource::new(9, epoch);
        let made: Vec<CorrelationId> = (0..10_000).map(|_| ids.correlation_id()).collect();
        assert!(made.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        for id in [made[0], made[9_999]] {
            assert_eq!(id.as_uuid().get_version_num(), 7);
            assert_eq!(id.as_uuid().get_variant(), uuid::Variant::RFC4122);
            let (secs, nanos) = id.as_uuid().get_timestamp().expect("v7").to_unix();
            assert_eq!(secs * 1000 + u64::from(nanos / 1_000_000), epoch);
        }
        // A source built a millisecond later sorts after, whatever its counter.
        let later = IdSource::new(10, epoch + 1).run_id();
        assert!(later > IdSource::new(9, epoch).run_id());
    }

    #[test]
    fn v4_ids_are_well_formed_and_unique_across_forked_sources() {
        let mut root = IdSource::seeded(1);
        let mut all = std::collections::HashSet::new();
        for _ in 0..4 {
            let mut ids = root.fork();
            for _ in 0..20_000 {
                let id = ids.dedupe_key();
                assert_eq!(id.as_uuid().get_version_num(), 4);
                assert_eq!(id.as_uuid().get_variant(), uuid::Variant::RFC4122);
                assert!(all.insert(id), "{id} drawn twice");
            }
        }
        // The 122 random bits are all used: every one of them varies.
        let bits: Vec<u128> = all.iter().map(|id| id.as_uuid().as_u128()).collect();
        let varies = bits.iter().fold(0u128, |acc, &v| acc | (v ^ bits[0]));
        assert_eq!(varies.count_ones(), 122);
    }

    #[test]
    fn a_task_prefix_leaves_the_index_bits_free() {
        let mut ids = IdSource::seeded(5);
        let prefix = ids.task_prefix();
        assert_eq!(prefix & 0xffff_ffff, 0);
        let id = TaskId::minted(prefix, 7);
        assert_eq!((id.prefix(), id.index()), (prefix, 7));
        assert_ne!(ids.task_prefix(), prefix);
    }
}
