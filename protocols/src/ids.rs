//! Identifier newtypes.
//!
//! Every id is a [`Uuid`] wrapped in its own type, so a `TaskId` can never be passed where a
//! `RunId` is expected. Ids whose creation order matters (runs, correlation ids, records) use UUID
//! v7, which sorts by creation time; the others use v4. The random bits of both come from a
//! thread-local generator, without a syscall or a lock per id (see [`random_bits`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

thread_local! {
    /// This thread's id generator, seeded from the operating system's randomness through std's
    /// per-thread `RandomState` keys. (fastrand's own thread-local generator is seeded from the
    /// time and the thread id with fixed hash keys: two processes could start alike.)
    static IDS: std::cell::RefCell<fastrand::Rng> = std::cell::RefCell::new({
        use std::hash::BuildHasher;
        let keys = std::collections::hash_map::RandomState::new();
        fastrand::Rng::with_seed(keys.hash_one(std::thread::current().id()))
    });
}

/// 128 random bits from this thread's wyrand generator ([`fastrand::Rng`], see `IDS`).
///
/// Ids need to be unique, not secret: nothing in quorate treats an id as a credential (a reply
/// is authenticated by its sender, attempt and version, and a forged one is refused before its
/// dedupe key is noted). A thread's generator does not repeat within 2^64 draws, and the
/// streams of two threads (or processes) overlap only if their seeds fall within the draws
/// made (about 2n/2^64 for n ids). Replacing the uuid crate's `fast-rng` (ChaCha) with this
/// saved ~190 of ~9 900 instructions per task in `bench dag` (callgrind, 200 x 500).
fn random_bits() -> u128 {
    IDS.with(|rng| rng.borrow_mut().u128(..))
}

fn new_v4() -> Uuid {
    uuid::Builder::from_random_bytes(random_bits().to_le_bytes()).into_uuid()
}

/// Where this thread's v7 sequence stands.
#[derive(Clone, Copy)]
struct V7State {
    millis: u64,
    counter: u64,
}

thread_local! {
    static V7: std::cell::Cell<V7State> = const {
        std::cell::Cell::new(V7State { millis: 0, counter: 0 })
    };
}

/// A UUID v7 (RFC 9562): the Unix time in milliseconds, then a counter that starts at a random
/// value whenever the millisecond moves on and grows by one per id, then random bits. Ids sort
/// by their millisecond; ids made on one thread also sort in the order they were made (within a
/// millisecond, ids of different threads are ordered by their counters, not by creation). The
/// counter is per thread, so no lock is taken (the uuid crate's `now_v7` shares one context
/// across threads behind a lock).
fn now_v7() -> Uuid {
    V7.with(|cell| {
        let mut st = cell.get();
        let random = random_bits().to_le_bytes();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        if now > st.millis {
            st.millis = now;
            // A random start below 2^41: at least 2^41 ids fit in the millisecond.
            st.counter = u64::from_be_bytes([
                0,
                0,
                random[0] & 0x01,
                random[1],
                random[2],
                random[3],
                random[4],
                random[5],
            ]);
        }
        st.counter += 1;
        cell.set(st);
        // rand_a (12 bits) takes the counter's top 12 of 42 bits; rand_b (62 bits) its low 30,
        // then 32 random bits. The builder adds the version and variant around them.
        let high = st.counter >> 30;
        let rand_b = ((st.counter & ((1 << 30) - 1)) << 32)
            | u64::from(u32::from_be_bytes([
                random[6], random[7], random[8], random[9],
            ]));
        let mut tail = [0u8; 10];
        tail[0] = ((high >> 8) & 0x0f) as u8;
        tail[1] = (high & 0xff) as u8;
        tail[2..].copy_from_slice(&rand_b.to_be_bytes());
        uuid::Builder::from_unix_timestamp_millis(st.millis, &tail).into_uuid()
    })
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $gen:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh, random id.
            #[must_use]
            pub fn new() -> Self {
                Self($gen())
            }

            /// Wraps an existing uuid (for ids read back from a store or a seeded simulation).
            #[must_use]
            pub const fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// A deterministic id built from a 128-bit number; for seeded simulations and tests.
            #[must_use]
            pub const fn from_u128(value: u128) -> Self {
                Self(Uuid::from_u128(value))
            }

            /// The wrapped uuid.
            #[must_use]
            pub const fn as_uuid(&self) -> &Uuid {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

uuid_id!(
    /// One execution of a plan. UUID v7: run ids sort by start time.
    RunId,
    now_v7
);
uuid_id!(
    /// One task of a run (a node of the plan DAG, or a sub-task an agent delegated).
    TaskId,
    new_v4
);
/// The layout of the task ids a supervisor mints for a run: a prefix drawn at random per run
/// (the 96 upper bits of a v4 id) with the node index in the low 32 bits. The supervisor finds a
/// reply's task from it and a worker keeps its records by it, without a map; the ids are names,
/// not secrets.
impl TaskId {
    const INDEX_BITS: u128 = 0xffff_ffff;

    /// A fresh random run prefix for [`minted`](Self::minted) ids.
    #[must_use]
    pub fn fresh_prefix() -> u128 {
        TaskId::new().as_uuid().as_u128() & !Self::INDEX_BITS
    }

    /// The id of node `index` under run prefix `prefix`.
    ///
    /// ```
    /// use quorate_protocols::TaskId;
    /// let prefix = TaskId::fresh_prefix();
    /// let id = TaskId::minted(prefix, 7);
    /// assert_eq!((id.prefix(), id.index()), (prefix, 7));
    /// ```
    #[must_use]
    pub fn minted(prefix: u128, index: u32) -> TaskId {
        TaskId::from_u128((prefix & !Self::INDEX_BITS) | u128::from(index))
    }

    /// The run prefix part of the id (whatever minted it).
    #[must_use]
    pub fn prefix(&self) -> u128 {
        self.as_uuid().as_u128() & !Self::INDEX_BITS
    }

    /// The node index part of the id (meaningful for minted ids only).
    #[must_use]
    pub fn index(&self) -> u32 {
        (self.as_uuid().as_u128() & Self::INDEX_BITS) as u32
    }
}

uuid_id!(
    /// One agent: a worker, a peer or the supervisor itself.
    AgentId,
    new_v4
);
uuid_id!(
    /// Ties a reply to the request it answers. UUID v7, so a log sorted by it is in send order
    /// (to the millisecond; exactly for ids made on one thread).
    CorrelationId,
    now_v7
);
uuid_id!(
    /// The first sighting of a dedupe key wins; every later envelope carrying it is a duplicate.
    DedupeKey,
    new_v4
);
uuid_id!(
    /// Identifies one [`ProvenanceRecord`](crate::ProvenanceRecord). UUID v7: records sort by
    /// creation (to the millisecond; exactly for ids made on one thread).
    RecordId,
    now_v7
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v7_ids_made_on_one_thread_sort_in_order_and_carry_the_time() {
        let ids: Vec<CorrelationId> = (0..10_000).map(|_| CorrelationId::new()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        for id in [ids[0], ids[9_999]] {
            assert_eq!(id.as_uuid().get_version_num(), 7);
            assert_eq!(id.as_uuid().get_variant(), uuid::Variant::RFC4122);
        }
        let (secs, _) = ids[9_999].as_uuid().get_timestamp().expect("v7").to_unix();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(now.abs_diff(secs) <= 2, "timestamp {secs} vs clock {now}");
    }

    #[test]
    fn a_v7_id_made_after_a_pause_carries_the_later_time() {
        let ms = |id: CorrelationId| {
            let (s, n) = id.as_uuid().get_timestamp().expect("v7").to_unix();
            s * 1000 + u64::from(n / 1_000_000)
        };
        let before = CorrelationId::new();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let after = CorrelationId::new();
        assert!(
            ms(after) >= ms(before) + 20,
            "{} vs {}",
            ms(after),
            ms(before)
        );
    }

    #[test]
    fn v4_ids_are_well_formed_and_unique_across_threads() {
        let per_thread =
            |_| std::thread::spawn(|| (0..20_000).map(|_| DedupeKey::new()).collect::<Vec<_>>());
        let threads: Vec<_> = (0..4).map(per_thread).collect();
        let mut all = std::collections::HashSet::new();
        for t in threads {
            for id in t.join().unwrap() {
                assert_eq!(id.as_uuid().get_version_num(), 4);
                assert_eq!(id.as_uuid().get_variant(), uuid::Variant::RFC4122);
                assert!(all.insert(id), "{id} drawn twice");
            }
        }
        // The 122 random bits are all used: every one of them varies.
        let ids: Vec<u128> = all.iter().map(|id| id.as_uuid().as_u128()).collect();
        let varies = ids.iter().fold(0u128, |acc, &v| acc | (v ^ ids[0]));
        assert_eq!(varies.count_ones(), 122);
    }

    #[test]
    fn fresh_ids_differ_and_v7_sorts_by_creation() {
        let a = RunId::new();
        let b = RunId::new();
        assert_ne!(a, b);
        assert!(a < b, "v7 ids are time ordered: {a} !< {b}");
        assert_ne!(TaskId::new(), TaskId::new());
    }

    #[test]
    fn record_ids_are_v7_and_keep_their_formats() {
        let (a, b) = (RecordId::new(), RecordId::new());
        assert!(a < b, "v7 ids are time ordered: {a} !< {b}");
        assert_eq!(a.as_uuid().get_version_num(), 7);
        let id = RecordId::from_u128(7);
        assert_eq!(
            format!("{id:?}"),
            "RecordId(00000000-0000-0000-0000-000000000007)"
        );
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"00000000-0000-0000-0000-000000000007\"");
        assert_eq!(serde_json::from_str::<RecordId>(&json).unwrap(), id);
    }

    #[test]
    fn ids_serialize_as_plain_uuid_strings() {
        let id = TaskId::from_u128(7);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"00000000-0000-0000-0000-000000000007\"");
        let back: TaskId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, id);
    }
}
