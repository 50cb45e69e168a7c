//! Worker failover: a task's action book as the store of record keeps it, and the fence that
//! stops a worker whose attempt was taken over.
//!
//! A worker writes its task's [`StoredBook`] to the store before every side-effecting call
//! ([`WorkerCore::stored_book`](crate::WorkerCore::stored_book) gives it), through
//! [`StoredBook::write`]: the write names the attempt, and the store refuses it ([`Fenced`]) when a
//! newer attempt owns the book. A worker that takes the task over reads the book back, claims it
//! for its own attempt ([`StoredBook::claim`], which fences every older attempt off) and hands it
//! to [`WorkerCore::handle_takeover`](crate::WorkerCore::handle_takeover): its records are imported
//! ([`ActionBook::import`](crate::ActionBook::import): actions in flight become
//! `outcome-unknown`, queried by id before anything else is done with them), and what the earlier
//! attempts spent or held reserved is charged to the new attempt up front, so all attempts
//! together stay within the task's one slice.
//!
//! The checks are pure: the shell runs them inside the store's compare-and-set (an etcd
//! transaction on the book's key), the simulator against its in-memory store.

use std::collections::BTreeMap;

use quorate_protocols::{ActionId, Budget, TaskId};
use quorate_state::ActionRecord;
use serde::{Deserialize, Serialize};

/// A task's action book as the store of record keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredBook {
    /// The attempt that owns the book: the last one that wrote or claimed it. Writes of older
    /// attempts are refused.
    pub owner: u32,
    /// What the task's attempts spent or held reserved, in all, as of the last write (a write
    /// comes before each call, with the call's reservation in it).
    pub spent: Budget,
    /// The task's action records.
    pub records: BTreeMap<ActionId, ActionRecord>,
}

/// A write or claim of a task's book by an attempt that a newer one fenced off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("attempt {attempt} of task {task} is fenced off: attempt {owner} owns its action book")]
pub struct Fenced {
    /// The task.
    pub task: TaskId,
    /// The attempt that tried to write.
    pub attempt: u32,
    /// The attempt that owns the book.
    pub owner: u32,
}

impl StoredBook {
    /// The precondition of a write by attempt `attempt` of `task`: no newer attempt owns the
    /// book (`stored` is what the store holds, `None` for no book yet).
    pub fn check(stored: Option<&StoredBook>, task: TaskId, attempt: u32) -> Result<(), Fenced> {
        match stored {
            Some(s) if s.owner > attempt => Err(Fenced {
                task,
                attempt,
                owner: s.owner,
            }),
            _ => Ok(()),
        }
    }

    /// Writes `new` (an attempt's book, [`WorkerCore::stored_book`](crate::WorkerCore::stored_book))
    /// over `stored` if [`check`](Self::check) allows: the spending never goes down (a write
    /// carries the task's total).
    pub fn write(
        stored: &mut Option<StoredBook>,
        task: TaskId,
        new: StoredBook,
    ) -> Result<(), Fenced> {
        Self::check(stored.as_ref(), task, new.owner)?;
        let spent = stored
            .as_ref()
            .map_or(new.spent, |s| max(&s.spent, &new.spent));
        *stored = Some(StoredBook { spent, ..new });
        Ok(())
    }

    /// Attempt `attempt` of `task` takes the book over: it owns it from now on, which fences
    /// every older attempt off at its next write. Returns the book to import.
    pub fn claim(
        stored: &mut Option<StoredBook>,
        task: TaskId,
        attempt: u32,
    ) -> Result<StoredBook, Fenced> {
        Self::check(stored.as_ref(), task, attempt)?;
        let book = stored.get_or_insert_with(StoredBook::default);
        book.owner = attempt;
        Ok(book.clone())
    }

    /// What an assignment of attempt `attempt` of `task` does to the task's book in the store
    /// (`stored`), on a worker whose own attempt of the task is `mine`
    /// ([`WorkerCore::attempt_of`](crate::WorkerCore::attempt_of)):
    ///
    /// * another attempt owns the book (the worker never ran the task, lost its memory, or
    ///   another worker had it since): the attempt claims it and the book is returned, to be
    ///   imported with [`WorkerCore::handle_takeover`](crate::WorkerCore::handle_takeover);
    /// * no book yet: the attempt claims an empty one all the same, so an older attempt that
    ///   had called nothing yet (its worker paused past its lease while the task waited for a
    ///   human, say) is fenced off at its first write instead of calling what this attempt will
    ///   call (the simulator's seed 860677); `None`;
    /// * the worker's own attempt owns it: `None` (it has the book in memory).
    ///
    /// # Errors
    /// [`Fenced`]: a newer attempt owns the book (the worker handles the stale assignment as
    /// usual; nothing changed).
    pub fn on_assignment(
        stored: &mut Option<StoredBook>,
        task: TaskId,
        attempt: u32,
        mine: Option<u32>,
    ) -> Result<Option<StoredBook>, Fenced> {
        match stored {
            Some(s) if Some(s.owner) != mine => Self::claim(stored, task, attempt).map(Some),
            Some(_) => Ok(None),
            None => Self::claim(stored, task, attempt).map(|_| None),
        }
    }
}

/// Where a worker process keeps its tasks' books: the store of record every worker of the run
/// shares (an etcd cluster; see docs/distributed.md). The worker actor
/// ([`WorkerActor::with_books`](crate::WorkerActor::with_books)) writes a task's book through
/// it before each side-effecting call, and claims it when it takes a task over.
///
/// The calls block until the store answered: an implementation that cannot reach its store must
/// not return (it ends the process, as [`crate::ActionJournal`] does; the worker's lease then
/// lapses and another worker takes its tasks over).
pub trait BookStore: Send + Sync + std::fmt::Debug {
    /// One compare-and-set of `task`'s book: reads it (`None`: no book yet), runs `change` on
    /// it, and writes the result back if `change` returned `Ok` and the book changed. When
    /// another writer came between the read and the write, it reads again and runs `change`
    /// again. Returns what the last run of `change` returned.
    fn update(
        &self,
        task: TaskId,
        change: &mut dyn FnMut(&mut Option<StoredBook>) -> Result<(), Fenced>,
    ) -> Result<(), Fenced>;
}

/// A [`BookStore`] in memory, for workers of one process (and tests): the same checks, no
/// store of record.
#[derive(Debug, Default)]
pub struct MemoryBooks {
    books: std::sync::Mutex<BTreeMap<TaskId, StoredBook>>,
}

impl MemoryBooks {
    /// The book kept for `task`, if any.
    #[must_use]
    pub fn get(&self, task: TaskId) -> Option<StoredBook> {
        let books = self.books.lock().unwrap_or_else(|e| e.into_inner());
        books.get(&task).cloned()
    }
}

impl BookStore for MemoryBooks {
    fn update(
        &self,
        task: TaskId,
        change: &mut dyn FnMut(&mut Option<StoredBook>) -> Result<(), Fenced>,
    ) -> Result<(), Fenced> {
        let mut books = self.books.lock().unwrap_or_else(|e| e.into_inner());
        let mut book = books.get(&task).cloned();
        change(&mut book)?;
        if let Some(book) = book {
            books.insert(task, book);
        }
        Ok(())
    }
}

/// Component-wise maximum.
fn max(a: &Budget, b: &Budget) -> Budget {
    Budget::new(
        a.steps.max(b.steps),
        a.tool_calls.max(b.tool_calls),
        a.tokens.max(b.tokens),
        a.cost.max(b.cost),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(n: u64) -> Budget {
        Budget::new(0, n, 0, 0)
    }

    #[test]
    fn a_claim_fences_older_attempts_off_and_newer_ones_may_write() {
        let task = TaskId::from_u128(5);
        let mut stored = None;
        let first = StoredBook {
            owner: 1,
            spent: calls(2),
            records: BTreeMap::new(),
        };
        StoredBook::write(&mut stored, task, first.clone()).unwrap();
        let claimed = StoredBook::claim(&mut stored, task, 2).unwrap();
        assert_eq!((claimed.owner, claimed.spent), (2, calls(2)));
        // The old attempt's next write is refused, and changes nothing.
        let late = StoredBook {
            spent: calls(3),
            ..first
        };
        assert_eq!(
            StoredBook::write(&mut stored, task, late),
            Err(Fenced {
                task,
                attempt: 1,
                owner: 2
            })
        );
        assert_eq!(stored.as_ref().unwrap().spent, calls(2));
        assert!(StoredBook::claim(&mut stored, task, 1).is_err());
        // The owner writes; the spending never goes down.
        let own = StoredBook {
            owner: 2,
            spent: calls(1),
            records: BTreeMap::new(),
        };
        StoredBook::write(&mut stored, task, own).unwrap();
        assert_eq!(stored.as_ref().unwrap().spent, calls(2));
    }

    #[test]
    fn an_assignment_takes_over_anothers_book_claims_a_missing_one_and_keeps_its_own() {
        let task = TaskId::from_u128(6);
        // No book yet: an empty one is claimed, nothing is imported.
        let mut stored = None;
        assert_eq!(
            StoredBook::on_assignment(&mut stored, task, 1, None),
            Ok(None)
        );
        assert_eq!(stored.as_ref().map(|s| s.owner), Some(1));
        // Its own attempt owns it: nothing changes.
        assert_eq!(
            StoredBook::on_assignment(&mut stored, task, 1, Some(1)),
            Ok(None)
        );
        // Another worker's attempt 2: it claims the book and imports it; attempt 1 is fenced.
        let taken = StoredBook::on_assignment(&mut stored, task, 2, None).unwrap();
        assert_eq!(taken.map(|b| b.owner), Some(2));
        assert!(StoredBook::write(
            &mut stored,
            task,
            StoredBook {
                owner: 1,
                ..StoredBook::default()
            }
        )
        .is_err());
        // A stale assignment of attempt 1 is refused and changes nothing.
        assert!(StoredBook::on_assignment(&mut stored, task, 1, Some(1)).is_err());
        assert_eq!(stored.as_ref().map(|s| s.owner), Some(2));
    }
}
