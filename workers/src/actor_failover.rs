//! Failover in the worker actor (a child module of `actor`): with a store of record for its
//! tasks' books ([`WorkerActor::with_books`]), the worker writes a task's book there before each
//! side-effecting call (the drive loop asks, [`crate::drive::WorkerEnv::write_book`]), stops an
//! attempt the store fenced off, and claims the book of a task it takes over from a lost
//! worker. The checks are the pure ones of [`crate::failover`]; the core
//! decides what follows ([`WorkerCore::handle_takeover`], [`WorkerCore::handle_fenced`]).
//!
//! [`WorkerCore::handle_takeover`]: crate::WorkerCore::handle_takeover
//! [`WorkerCore::handle_fenced`]: crate::WorkerCore::handle_fenced

use std::sync::Arc;

use quorate_protocols::wire::Assignment;
use quorate_protocols::Envelope;

use super::WorkerActor;
use crate::failover::{BookStore, StoredBook};

impl WorkerActor {
    /// The same worker, keeping its tasks' action books in `books` (the store of record the
    /// run's workers share): each task's book is written there before each side-effecting
    /// call, fenced by the attempt, and an assignment of a task whose book another attempt owns
    /// claims the book and imports it first (a takeover).
    #[must_use]
    pub fn with_books(mut self, books: Arc<dyn BookStore>) -> Self {
        self.shell.books = Some(books);
        self
    }

    /// The book to import with `envelope`'s assignment, if this worker takes the task over
    /// ([`StoredBook::on_assignment`], run inside the store's compare-and-set). `None` to handle
    /// the assignment as usual (no store, the book is this worker's own or was just claimed
    /// empty, or a newer attempt owns it: the core then refuses the stale assignment).
    pub(super) fn takeover_book(&self, envelope: &Envelope<Assignment>) -> Option<StoredBook> {
        let books = self.shell.books.as_ref()?;
        let (task, attempt) = (envelope.task, envelope.attempt);
        let mine = self.core.attempt_of(task);
        let mut claimed = None;
        let outcome = books.update(task, &mut |stored| {
            claimed = StoredBook::on_assignment(stored, task, attempt, mine)?;
            Ok(())
        });
        outcome.ok().and(claimed)
    }
}
