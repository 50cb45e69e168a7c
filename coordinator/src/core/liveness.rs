//! Worker liveness: a worker holds a lease (in a deployment over several machines an etcd lease;
//! here, inputs). When its lease expires the shell says so ([`SupervisorCore::handle_worker_lost`]):
//! each of the worker's running tasks gets its next attempt on another live worker at once, and no
//! task goes to the lost worker until it renews ([`SupervisorCore::handle_worker_renewed`]).
//!
//! The new attempt's number is one up, so the reply rules refuse the lost worker's late replies
//! (they name the older attempt), and the worker that takes the task over claims its action book
//! in the store for that attempt, which fences the old worker off at its next call
//! (`quorate_workers::StoredBook`). The slice is not granted again: the task keeps the slice it
//! was allocated, and the new attempt is charged up front what the book in the store says the
//! earlier attempts spent or held reserved. Liveness is not in the run log: after a resume the
//! shell reports the workers whose leases are gone again.

use super::*;

impl SupervisorCore {
    /// Worker `worker`'s lease expired at `now`: it is lost until it renews. Each of its running
    /// tasks is requeued (a new attempt on another live worker, dispatched now if one is
    /// live); a task of it that waits for a human stays, and its next attempt (after the
    /// decision, when the lost worker does not answer) goes elsewhere. A worker index out of
    /// range is refused ([`InputRefused::UnknownWorker`]); a worker already lost changes nothing.
    pub fn handle_worker_lost(&mut self, now: u64, worker: usize) -> Result<(), InputRefused> {
        if self.finished() {
            return Err(InputRefused::Finished);
        }
        self.check_worker(worker)?;
        if std::mem::replace(&mut self.lost[worker], true) {
            return Ok(());
        }
        for i in 0..self.tasks.len() as u32 {
            let t = &self.tasks[i as usize];
            if t.worker != Some(worker as u32) || t.state != TaskState::Running {
                continue;
            }
            if self.transition(now, i, TaskEvent::Requeued) {
                self.ready.push_back(i);
            }
        }
        self.after_input(now);
        Ok(())
    }

    /// Worker `worker` renewed its lease (or came back with a new one): tasks may go to it again.
    /// Tasks waiting for a live worker are dispatched.
    pub fn handle_worker_renewed(&mut self, now: u64, worker: usize) -> Result<(), InputRefused> {
        if self.finished() {
            return Err(InputRefused::Finished);
        }
        self.check_worker(worker)?;
        self.lost[worker] = false;
        self.after_input(now);
        Ok(())
    }

    /// `true` if worker `worker`'s lease expired and was not renewed.
    #[must_use]
    pub fn worker_lost(&self, worker: usize) -> bool {
        self.lost.get(worker).copied().unwrap_or(false)
    }

    /// Worker `worker` serves only `roles` (a plan node's `role`): no attempt of a task whose
    /// role is not among them goes to it. Empty (the default): it serves every role. A task
    /// whose role no live worker serves waits, as with every worker lost. A worker index out
    /// of range is refused ([`InputRefused::UnknownWorker`]). Given before
    /// [`start`](Self::start); like liveness it is not in the run log (a resumed shell gives
    /// it again).
    pub fn set_worker_roles(
        &mut self,
        worker: usize,
        roles: Vec<String>,
    ) -> Result<(), InputRefused> {
        self.check_worker(worker)?;
        self.worker_roles[worker] = roles;
        Ok(())
    }

    /// `true` if worker `worker` serves role `role` (a worker given no roles serves all).
    #[must_use]
    pub fn worker_serves(&self, worker: usize, role: &str) -> bool {
        self.worker_roles
            .get(worker)
            .is_some_and(|roles| roles.is_empty() || roles.iter().any(|r| r == role))
    }

    fn check_worker(&self, worker: usize) -> Result<(), InputRefused> {
        if worker < self.workers.len() {
            Ok(())
        } else {
            Err(InputRefused::UnknownWorker {
                worker,
                workers: self.workers.len(),
            })
        }
    }

    /// The worker the next attempt of task `i` goes to, among the live workers serving its
    /// role: the one that had the task if it is one of them (its record of the task's actions
    /// is at hand), else the next one in turn; `None` when no live worker serves the role.
    pub(super) fn pick_worker(&mut self, i: u32) -> Option<usize> {
        let role = &*self.plan.node(i).role;
        let fits = |w: usize| !self.lost[w] && self.worker_serves(w, role);
        if let Some(w) = self.tasks[i as usize].worker {
            if fits(w as usize) {
                return Some(w as usize);
            }
        }
        let n = self.workers.len();
        let start = self.next_worker;
        let k = (0..n).find(|&k| fits((start + k) % n))?;
        self.next_worker = start + k + 1;
        Some((start + k) % n)
    }
}
