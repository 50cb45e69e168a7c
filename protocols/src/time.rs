//! The one time type of every core: [`Millis`].

/// A time, in milliseconds, on the clock of whoever drives a core: every `handle_*` of the
/// supervisor, peer and worker cores takes one as `now`, and every deadline a core hands out
/// (an attempt timeout, a tool call's) is one. The cores never read a clock: an actix shell
/// reads its monotonic clock at the edge (milliseconds since its run or worker started,
/// `quorate_workers::edge::Clock`) and turns deadlines back into instants for its timers; the
/// simulator's clock is virtual. Only differences and order matter, so two drivers may start
/// their clocks at different times.
pub type Millis = u64;

/// `duration` in whole milliseconds (saturating): how a core turns a configured timeout into
/// [`Millis`].
#[must_use]
pub fn millis(duration: std::time::Duration) -> Millis {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
