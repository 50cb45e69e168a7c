//! What became of this peer's changes to the shared root account and result store: the shell
//! tries each change once and reports; the core decides whether to try again (with the version
//! the next read finds) or to give the change up, with a [`SharedStoreError`].

use quorate_protocols::TaskState;
use quorate_state::Versioned;

use super::PeerCore;
use crate::event::EventKind;
use crate::peer::{PeerEffect, RootUpdate, SharedStoreError, SHARED_CAS_TRIES};
use crate::StopReason;

impl PeerCore {
    /// What became of allocating `node`'s slice from the shared root account
    /// ([`PeerEffect::Allocate`]). Contention is tried again up to [`SHARED_CAS_TRIES`] times;
    /// then, or when the root account is missing, the task fails with the
    /// [`SharedStoreError`]; a slice the ledger refuses stops it with `stopped-limit`.
    pub fn handle_allocation(&mut self, now: u64, node: u32, outcome: RootUpdate) {
        let i = node;
        let Some(t) = self.tasks.get_mut(i as usize) else {
            return;
        };
        let given_up = match outcome {
            RootUpdate::Done => {
                t.root_tries = 0;
                t.allocated = true;
                t.granted = self.plan.node(i).budget;
                if t.settled() || t.committing || self.stop_cause.is_some() {
                    self.busy = false;
                    self.close_slice(now, i);
                } else {
                    self.execute(now, i);
                }
                None
            }
            RootUpdate::Refused(e) => {
                t.root_tries = 0;
                let detail = e.to_string();
                self.record(now, Some(i), EventKind::BudgetRefused { detail });
                self.busy = false;
                let cause = StopReason::refused(&e);
                self.propose(i, TaskState::StoppedLimit, Some(cause));
                None
            }
            RootUpdate::Contended => {
                t.root_tries += 1;
                if t.root_tries < SHARED_CAS_TRIES {
                    let (task, slice) = (t.id, self.plan.node(i).budget);
                    self.effects
                        .push_back(PeerEffect::Allocate { node, task, slice });
                    None
                } else {
                    Some(SharedStoreError::RootContended {
                        tries: t.root_tries,
                    })
                }
            }
            RootUpdate::Missing => Some(SharedStoreError::RootMissing),
        };
        if let Some(error) = given_up {
            let detail = error.to_string();
            self.record(now, Some(i), EventKind::BudgetRefused { detail });
            self.busy = false;
            self.fail(i, format!("budget: {error}"));
        }
        self.after_input(now);
    }

    /// What became of returning `node`'s slice to the shared root account
    /// ([`PeerEffect::CloseSlice`]). Contention is tried again up to [`SHARED_CAS_TRIES`] times;
    /// a return given up (or refused by the ledger) is logged as `budget-refused` for the task,
    /// whose slice then stays charged in full: the run goes on.
    pub fn handle_slice_closed(&mut self, now: u64, node: u32, outcome: RootUpdate) {
        let i = node;
        let Some(t) = self.slot_mut(i) else {
            return;
        };
        let detail = match outcome {
            RootUpdate::Done => None,
            RootUpdate::Refused(e) => Some(e.to_string()),
            RootUpdate::Contended if t.root_tries + 1 < SHARED_CAS_TRIES => {
                t.root_tries += 1;
                let (task, spent) = (t.id, t.spent);
                self.effects
                    .push_back(PeerEffect::CloseSlice { node, task, spent });
                return;
            }
            RootUpdate::Contended => Some(
                SharedStoreError::RootContended {
                    tries: t.root_tries + 1,
                }
                .to_string(),
            ),
            RootUpdate::Missing => Some(SharedStoreError::RootMissing.to_string()),
        };
        t.root_tries = 0;
        if let Some(detail) = detail {
            self.record(now, Some(i), EventKind::BudgetRefused { detail });
        }
    }

    /// What became of merging `node`'s result into the result store
    /// ([`PeerEffect::CommitResult`]): `None` if it was written, otherwise the result found
    /// there, which is kept (never overwritten), logged as `result-kept` and becomes the task's
    /// result in this peer's view.
    pub fn handle_result_commit(
        &mut self,
        now: u64,
        node: u32,
        stored: Option<Versioned<quorate_protocols::Payload>>,
    ) {
        let (Some(stored), Some(t)) = (stored, self.tasks.get_mut(node as usize)) else {
            return;
        };
        let same = t.result.as_ref().is_some_and(|(v, _)| *v == stored.value);
        let stored_value = stored.value;
        if let Some((value, _)) = &mut t.result {
            *value = stored_value.clone();
        }
        let kind = EventKind::ResultKept {
            version: stored.version.raw(),
            same,
            result: stored_value,
        };
        self.record(now, Some(node), kind);
    }

    /// Returns task `i`'s slice (a task of the plan, or one a switch dropped), once.
    pub(super) fn close_slice(&mut self, now: u64, i: u32) {
        let Some(t) = self.slot_mut(i) else {
            return;
        };
        if t.allocated && !t.closed {
            t.closed = true;
            // A task that never reported is charged its whole slice: its calls may have spent it.
            t.spent = if t.reported() {
                t.spent.min(&t.granted)
            } else {
                t.granted
            };
            let (task, spent) = (t.id, t.spent);
            self.effects.push_back(PeerEffect::CloseSlice {
                node: i,
                task,
                spent,
            });
            self.record(now, Some(i), EventKind::TaskClosed { spent });
        }
    }
}
