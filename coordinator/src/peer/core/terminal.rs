//! Terminal records: this peer's own commits (won or adopted), other peers' broadcasts (with the
//! envelope checks), and applying a record to the local view (never reactivating a task).

use quorate_protocols::wire::{Control, SharedEvidence};
use quorate_protocols::{Envelope, Role, TaskEvent, TaskState, Version};

use super::PeerCore;
use crate::event::{EventKind, Rejection};
use crate::peer::{
    PeerEffect, PeerMsg, SharedStoreError, Terminal, TerminalCommit, SHARED_CAS_TRIES,
};
use crate::StopReason;

impl PeerCore {
    /// What `state/<run>/<node>` holds after this peer's commit: its own record, or the record
    /// that was there first (adopted, never overwritten). A record that vanished is committed
    /// again, up to [`SHARED_CAS_TRIES`] times; then this peer gives the task up as failed with
    /// [`SharedStoreError::RecordVanished`] (in its own view: no record was committed).
    pub fn handle_commit(&mut self, now: u64, outcome: TerminalCommit) {
        let (record, version, won) = match outcome {
            TerminalCommit::Won { record, version } => (record, version, true),
            TerminalCommit::Taken { record, version } => (record, version, false),
            TerminalCommit::Vanished { record } => {
                self.commit_vanished(now, record);
                return;
            }
            TerminalCommit::Unclaimed { record } => {
                self.commit_unclaimed(now, record.node);
                return;
            }
        };
        if record.is_dropped() {
            // A switch of plan version dropping the node (module `replan`).
            self.dropped_known(now, record, version);
            return;
        }
        let i = record.node;
        if self.tasks.get(i as usize).is_none() {
            return;
        }
        self.tasks[i as usize].commit_tries = 0;
        self.tasks[i as usize].committing = false;
        if !self.tasks[i as usize].settled() {
            if won {
                // The peer that committed the terminal record also merges the result.
                if let Some(value) = record.result.clone() {
                    let node = self.plan.node(i).id.as_str();
                    let key = crate::run::result_key(self.run, node);
                    self.effects.push_back(PeerEffect::CommitResult {
                        node: i,
                        key,
                        value,
                    });
                }
                let mut env = Envelope::new(
                    self.run,
                    self.tasks[i as usize].id,
                    self.peers[self.index],
                    PeerMsg::Terminal {
                        record: record.clone(),
                        version,
                    },
                    &mut self.ids,
                );
                env.state_version = Version::new(version);
                self.messages.sent += (self.peers.len() - 1) as u64;
                self.effects.push_back(PeerEffect::Broadcast(Box::new(env)));
            }
            self.apply(now, record, version);
        }
        self.after_input(now);
    }

    /// This peer's `record` found its key taken but empty: commit it again, or give up.
    fn commit_vanished(&mut self, now: u64, record: Terminal) {
        let i = record.node;
        let Some(t) = self.tasks.get_mut(i as usize) else {
            return;
        };
        t.commit_tries += 1;
        if t.commit_tries < SHARED_CAS_TRIES {
            self.effects.push_back(PeerEffect::CommitTerminal(record));
        } else {
            t.committing = false;
            let error = SharedStoreError::RecordVanished {
                tries: t.commit_tries,
            };
            let node = self.plan.node(i).id.to_string();
            let observation = error.to_string();
            let given_up = Terminal {
                node: i,
                state: TaskState::Failed,
                result: None,
                evidence: Vec::new(),
                cause: Some(StopReason::Failed { node, observation }),
                by: self.index,
                dropped_by: None,
            };
            // No store version: this peer's own view, ordered before every committed record.
            self.apply(now, given_up, 0);
        }
        self.after_input(now);
    }

    /// A broadcast from another peer.
    pub fn handle_broadcast(&mut self, now: u64, env: Envelope<PeerMsg>) {
        self.messages.delivered += 1;
        self.take_broadcast(now, env);
    }

    /// A broadcast the transport refused before it could be read: its claimed sender is not the
    /// one its subject names (the sender's credentials fix the subject), or not a peer of the
    /// run. It never becomes an input of [`handle_broadcast`](Self::handle_broadcast); it is
    /// counted as delivered and rejected as unauthorized, and logged (`rejected-unauthorized`,
    /// naming no task), as a forged broadcast judged here is.
    pub fn handle_unauthorized_delivery(&mut self, now: u64) {
        self.messages.delivered += 1;
        self.reject(now, None, Rejection::Unauthorized);
    }

    /// Judges and applies a broadcast (counted as delivered already). The record names its
    /// task by id: the sender may number the plan's nodes otherwise (another plan version).
    pub(super) fn take_broadcast(&mut self, now: u64, env: Envelope<PeerMsg>) {
        if env.run != self.run {
            // An earlier run's broadcast, replayed: stale (as a supervisor counts it).
            self.reject(now, None, Rejection::Stale);
            return;
        }
        if env.sender.role != Role::Peer
            || env.sender == self.peers[self.index]
            || !self.peers.contains(&env.sender)
        {
            self.reject(now, None, Rejection::Unauthorized);
            return;
        }
        if self.seen.contains(&env.dedupe) {
            let task = self.by_id.get(&env.task).copied();
            self.reject(now, task, Rejection::Duplicate);
            return;
        }
        let Some(&i) = self.by_id.get(&env.task) else {
            if self.replan.can_switch() {
                // Maybe a task of a plan version this peer has not switched to yet.
                self.keep_for_switch(env);
            } else if self.replan.retired(env.task) {
                self.reject(now, None, Rejection::Late);
            } else {
                self.reject(now, None, Rejection::Unauthorized);
            }
            self.after_input(now);
            return;
        };
        self.seen.insert(env.dedupe);
        let PeerMsg::Terminal {
            mut record,
            version,
        } = env.payload;
        record.node = i;
        if let Some((known, _)) = &self.tasks[i as usize].terminal {
            if known.state != record.state {
                self.reject(now, Some(i), Rejection::Late);
            }
            return;
        }
        if self.tasks[i as usize].state.is_terminal() {
            self.reject(now, Some(i), Rejection::Late);
            return;
        }
        self.record(now, Some(i), EventKind::ReplyAccepted);
        self.apply(now, record, version);
        self.after_input(now);
    }

    /// Node `i`'s terminal record is known: adopt it, release what this peer held, and move on.
    pub(super) fn apply(&mut self, now: u64, record: Terminal, version: u64) {
        let i = record.node;
        self.switch_not_decided(i);
        if self.tasks[i as usize].worker_live {
            self.tasks[i as usize].worker_live = false;
            self.busy = false;
            if record.state != TaskState::WaitingApproval {
                self.control(i, Control::Cancel);
            }
        }
        let t = &mut self.tasks[i as usize];
        if t.mine && record.by != self.index && record.state != TaskState::Cancelled {
            // Another peer ended a task this peer had claimed, and not by cancelling it (any
            // peer cancels every open task when the run stops): only a claim's holder commits
            // any other end, so the claim went with this peer's lease and the task was taken
            // over. This peer's attempt is not the task's (the record's peer ran the attempt
            // that counts), and the slice is the new holder's to close.
            t.mine = false;
            t.allocated = false;
        }
        if self.tasks[i as usize].state != record.state {
            self.transition(now, i, TaskEvent::Settled(record.state));
        }
        if record.state == TaskState::Completed {
            let value = record.result.clone().unwrap_or_default();
            if record.by == self.index {
                let result = value.clone();
                self.record(now, Some(i), EventKind::ResultCommitted { result });
            }
            self.tasks[i as usize].result =
                Some((value, SharedEvidence::from(record.evidence.clone())));
        }
        if record.state != TaskState::Completed {
            self.tasks[i as usize].result = None;
        }
        let (state, cause) = (record.state, record.cause.clone());
        self.tasks[i as usize].terminal = Some((record, version));
        if state != TaskState::WaitingApproval {
            self.close_slice(now, i);
        }
        if state == TaskState::Completed {
            for d in self.plan.dependents(i).to_vec() {
                let t = &mut self.tasks[d as usize];
                t.deps_left -= 1;
                if t.deps_left == 0 && self.stop_cause.is_none() {
                    self.make_ready(now, d);
                }
            }
        } else {
            self.begin_stop(cause.unwrap_or(StopReason::Cancelled));
        }
    }
}
