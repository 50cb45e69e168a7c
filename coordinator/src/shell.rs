//! What the supervisor and peer actors share as shells: the run clock the cores read, the one
//! timer armed for a core's next deadline, and the first-writer-wins commit of a result.

use std::time::Duration;

use actix::prelude::*;
use quorate_state::{CasOutcome, MemoryStore, Versioned};

/// Milliseconds since the run started: the time every core input carries (the clock is read
/// here, at the edge, never in a core).
pub(crate) type RunClock = quorate_workers::edge::Clock;

/// The message an actor's armed timer delivers.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Tick;

/// The one timer an actor keeps for its core's next deadline.
#[derive(Debug, Default)]
pub(crate) struct Wakeup(Option<(SpawnHandle, u64)>);

impl Wakeup {
    /// Arms the timer for `next` (run milliseconds), if any. It is re-armed only when the
    /// deadline moved earlier: a timer that fires early just ticks the core for nothing, which
    /// we judged cheaper than cancelling and re-spawning a timer per input (not measured).
    pub(crate) fn arm<A>(&mut self, ctx: &mut Context<A>, clock: RunClock, next: Option<u64>)
    where
        A: Actor<Context = Context<A>> + Handler<Tick>,
    {
        match (self.0, next) {
            (Some((_, armed)), Some(at)) if armed <= at => {}
            (old, next) => {
                if let Some((handle, _)) = old {
                    ctx.cancel_future(handle);
                }
                self.0 = next.map(|at| {
                    let wait = Duration::from_millis(at.saturating_sub(clock.now()));
                    (ctx.notify_later(Tick, wait), at)
                });
            }
        }
    }

    /// The timer fired: nothing is armed any more.
    pub(crate) fn fired(&mut self) {
        self.0 = None;
    }
}

/// Commits `value` under `key` unless a result is there already: the first writer wins, and a
/// later commit never overwrites it. `None` when this commit went in; the stored result when
/// the key was taken, for the caller to adopt. The key moves into the store (no copy of its
/// text per task).
pub(crate) fn commit_result(
    store: &MemoryStore<quorate_protocols::Payload>,
    key: String,
    value: quorate_protocols::Payload,
) -> Option<Versioned<quorate_protocols::Payload>> {
    // The store holds the result the core holds (one value, shared), not a copy of it.
    match store.create_now(key, value) {
        CasOutcome::Committed(_) => None,
        CasOutcome::Conflict { current } => current,
    }
}
