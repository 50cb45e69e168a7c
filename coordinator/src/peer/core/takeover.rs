//! Taking over a task whose claiming peer is gone: in a run over several processes a claim is
//! held under the claiming peer's lease (docs/distributed.md, "Peer processes"), so a peer that
//! dies loses its claims when its lease expires. The shell watches the claims this peer waits on
//! ([`PeerCore::awaiting_others`]) and reports a claim that vanished
//! ([`PeerCore::handle_claim_lost`]): the task is adopted as the store recorded it, or becomes
//! ready to be claimed again, by CAS as the first time (exactly one peer wins it).

use quorate_protocols::{TaskEvent, TaskState};

use super::PeerCore;
use crate::peer::{Terminal, TerminalCommit};

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
}
