//! The run's phase: one value instead of a handful of flags, so that a combination that cannot
//! happen (a drain that is over but never began, a replan half done in a run that was not
//! resumed, a stop requested after the run stopped) cannot be written down either.
//!
//! ```text
//!   new ──► Running ──request_stop──► Stopping ─┐
//!    │        │                                 │ every task ended, a worker still owes an
//!    │        │ every task ended, a worker      │ acknowledgement (hold_for_acks)
//!    │        │ still owes an acknowledgement   ▼
//!    │        └───────────────────────────► Draining ──tick at `until`──► Stopped
//!    │                                          (every task ended, nothing owed) ──► Stopped
//!  replay ──► Replayed ──begin──► Running or Stopping
//! ```
//!
//! The transitions are pure methods; the core records what they mean (`stop-requested`,
//! `run-stopped`).

use crate::StopReason;

/// A store precondition failed with a fallback plan at hand, and the replayed log holds no
/// `replanned` after it: the crash came in the middle of the replan, which the resumed run
/// carries out first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PendingReplan {
    /// The node whose precondition failed.
    pub(super) node: u32,
    /// What failed, as the log recorded it.
    pub(super) observation: String,
}

/// Where the run is. See the module docs for the transitions.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(super) enum RunPhase {
    /// Built by replaying a run log and not started yet: `start` continues the run, finishing
    /// what the log left half done (a stop that was requested, a replan that was begun).
    Replayed {
        /// The first stop cause the log requested.
        stop: Option<StopReason>,
        /// A replan the log began but did not finish.
        replan: Option<PendingReplan>,
    },
    /// Tasks are made ready and dispatched; no stop was requested.
    #[default]
    Running,
    /// A stop was requested (its first cause); nothing is dispatched any more, live tasks are
    /// cancelled, and the run stops once every task ended.
    Stopping(StopReason),
    /// Every task ended, but a worker told to stop has not acknowledged yet: the run waits for
    /// it until `until` (its actions and the replies behind it are counted), then stops with
    /// `stop` (or completes, if no stop was requested).
    Draining {
        /// The stop requested, if any.
        stop: Option<StopReason>,
        /// When the run stops regardless.
        until: u64,
    },
    /// The run is over, for this reason.
    Stopped(StopReason),
}

/// What [`RunPhase::on_tick`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum TickPhase {
    /// Tasks run (or a stop is under way): the deadline and attempt timeouts apply.
    Live,
    /// The run is over, or draining and not due yet: nothing to do.
    Idle,
    /// The drain is over: the run stops now, for this reason.
    DrainOver(StopReason),
}

impl RunPhase {
    /// A replay begins: the core will continue the run from its log.
    pub(super) fn replayed(&mut self) {
        if *self == RunPhase::Running {
            *self = RunPhase::Replayed {
                stop: None,
                replan: None,
            };
        }
    }

    /// Notes the first stop cause; `false` if one was noted before (or the run is over), in
    /// which case nothing changes.
    pub(super) fn request_stop(&mut self, reason: StopReason) -> bool {
        match self {
            RunPhase::Running => *self = RunPhase::Stopping(reason),
            RunPhase::Replayed { stop: s @ None, .. }
            | RunPhase::Draining { stop: s @ None, .. } => *s = Some(reason),
            _ => return false,
        }
        true
    }

    /// During a replay: the log shows node `node`'s store precondition failing while a fallback
    /// plan is at hand (a replan is under way until the log shows it done).
    pub(super) fn replan_begun(&mut self, node: u32, observation: String) {
        if let RunPhase::Replayed { replan, .. } = self {
            *replan = Some(PendingReplan { node, observation });
        }
    }

    /// During a replay: the replan under way is over (done, or refused and its task failed).
    pub(super) fn replan_over(&mut self) {
        if let RunPhase::Replayed { replan, .. } = self {
            *replan = None;
        }
    }

    /// During a replay: the node whose failed precondition began a replan, if one is under way.
    pub(super) fn replan_node(&self) -> Option<u32> {
        match self {
            RunPhase::Replayed {
                replan: Some(r), ..
            } => Some(r.node),
            _ => None,
        }
    }

    /// The run starts. A replayed run becomes running (or stopping, if its log requested a
    /// stop) and `Some` hands back the replan it must finish first (if any, and if no stop was
    /// requested); a fresh run gives `None`.
    pub(super) fn begin(&mut self) -> Option<Option<PendingReplan>> {
        let RunPhase::Replayed { stop, replan } = std::mem::take(self) else {
            return None;
        };
        match stop {
            Some(reason) => {
                *self = RunPhase::Stopping(reason);
                Some(None)
            }
            None => Some(replan),
        }
    }

    /// The stop requested, while the run has not stopped yet.
    pub(super) fn stopping(&self) -> Option<&StopReason> {
        match self {
            RunPhase::Stopping(r)
            | RunPhase::Replayed { stop: Some(r), .. }
            | RunPhase::Draining { stop: Some(r), .. } => Some(r),
            _ => None,
        }
    }

    /// Why the run stopped, once it has.
    pub(super) fn stopped(&self) -> Option<&StopReason> {
        match self {
            RunPhase::Stopped(r) => Some(r),
            _ => None,
        }
    }

    /// Ready tasks may be dispatched (no stop requested, not over).
    pub(super) fn dispatches(&self) -> bool {
        self.stopping().is_none() && self.stopped().is_none()
    }

    /// A new plan version may be adopted: the run is running (or replayed and not stopping).
    /// Once a stop was requested, or every task ended (draining), there is nothing to replan.
    pub(super) fn replans(&self) -> bool {
        matches!(
            self,
            RunPhase::Running | RunPhase::Replayed { stop: None, .. }
        )
    }

    /// Every task ended: `true` if the run must wait before it stops, because a worker still
    /// `owed` an acknowledgement (the wait begins, for `timeout` from `now`) or the wait began
    /// and its last acknowledgement just came (the run stops at the next tick, after the
    /// replies already on their way). `false`: the run may stop now.
    pub(super) fn hold_for_acks(&mut self, now: u64, timeout: u64, owed: bool) -> bool {
        match self {
            RunPhase::Draining { until, .. } => {
                if !owed {
                    *until = now;
                }
                true
            }
            RunPhase::Running if owed => {
                *self = RunPhase::Draining {
                    stop: None,
                    until: now + timeout,
                };
                true
            }
            RunPhase::Stopping(reason) if owed => {
                *self = RunPhase::Draining {
                    stop: Some(reason.clone()),
                    until: now + timeout,
                };
                true
            }
            _ => false,
        }
    }

    /// Time `now` came: what a tick has to do. A drain that is due ends here (the phase stays
    /// until [`finish`](Self::finish) records the stop).
    pub(super) fn on_tick(&self, now: u64) -> TickPhase {
        match self {
            RunPhase::Stopped(_) => TickPhase::Idle,
            RunPhase::Draining { stop, until } if now >= *until => {
                TickPhase::DrainOver(stop.clone().unwrap_or(StopReason::Completed))
            }
            RunPhase::Draining { .. } => TickPhase::Idle,
            _ => TickPhase::Live,
        }
    }

    /// The earliest time a tick has something to do, given `next`, the earliest deadline or
    /// attempt timeout: none once stopped, the drain's end while draining.
    pub(super) fn timeout(&self, next: Option<u64>) -> Option<u64> {
        match self {
            RunPhase::Stopped(_) => None,
            RunPhase::Draining { until, .. } => Some(*until),
            _ => next,
        }
    }

    /// The run stops for `reason`.
    pub(super) fn finish(&mut self, reason: StopReason) {
        *self = RunPhase::Stopped(reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replayed() -> RunPhase {
        let mut p = RunPhase::default();
        p.replayed();
        p
    }

    #[test]
    fn the_first_stop_cause_wins_and_stops_dispatching() {
        let mut p = RunPhase::default();
        assert!(p.dispatches() && p.replans());
        assert!(p.request_stop(StopReason::Deadline));
        assert!(
            !p.request_stop(StopReason::Cancelled),
            "a later cause is ignored"
        );
        assert_eq!(p.stopping(), Some(&StopReason::Deadline));
        assert!(!p.dispatches() && !p.replans());
        assert_eq!(p.stopped(), None);
        p.finish(StopReason::Deadline);
        assert_eq!(p.stopped(), Some(&StopReason::Deadline));
        assert!(!p.request_stop(StopReason::Cancelled), "over is over");
        assert_eq!(p.stopping(), None);
        assert_eq!(p.timeout(Some(5)), None);
        assert_eq!(p.on_tick(100), TickPhase::Idle);
    }

    #[test]
    fn a_drain_waits_for_acknowledgements_then_ends_at_its_deadline_or_the_next_tick() {
        // Nothing owed: no drain, the run may stop at once.
        let mut p = RunPhase::Stopping(StopReason::Cancelled);
        assert!(!p.hold_for_acks(10, 50, false));
        // Owed: the drain begins, bounded by the timeout; the stop cause is kept.
        assert!(p.hold_for_acks(10, 50, true));
        assert_eq!(
            p,
            RunPhase::Draining {
                stop: Some(StopReason::Cancelled),
                until: 60
            }
        );
        assert_eq!(p.stopping(), Some(&StopReason::Cancelled));
        assert_eq!(
            p.timeout(Some(20)),
            Some(60),
            "the drain's end, not the attempt's"
        );
        // Still owed later: the deadline does not move.
        assert!(p.hold_for_acks(30, 50, true));
        assert_eq!(p.on_tick(59), TickPhase::Idle);
        assert_eq!(p.on_tick(60), TickPhase::DrainOver(StopReason::Cancelled));
        // The last acknowledgement came: stop at the next tick.
        let mut q = RunPhase::Running;
        assert!(q.hold_for_acks(10, 50, true), "a replan's cancel is owed");
        assert!(!q.replans(), "every task ended: nothing to replan");
        assert!(q.hold_for_acks(20, 50, false));
        assert_eq!(q.on_tick(20), TickPhase::DrainOver(StopReason::Completed));
    }

    #[test]
    fn a_replayed_run_finishes_its_stop_or_its_replan_when_it_begins() {
        // A fresh run has nothing to finish.
        assert_eq!(RunPhase::Running.begin(), None);
        // A replan under way, no stop: handed back, and the run runs.
        let mut p = replayed();
        p.replan_begun(3, "config/x does not exist".into());
        assert_eq!(p.replan_node(), Some(3));
        let mut q = p.clone();
        q.replan_over();
        assert_eq!(q.replan_node(), None);
        assert_eq!(
            p.begin(),
            Some(Some(PendingReplan {
                node: 3,
                observation: "config/x does not exist".into()
            }))
        );
        assert_eq!(p, RunPhase::Running);
        // A stop requested too: the stop wins, the replan is dropped.
        let mut p = replayed();
        p.replan_begun(3, "x".into());
        assert!(p.request_stop(StopReason::Deadline));
        assert!(!p.request_stop(StopReason::Cancelled));
        assert!(!p.replans());
        assert_eq!(p.begin(), Some(None));
        assert_eq!(p, RunPhase::Stopping(StopReason::Deadline));
        // Outside a replay a replan is never pending.
        let mut r = RunPhase::Running;
        r.replan_begun(1, "x".into());
        assert_eq!(r, RunPhase::Running);
        assert_eq!(r.begin(), None);
    }
}
