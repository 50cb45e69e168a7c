//! Where the real world enters quorate: the operating system's randomness and the wall clock.
//!
//! The cores (supervisor, peer and worker cores, the gate, the ledgers) and `quorate-protocols`
//! read neither: ids come from the [`IdSource`] a core is built with, and time comes in as a
//! [`Millis`] argument of every handler. The shells (the actix actors, the run functions, the
//! CLI) build both here: [`random_ids`] for a production run's ids and [`Clock`] for its time.
//! The simulator builds neither: it seeds an `IdSource` from its schedule's seed and keeps a
//! virtual clock, so a seed replays a run id for id.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use quorate_protocols::{IdSource, Millis};

/// An id source seeded from the operating system (std's per-process random hash keys, which it
/// draws from the OS), with the wall clock's Unix milliseconds as its v7 epoch: a production
/// run's ids. Two calls give unrelated sources.
#[must_use]
pub fn random_ids() -> IdSource {
    use std::hash::BuildHasher;
    // `RandomState::new` draws fresh keys per call (the process's OS-seeded keys, advanced);
    // hashing the time and thread as well keeps two sources apart even if keys repeated.
    let keys = std::collections::hash_map::RandomState::new();
    let epoch = unix_millis();
    let seed = keys.hash_one((std::thread::current().id(), Instant::now(), epoch));
    IdSource::new(seed, epoch)
}

/// The wall clock, in Unix milliseconds (0 before 1970).
fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A monotonic clock that reads [`Millis`] since it started: the time a shell hands its core.
/// [`instant`](Self::instant) turns a core's deadline back into an [`Instant`] for a timer.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    /// A clock whose zero is now.
    #[must_use]
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// A clock whose zero is `start`.
    #[must_use]
    pub fn since(start: Instant) -> Self {
        Self(start)
    }

    /// Now, in milliseconds since the clock's zero.
    #[must_use]
    pub fn now(&self) -> Millis {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The instant `at` milliseconds after the clock's zero.
    #[must_use]
    pub fn instant(&self, at: Millis) -> Instant {
        self.0 + Duration::from_millis(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_sources_differ_and_carry_the_wall_clock() {
        let (mut a, mut b) = (random_ids(), random_ids());
        assert_ne!(a.dedupe_key(), b.dedupe_key());
        let ms = |id: quorate_protocols::RunId| {
            let (s, n) = id.as_uuid().get_timestamp().expect("v7").to_unix();
            s * 1000 + u64::from(n / 1_000_000)
        };
        assert!(unix_millis().abs_diff(ms(a.run_id())) < 2_000);
    }

    #[test]
    fn a_clock_reads_millis_and_gives_instants_back() {
        let start = Instant::now();
        let clock = Clock::since(start);
        assert_eq!(clock.instant(250), start + Duration::from_millis(250));
        std::thread::sleep(Duration::from_millis(5));
        assert!(clock.now() >= 5);
    }
}
