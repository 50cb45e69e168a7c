//! Failover inside the worker: taking a task over from a lost worker with the book the store of
//! record kept ([`crate::failover`]), handing the shell the book to write before each call, and
//! stopping an attempt the store fenced off.

use quorate_protocols::wire::Assignment;
use quorate_protocols::{ActionId, Budget, Envelope, Millis, TaskId};
use quorate_state::ActionRecord;

use super::{InputError, WorkerCore};
use crate::attempt::Attempt;
use crate::failover::{Fenced, StoredBook};

/// What a new attempt is charged up front (`here`: what earlier attempts on this worker spent,
/// or the book's total if more), and the records it imports from `takeover`.
pub(super) fn carry(
    here: Budget,
    takeover: Option<StoredBook>,
) -> (Budget, Vec<(ActionId, ActionRecord)>) {
    let Some(book) = takeover else {
        return (here, Vec::new());
    };
    let spent = Budget::new(
        here.steps.max(book.spent.steps),
        here.tool_calls.max(book.spent.tool_calls),
        here.tokens.max(book.spent.tokens),
        here.cost.max(book.spent.cost),
    );
    #[cfg(feature = "mutants")]
    if quorate_protocols::mutant::is(quorate_protocols::mutant::Mutant::FailoverSkipsImport) {
        return (spent, Vec::new());
    }
    (spent, book.records.into_iter().collect())
}

impl WorkerCore {
    /// Starts an attempt of a task another worker had (its lease expired, so the supervisor
    /// moved the task here), with the task's book as the store of record kept it (`book`, read
    /// back and claimed for this attempt with [`StoredBook::claim`]). The book is imported
    /// before the attempt runs: its actions that were in flight become `outcome-unknown`, and
    /// the gate queries their tools by id before anything else is done with them (as for a
    /// later attempt on the same worker); what the earlier attempts spent or reserved is
    /// charged up front. A stale or duplicate assignment is refused as by
    /// [`Self::handle_assignment`] and imports nothing.
    pub fn handle_takeover(
        &mut self,
        now: Millis,
        envelope: impl Into<Box<Envelope<Assignment>>>,
        book: StoredBook,
    ) -> Result<(), InputError> {
        self.start(now, envelope.into(), Some(book))
    }

    /// The attempt of `task` this worker is at (running, or the last that ended here), if any.
    /// A worker whose attempt is not the owner of the task's book in the store
    /// ([`StoredBook::owner`]) must take the next attempt over with that book
    /// ([`Self::handle_takeover`]): another worker had the task since. One whose attempt owns it
    /// has the book in memory already (it wrote it).
    #[must_use]
    pub fn attempt_of(&self, task: TaskId) -> Option<u32> {
        self.latest_attempt(task)
    }

    /// The book of `task`'s running attempt as the store keeps it: the shell writes it with
    /// [`StoredBook::write`] before it carries out the attempt's [`Effect::CallTool`] (the call's
    /// action is `executing` in it, and its reservation is in the spending). `None` if no
    /// attempt of `task` runs here.
    ///
    /// [`Effect::CallTool`]: crate::Effect::CallTool
    #[must_use]
    pub fn stored_book(&self, task: TaskId) -> Option<StoredBook> {
        let attempt = self.attempts.get(&task)?;
        let records = self
            .books
            .get(&task)
            .map(|b| b.iter().map(|(id, r)| (*id, r.clone())).collect())
            .unwrap_or_default();
        Some(StoredBook {
            owner: attempt.number(),
            spent: attempt.spent_or_reserved(),
            records,
        })
    }

    /// The store refused this worker's write of a task's book ([`Fenced`]): a newer attempt owns
    /// it, so the call that write came before must not run. The attempt stops here (with every
    /// sub-task below it) as if cancelled; its final reply names the old attempt, which the
    /// supervisor refuses as late. A fence that names no newer attempt than the one running
    /// here is refused ([`InputError::StaleAttempt`]) and changes nothing.
    pub fn handle_fenced(&mut self, now: Millis, fenced: Fenced) -> Result<(), InputError> {
        let task = fenced.task;
        let current = self
            .attempts
            .get(&task)
            .map(Attempt::number)
            .ok_or(InputError::UnknownTask { task })?;
        if current >= fenced.owner {
            return Err(InputError::StaleAttempt {
                task,
                current,
                got: fenced.owner,
            });
        }
        self.cancel_tree(now, task);
        Ok(())
    }
}
