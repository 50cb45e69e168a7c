//! A peer's core for a resumed run ([`crate::peer::resume`]): built from the rebuilt run, then
//! started with [`PeerCore::start`] as usual, which continues it instead of starting afresh.

use quorate_protocols::wire::SharedEvidence;
use quorate_protocols::{Sender, TaskEvent, TaskState};

use super::PeerCore;
use crate::event::EventKind;
use crate::peer::resume::PeerResume;
use crate::{StopReason, SupervisorConfig};

impl PeerCore {
    /// Peer `index`'s core for the resumed run `from` (see [`PeerCore::new`] for the other
    /// arguments; every peer of the resumed run must get the same `from`). A run still on its
    /// first plan version needs its fallback again ([`set_fallback_plan`](Self::set_fallback_plan)).
    #[allow(clippy::too_many_arguments)]
    pub fn resume(
        run: quorate_protocols::RunId,
        from: &PeerResume,
        config: SupervisorConfig,
        index: usize,
        peers: Vec<Sender>,
        worker: Sender,
        ids: quorate_protocols::IdSource,
    ) -> Self {
        let mut core = Self::new(
            run,
            from.plan.clone(),
            config,
            index,
            peers,
            worker,
            from.tasks.clone(),
            ids,
        );
        core.replan.version = from.plan_version;
        core.resumed = Some(from.replayed);
        for i in 0..core.plan.len() {
            let t = &mut core.tasks[i];
            // Where this peer's log left the task; a record it had not learnt of yet is
            // applied (and logged) when it starts.
            t.state = from.views[index][i];
            if let Some((record, version)) = &from.terminals[i] {
                if record.state == TaskState::Completed {
                    let value = record.result.clone().unwrap_or_default();
                    t.result = Some((value, SharedEvidence::from(record.evidence.clone())));
                }
                t.terminal = Some((record.clone(), *version));
            }
            if let Some(last) = from.attempts[i] {
                // Its claim was won: nobody claims it again.
                t.claim_tried = true;
                if last.peer == index {
                    t.mine = true;
                    t.allocated = true;
                    t.granted = last.granted;
                    t.attempt = last.attempt;
                    t.version = u64::from(last.attempt);
                    if let Some(spent) = last.closed {
                        t.closed = true;
                        t.spent = spent;
                    }
                }
            }
        }
        for j in 0..core.plan.len() as u32 {
            let left = core
                .plan
                .deps(j)
                .iter()
                .filter(|&&d| {
                    let record = from.terminals[d as usize].as_ref();
                    record.is_none_or(|(r, _)| r.state != TaskState::Completed)
                })
                .count();
            core.tasks[j as usize].deps_left = left;
        }
        core
    }

    /// Continues a resumed run (called by [`start`](Self::start)): a settled task's slice this
    /// peer never returned is returned, the run stops again if a committed record stopped it,
    /// this peer's attempt in flight runs again (a new attempt, same task id and slice), and
    /// what became ready is claimed.
    pub(super) fn start_resumed(&mut self, now: u64, replayed: u64) {
        let n = self.plan.len() as u32;
        let mut again = Vec::new();
        // A record that drops its node is the run's decision to switch, not the task's end: it
        // is taken again below (module `replan`).
        let mut dropped = Vec::new();
        for t in &mut self.tasks {
            if t.terminal.as_ref().is_some_and(|(r, _)| r.is_dropped()) {
                dropped.extend(t.terminal.take());
            }
        }
        for i in 0..n {
            let t = &self.tasks[i as usize];
            if let Some((record, _)) = &t.terminal {
                let state = record.state;
                if t.state != state {
                    self.transition(now, i, TaskEvent::Settled(state));
                }
                self.close_slice(now, i);
            } else if t.mine && t.allocated && !t.closed {
                again.push(i);
            }
        }
        self.record(
            now,
            None,
            EventKind::RunResumed {
                replayed,
                redispatched: again.len(),
            },
        );
        let stop = self
            .tasks
            .iter()
            .filter_map(|t| t.terminal.as_ref())
            .filter(|(r, _)| r.state != TaskState::Completed)
            .min_by_key(|(_, v)| *v)
            .map(|(r, _)| r.cause.clone().unwrap_or(StopReason::Cancelled));
        if let Some(cause) = stop {
            self.begin_stop(cause);
        } else {
            for i in again {
                // Back to ready in this peer's view, then a new attempt on its worker.
                match self.tasks[i as usize].state {
                    TaskState::Running => {
                        self.transition(now, i, TaskEvent::Requeued);
                    }
                    TaskState::Pending => {
                        self.transition(now, i, TaskEvent::DependenciesMet);
                    }
                    TaskState::Ready => {}
                    _ => self.tasks[i as usize].state = TaskState::Ready,
                }
                self.busy = true;
                self.steps += 1;
                self.execute(now, i);
            }
            for i in 0..n {
                let t = &self.tasks[i as usize];
                if t.state == TaskState::Pending && t.deps_left == 0 && !t.settled() {
                    self.make_ready(now, i);
                }
            }
        }
        for (record, version) in dropped {
            self.dropped_known(now, record, version);
        }
        self.after_input(now);
    }
}
