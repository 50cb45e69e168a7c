//! [`ChaosLink`]: an actor between two others that delivers each message as [`Chaos`] decides.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;

use crate::chaos::{Chaos, ChaosCounts};
use quorate_workers::Envelopes;

/// Forwards every `M` to `target`, duplicated, delayed, reordered or dropped-and-re-sent as the
/// shared seeded [`Chaos`] decides. A message carrying several envelopes is cut into one message
/// per envelope first, so each envelope meets the chaos on its own.
pub struct ChaosLink<M: Message<Result = ()> + Send> {
    target: Recipient<M>,
    chaos: Arc<Mutex<Chaos>>,
}

impl<M: Message<Result = ()> + Send> std::fmt::Debug for ChaosLink<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosLink").finish_non_exhaustive()
    }
}

impl<M: Message<Result = ()> + Send> ChaosLink<M> {
    /// A link to `target` drawing decisions from `chaos`.
    pub fn new(target: Recipient<M>, chaos: Arc<Mutex<Chaos>>) -> Self {
        Self { target, chaos }
    }

    /// What the shared chaos did so far.
    pub fn counts(chaos: &Arc<Mutex<Chaos>>) -> ChaosCounts {
        chaos.lock().map(|c| c.counts()).unwrap_or_default()
    }
}

impl<M: Message<Result = ()> + Send + Clone + Unpin + 'static> Actor for ChaosLink<M> {
    type Context = Context<Self>;
}

impl<M: Message<Result = ()> + Envelopes + Send + Clone + Unpin + 'static> Handler<M>
    for ChaosLink<M>
{
    type Result = ();

    fn handle(&mut self, msg: M, ctx: &mut Self::Context) {
        for part in msg.split() {
            self.forward(part, ctx);
        }
    }
}

impl<M: Message<Result = ()> + Send + Clone + Unpin + 'static> ChaosLink<M> {
    fn forward(&mut self, msg: M, ctx: &mut Context<Self>) {
        let delays = match self.chaos.lock() {
            Ok(mut chaos) => chaos.deliveries(),
            Err(_) => vec![0],
        };
        for delay in delays {
            if delay == 0 {
                self.target.do_send(msg.clone());
            } else {
                let target = self.target.clone();
                let copy = msg.clone();
                ctx.run_later(Duration::from_millis(delay), move |_, _| {
                    target.do_send(copy)
                });
            }
        }
    }
}
