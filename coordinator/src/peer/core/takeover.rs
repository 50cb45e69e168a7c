//! Taking over a task whose claiming peer is gone: in a run over several processes a claim is
//! held under the claiming peer's lease (docs/distributed.md, "Peer processes"), so a peer that
//! dies loses its claims when its lease expires. The shell watches the claims this peer waits on
//! ([`PeerCore::awaiting_others`]) and reports a claim that vanished
//! ([`PeerCore::handle_claim_lost`]): the task is adopted as the store recorded it, or becomes
//! ready to be claimed again, by CAS as the first time (exactly one peer wins it).
//!
//! Fencing ([`PeerCore::set_fenced`]): when the peers' workers keep their action books in the
//! store of record, a peer whose claim vanished may still be running (paused past its lease,
//! not dead). So before each attempt it runs, the claim's holder raises the task's fence to that
//! attempt ([`PeerEffect::RaiseFence`]): the first attempt after both its own last one and the
//! one the fence names, so a takeover is a later attempt than the lost peer's, and the lost
//! peer's worker is refused at its next book write. Only the holder of the claim may raise it.

use quorate_protocols::{TaskEvent, TaskState};

use super::PeerCore;
use crate::peer::{PeerEffect, Terminal, TerminalCommit};

impl PeerCore {
    /// The nodes this peer waits on another peer for: another peer claimed them, they run in
    /// this peer's view, and no terminal record of them is known here. Their claims are the
    /// ones whose loss [`handle_claim_lost`](Self::handle_claim_lost) takes.
    #[must_use]
    pub fn awaiting_others(&self) -> Vec<u32> {
        (0..self.tasks.len() as u32)
            .filter(|&i| {
                let t = &self.tasks[i as usize];
                t.claim_tried
                    && !t.mine
                    && t.state == TaskState::Running
                    && !t.settled()
                    && !t.committing
            })
            .collect()
    }

    /// Node `node`'s claim is gone from the store (its peer's lease expired), and `stored` is
    /// what the store holds as the node's terminal record (read after the claim was found gone),
    /// with its version. A record is adopted as if this peer had lost the commit to it (the
    /// peer may have died before it broadcast the record); without one, the task is `ready`
    /// again and this peer tries to claim it. Nothing changes for a node this peer claimed
    /// itself, or that is settled or being committed here.
    pub fn handle_claim_lost(&mut self, now: u64, node: u32, stored: Option<(Terminal, u64)>) {
        let Some(t) = self.tasks.get(node as usize) else {
            return;
        };
        if t.mine || t.settled() || t.committing {
            return;
        }
        match stored {
            Some((record, version)) if record.node == node => {
                self.handle_commit(now, TerminalCommit::Taken { record, version });
            }
            Some(_) => {}
            None => {
                if self.transition(now, node, TaskEvent::Requeued) {
                    self.tasks[node as usize].claim_tried = false;
                }
                self.after_input(now);
            }
        }
    }

    /// Fence each attempt before it runs: the core asks the shell to raise the task's fence
    /// ([`PeerEffect::RaiseFence`]) before each [`PeerEffect::Execute`], and numbers the attempt
    /// by the fence's answer ([`handle_fence_raised`](Self::handle_fence_raised)). Off by
    /// default (peers in one process share no store of record for their books).
    pub fn set_fenced(&mut self, on: bool) {
        self.fenced = on;
    }

    /// `true` if node `i`'s next attempt must wait for its fence (asked for here, once).
    pub(super) fn fence_first(&mut self, i: u32) -> bool {
        if !self.fenced {
            return false;
        }
        let t = &mut self.tasks[i as usize];
        if t.fence > t.attempt {
            return false;
        }
        if !t.raising {
            t.raising = true;
            let (node, task, past) = (i, t.id, t.attempt);
            self.effects
                .push_back(PeerEffect::RaiseFence { node, task, past });
        }
        true
    }

    /// The shell raised node `node`'s fence to `raised` ([`PeerEffect::RaiseFence`]): the task
    /// runs as that attempt, unless it ended or the run stops meanwhile. `None`: the claim is
    /// no longer this peer's (its lease lapsed and another peer may hold it): this peer runs
    /// nothing of the task and waits on the claim as on any other peer's
    /// ([`awaiting_others`](Self::awaiting_others)). An answer nobody asked for changes nothing.
    pub fn handle_fence_raised(&mut self, now: u64, node: u32, raised: Option<u32>) {
        let stopping = self.stop_cause.is_some();
        let Some(t) = self.tasks.get_mut(node as usize) else {
            return;
        };
        if !t.raising {
            return;
        }
        t.raising = false;
        match raised {
            Some(attempt) if attempt > t.attempt => {
                t.fence = attempt;
                t.attempt = attempt - 1;
                if t.mine && !t.settled() && !t.committing && !stopping {
                    self.execute(now, node);
                } else {
                    self.busy = false;
                }
            }
            _ => {
                self.busy = false;
                self.give_up(now, node);
            }
        }
        self.after_input(now);
    }

    /// Task `i` is not this peer's any more (its claim went with its lease): it runs nothing
    /// more of it, leaves its worker's attempt to the fence, and waits on the claim like any
    /// other peer's.
    fn give_up(&mut self, now: u64, i: u32) {
        let t = &mut self.tasks[i as usize];
        t.mine = false;
        t.worker_live = false;
        t.raising = false;
        // The slice is the task's: the claim's next holder allocates and returns it.
        t.allocated = false;
        if t.state == TaskState::Ready {
            // Another peer holds the claim, or will: running, in this peer's view.
            self.transition(now, i, TaskEvent::Dispatched);
        }
    }

    /// This peer's terminal record of node `node` was not written: the task's claim is not
    /// its own any more and no record is there ([`TerminalCommit::Unclaimed`]). It gives the
    /// task up ([`handle_lease_lost`](Self::handle_lease_lost) does the same for all its tasks)
    /// and learns the task's end from the peer that holds the claim next.
    pub(super) fn commit_unclaimed(&mut self, now: u64, node: u32) {
        let Some(t) = self.tasks.get_mut(node as usize) else {
            return;
        };
        if t.settled() || !t.committing {
            return;
        }
        t.committing = false;
        t.commit_tries = 0;
        // A peer runs one task at a time: the one it claimed and gave up.
        self.busy = false;
        self.give_up(now, node);
        self.after_input(now);
    }

    /// This peer's claims are void (its lease expired: it was paused or cut off from the store
    /// for longer than the lease, and etcd deleted them; the shell took a new lease). Every
    /// task it had claimed and not settled is no longer its own: it runs nothing more of it,
    /// does not cancel its worker's attempt (a fenced core's worker is refused at its next book
    /// write once another peer took the task over), and waits on the task's claim like any
    /// other peer's ([`awaiting_others`](Self::awaiting_others)), which adopts the record or
    /// claims the task again. A terminal record it is committing stays in flight: the shell
    /// commits a claimed task's record only while the claim is this peer's
    /// ([`TerminalCommit::Unclaimed`] otherwise). Then it claims as usual.
    pub fn handle_lease_lost(&mut self, now: u64) {
        for i in 0..self.tasks.len() as u32 {
            let t = &self.tasks[i as usize];
            if t.mine && !t.settled() && !t.committing {
                self.give_up(now, i);
            }
        }
        self.busy = false;
        self.after_input(now);
    }
}
