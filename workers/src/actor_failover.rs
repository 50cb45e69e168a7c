//! Failover in the worker actor (a child module of `actor`): with a store of record for its
//! tasks' books ([`WorkerActor::with_books`]), the worker writes a task's book there before each
//! side-effecting call, stops an attempt the store fenced off, and claims the book of a task it
//! takes over from a lost worker. The checks are the pure ones of [`crate::failover`]; the core
//! decides what follows ([`WorkerCore::handle_takeover`], [`WorkerCore::handle_fenced`]).
//!
//! [`WorkerCore::handle_takeover`]: crate::WorkerCore::handle_takeover
//! [`WorkerCore::handle_fenced`]: crate::WorkerCore::handle_fenced

use std::sync::Arc;

use quorate_protocols::wire::Assignment;
use quorate_protocols::{Envelope, TaskId};

use super::WorkerActor;
use crate::failover::{BookStore, StoredBook};

impl WorkerActor {
    /// The same worker, keeping its tasks' action books in `books` (the store of record the
    /// run's workers share): each task's book is written there before each side-effecting
    /// call, fenced by the attempt, and an assignment of a task whose book another attempt owns
    /// claims the book and imports it first (a takeover).
    #[must_use]
    pub fn with_books(mut self, books: Arc<dyn BookStore>) -> Self {
        self.books = Some(books);
        self
    }

    /// The book to import with `envelope`'s assignment, if this worker takes the task over
    /// ([`StoredBook::on_assignment`], run inside the store's compare-and-set). `None` to handle
    /// the assignment as usual (no store, the book is this worker's own or was just claimed
    /// empty, or a newer attempt owns it: the core then refuses the stale assignment).
    pub(super) fn takeover_book(&self, envelope: &Envelope<Assignment>) -> Option<StoredBook> {
        let books = self.books.as_ref()?;
        let (task, attempt) = (envelope.task, envelope.attempt);
        let mine = self.core.attempt_of(task);
        let mut claimed = None;
        let outcome = books.update(task, &mut |stored| {
            claimed = StoredBook::on_assignment(stored, task, attempt, mine)?;
            Ok(())
        });
        outcome.ok().and(claimed)
    }

    /// Writes `task`'s book to the store before a call of `tool`, if the tool writes. `false`
    /// if the store refused (a newer attempt owns the book): the core has stopped the attempt
    /// and the call must not run.
    pub(super) fn book_written(&mut self, task: TaskId, tool: &str) -> bool {
        let Some(books) = &self.books else {
            return true;
        };
        let writes = self
            .core
            .tools()
            .get(tool)
            .is_some_and(|t| t.side_effect().writes());
        let Some(book) = self.core.stored_book(task).filter(|_| writes) else {
            return true;
        };
        let written = books.update(task, &mut |stored| {
            StoredBook::write(stored, task, book.clone())
        });
        match written {
            Ok(()) => true,
            Err(fenced) => {
                metrics::counter!("quorate_worker_fenced_total").increment(1);
                tracing::warn!(%fenced, "attempt fenced off");
                let now = self.clock.now();
                Self::note(self.core.handle_fenced(now, fenced));
                false
            }
        }
    }
}
