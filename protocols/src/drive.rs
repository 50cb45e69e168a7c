//! The vocabulary every core's drive loop shares (`quorate_coordinator::drive` for the supervisor
//! core, `quorate_coordinator::peer::drive` for the peer core, `quorate_workers::drive` for the
//! worker core).
//!
//! A core returns effects; its driver (an actix shell, a process shell, the simulator, a test
//! harness, the fuzz target) carries each one out through an environment: the store, the clock,
//! the sends and the log. A request that the environment answers at once ([`Answer::Now`]) is fed
//! back to the core by the drive loop itself; one answered later ([`Answer::Later`], an etcd call
//! in flight, a tool's future) is fed back by the driver when it arrives, followed by another
//! drive. [`Flow::Halt`] lets an environment end a drain early (the simulator's crash cut, a
//! stopped run).
//!
//! ```
//! use quorate_protocols::drive::{Answer, Flow};
//!
//! let now: Answer<u32> = Answer::Now(7);
//! assert_eq!(now.now(), Some(7));
//! assert_eq!(Answer::<u32>::Later.now(), None);
//! assert!(Flow::Continue.goes_on());
//! ```

/// What an environment made of a request an effect carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Answer<T> {
    /// Answered at once: the drive loop hands this to the core before the next effect.
    Now(T),
    /// In flight: the driver hands the answer to the core when it arrives, then drives again.
    Later,
}

impl<T> Answer<T> {
    /// The answer, if it came at once.
    pub fn now(self) -> Option<T> {
        match self {
            Answer::Now(t) => Some(t),
            Answer::Later => None,
        }
    }
}

/// What one drive of a core came to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Drained<E> {
    /// The answers given at once that the core refused on the way, in order (typed: which
    /// input was wrong). Allocates only if one was refused.
    pub refused: Vec<E>,
    /// [`Flow::Halt`] if the environment ended the drain with effects left queued;
    /// [`Flow::Continue`] if the core has none left.
    pub flow: Flow,
}

/// Whether a drive loop goes on after an effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Flow {
    /// Carry out the next effect.
    Continue,
    /// Stop draining now; the effects not yet polled stay queued in the core.
    Halt,
}

impl Flow {
    /// Whether the loop goes on.
    #[must_use]
    pub fn goes_on(self) -> bool {
        self == Flow::Continue
    }
}
