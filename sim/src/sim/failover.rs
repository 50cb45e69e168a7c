//! Worker failover in a schedule: a worker goes silent (lost for good, or only paused past its
//! lease and back later), the supervisor is told when its lease expires, and the store of
//! record keeps each task's action book, fenced by attempt ([`StoredBook`]).
//!
//! The scripted world is shared by every worker (it stands for the store of record's view of
//! the tools' effects), so a worker that takes a task over can query what the lost one
//! committed.

use quorate_protocols::wire::Assignment;
use quorate_protocols::{Envelope, TaskId};
use quorate_workers::{Fenced, StoredBook};

use super::{Msg, Persistence, Sim};
use crate::fault::Fault;
use crate::gen::LEASE_MS;

impl Sim {
    /// Schedules the worker loss drawn for this schedule, if any.
    pub(super) fn schedule_worker_loss(&mut self) {
        if let Some((at, w, back)) = self.faults.worker_loss {
            self.schedule(at, Msg::WorkerSilent(w, back));
        }
    }

    /// `msg` if its worker can take it now; a message to a silent worker is held until it is
    /// back (a paused process catches up), or dropped if it never comes back.
    pub(super) fn held(&mut self, msg: Msg) -> Option<Msg> {
        let w = match &msg {
            Msg::Assign(w, _)
            | Msg::Control(w, _)
            | Msg::ToolAnswer(w, ..)
            | Msg::ToolTimeout(w, ..)
            | Msg::QueryAnswer(w, ..)
            | Msg::QueryTimeout(w, ..) => *w,
            _ => return Some(msg),
        };
        let until = self.workers[w].silent_until;
        if self.now >= until {
            return Some(msg);
        }
        if until != u64::MAX {
            self.schedule(until, msg);
        }
        None
    }

    /// The failover messages: a worker goes silent, its lease expires, it comes back.
    pub(super) fn on_failover(&mut self, msg: Msg) {
        let now = self.now;
        match msg {
            Msg::WorkerSilent(w, back) => {
                let fault = if back.is_some() {
                    Fault::WorkerPaused
                } else {
                    Fault::WorkerLost
                };
                self.counts.bump(fault);
                self.workers[w].silent_until = back.unwrap_or(u64::MAX);
                self.schedule(now + LEASE_MS, Msg::LeaseExpired(w));
                if let Some(back) = back {
                    self.schedule(back, Msg::WorkerBack(w));
                }
            }
            Msg::LeaseExpired(w) => {
                self.lost[w] = true;
                if !self.stopped {
                    // Refused only for a run whose report was taken.
                    let _over = self.core.handle_worker_lost(now, w);
                    self.drain_supervisor();
                }
            }
            Msg::WorkerBack(w) => {
                self.lost[w] = false;
                if !self.stopped {
                    let _over = self.core.handle_worker_renewed(now, w);
                    self.drain_supervisor();
                }
            }
            _ => {}
        }
    }

    /// Tells a core rebuilt after a crash which workers' leases are gone (liveness lives with
    /// the leases in the store, not in the run log).
    pub(super) fn report_lost_workers(&mut self) {
        for w in 0..self.lost.len() {
            if self.lost[w] {
                let _over = self.core.handle_worker_lost(self.now, w);
            }
        }
    }

    /// Hands worker `w` an assignment. A worker whose own attempt does not own the task's book
    /// in the store (it never ran the task, a crash lost its memory, or another worker had the
    /// task since) claims the book for the new attempt (fencing older attempts off) and imports
    /// it first; one whose attempt owns it goes on with its own book, which it wrote there. Under [`Persistence::Volatile`] no book is in the
    /// store (the model is a worker whose action records live in memory only).
    pub(super) fn assign(&mut self, w: usize, env: Box<Envelope<Assignment>>) -> bool {
        let now = self.now;
        let task = env.task;
        let mine = self.workers[w].core.attempt_of(task);
        let claimed = if self.opts.persistence == Persistence::DurableBook {
            let mut stored = self.books.remove(&task);
            let claimed = StoredBook::on_assignment(&mut stored, task, env.attempt, mine);
            if let Some(book) = stored {
                self.books.insert(task, book);
            }
            claimed.ok().flatten()
        } else {
            None
        };
        let core = &mut self.workers[w].core;
        match claimed {
            Some(book) => core.handle_takeover(now, env, book).is_ok(),
            None => core.handle_assignment(now, env).is_ok(),
        }
    }

    /// Writes `task`'s book (of a worker's running attempt) to the store before its call;
    /// `Err` if a newer attempt owns the book (the drive loop then stops the attempt).
    pub(super) fn write_book(&mut self, task: TaskId, book: StoredBook) -> Result<(), Fenced> {
        let mut stored = self.books.remove(&task);
        let written = StoredBook::write(&mut stored, task, book);
        if let Some(book) = stored {
            self.books.insert(task, book);
        }
        if written.is_err() {
            self.counts.bump(Fault::Fenced);
        }
        written
    }
}
