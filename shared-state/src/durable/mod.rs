//! The durable backend: [`RedbStore`] and [`RedbLog`] on one [redb] file ([`RedbDb`]).
//!
//! One file holds any number of stores and logs, each a named table; a log keeps every run's
//! entries under the run's id, so one file holds many runs. Versions come from one counter kept
//! in the file, so a key deleted and created again never reuses a version, across reopens too.
//!
//! **Writes** go to the file's one writer thread. It takes every write queued at that moment
//! (up to [`RedbOptions::max_batch`]), applies them in order in one write transaction, commits
//! once and then answers each writer: concurrent writers share one fsync (*group commit*), and
//! the fsync never blocks an async worker thread. With [`Commit::Durable`] (the default) a write
//! is on disk before its future resolves. With [`Commit::Deferred`] it is confirmed once
//! committed without an fsync, and reaches the disk with the next durable commit
//! ([`RedbDb::flush`], or any durable write on the file). docs/durable.md says what a crash can
//! lose under each.
//!
//! **Reads** (`get`, `scan`, `read`) run inline on the caller's thread: a redb read transaction
//! is a snapshot that never waits for the writer, and a lookup is a few page reads from redb's
//! cache or the page cache (microseconds); moving it to `spawn_blocking` would cost a thread
//! hand-off of the same order. A read sees every confirmed write, durable or not.
//!
//! **Encoding**: values are stored as CBOR (RFC 8949, the ciborium crate). It has to be
//! self-describing: the stores hold JSON values (results, as `Payload`s) and records that contain
//! them (`ActionRecord`), whose `Deserialize` asks the format what comes next, which compact
//! schema-driven formats (postcard, bincode) cannot answer. It has to take maps with any keys:
//! an `Account` maps `AccountId` (an enum) to budgets, which JSON refuses. CBOR does both, keeps
//! field names (a field added with `#[serde(default)]` still reads old records), and is binary
//! (an integer is 1 to 9 bytes). The cost of encoding is small next to a commit's fsync.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), quorate_state::StoreError> {
//! use quorate_state::{CasOutcome, RedbDb, Store};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let db = RedbDb::open(dir.path().join("runs.redb"))?;
//! let store = db.store::<u32>("counters");
//! let CasOutcome::Committed(v1) = store.cas("k", None, 1).await? else { unreachable!() };
//! drop((store, db));
//!
//! // Reopened: the value and its version are there, and the counter goes on from them.
//! let store = RedbDb::open(dir.path().join("runs.redb"))?.store::<u32>("counters");
//! let read = store.get("k").await?.unwrap();
//! assert_eq!((read.value, read.version), (1, v1));
//! # Ok(())
//! # }
//! ```

mod handles;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use redb::{Database, ReadableTable};
use tokio::sync::oneshot;

pub use handles::{RedbLog, RedbStore};

use crate::{FileOp, StoreError};
use writer::{Job, Op, Writer, CEILING, META, REVISION};

/// When a confirmed write is on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Commit {
    /// A write is committed with an fsync (`redb::Durability::Immediate`) before its future
    /// resolves. Writes queued together share one commit and one fsync.
    #[default]
    Durable,
    /// A write is committed without an fsync (`redb::Durability::None`): it is confirmed and
    /// visible to every reader of the file, but a crash (even of the process alone) takes back
    /// everything since the last durable commit. [`RedbDb::flush`] makes it durable; so does any
    /// durable write on the same file. Never act on a deferred write (execute an action, report a
    /// result) before a flush that followed it has returned.
    Deferred,
}

/// How a [`RedbDb`] is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedbOptions {
    /// The commit mode of the handles made by [`RedbDb::store`] and [`RedbDb::log`]
    /// (each handle can change its own: `with_commit`).
    pub commit: Commit,
    /// At most this many queued writes share one transaction.
    pub max_batch: usize,
}

impl Default for RedbOptions {
    fn default() -> Self {
        Self {
            commit: Commit::Durable,
            max_batch: 1024,
        }
    }
}

/// One redb database file: the stores and logs on it share its writer thread and its version
/// counter.
///
/// Cloning is cheap (a shared handle). The file is closed when the last clone and the last
/// handle made from it are dropped; that drop waits for the writer thread to finish the batch
/// it is committing; closing makes deferred commits durable (redb's close does), so a clean
/// close loses nothing. The file is locked while open: a second `open` of it (in this process or
/// another) fails with [`StoreError::File`].
#[derive(Clone, Debug)]
pub struct RedbDb {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    db: Arc<Database>,
    path: PathBuf,
    commit: Commit,
    /// `Some` until drop, which closes the queue so the writer thread ends.
    queue: Option<Sender<Job>>,
    writer: Option<JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(writer) = self.writer.take() {
            // A panic in the writer thread has already failed its writers; nothing to add here.
            let _ = writer.join();
        }
    }
}

impl RedbDb {
    /// Opens the database file at `path`, creating it if absent, with the default options
    /// (durable commits).
    ///
    /// # Errors
    /// [`StoreError::File`] with [`FileOp::Open`]: the file is not a redb database, is locked
    /// by another open, or cannot be read or written.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, RedbOptions::default())
    }

    /// Opens the database file at `path`, creating it if absent.
    ///
    /// # Errors
    /// As [`RedbDb::open`].
    pub fn open_with(path: impl AsRef<Path>, options: RedbOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let fail = |reason: String| StoreError::File {
            path: path.clone(),
            operation: FileOp::Open,
            reason,
        };
        let db = Database::create(&path).map_err(|e| fail(e.to_string()))?;
        let (revision, ceiling) = counters(&db).map_err(|e| fail(e.to_string()))?;
        let db = Arc::new(db);
        let writer = Writer {
            db: db.clone(),
            path: path.clone(),
            // Past every version a durable commit recorded and every one reserved for commits
            // a crash may have taken back.
            next: revision.max(ceiling) + 1,
            ceiling,
            max_batch: options.max_batch.max(1),
            broken: None,
        };
        let (queue, jobs) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("quorate-redb-writer".into())
            .spawn(move || writer.run(&jobs))
            .map_err(|e| fail(format!("could not start the writer thread: {e}")))?;
        Ok(Self {
            shared: Arc::new(Shared {
                db,
                path,
                commit: options.commit,
                queue: Some(queue),
                writer: Some(thread),
            }),
        })
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The [`Store`](crate::Store) named `name` on this file (created by its first write). Values
    /// of one store must all be of type `V`.
    #[must_use]
    pub fn store<V>(&self, name: &str) -> RedbStore<V> {
        RedbStore::new(self.clone(), name, self.shared.commit)
    }

    /// The [`RunLog`](crate::RunLog) named `name` on this file (created by its first append).
    /// Entries of one log must all be of type `E`.
    #[must_use]
    pub fn log<E>(&self, name: &str) -> RedbLog<E> {
        RedbLog::new(self.clone(), name, self.shared.commit)
    }

    /// Makes every write confirmed before this call durable: returns once a durable commit that
    /// follows them has reached the disk.
    ///
    /// # Errors
    /// [`StoreError::File`]: the commit failed (then nothing deferred is known to be on disk).
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.submit(Op::Flush { reply }, true, answer).await
    }

    fn database(&self) -> &Database {
        &self.shared.db
    }

    fn error(&self, operation: FileOp, reason: impl ToString) -> StoreError {
        StoreError::File {
            path: self.shared.path.clone(),
            operation,
            reason: reason.to_string(),
        }
    }

    /// Queues `op` for the writer thread and waits for its answer.
    async fn submit<T>(
        &self,
        op: Op,
        durable: bool,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.enqueue(op, durable)?;
        self.answer(answer).await
    }

    /// Queues `op` for the writer thread without waiting: its answer comes on the op's reply
    /// channel ([`answer`](Self::answer)). Ops are applied in the order they were queued.
    fn enqueue(&self, op: Op, durable: bool) -> Result<(), StoreError> {
        let gone = || self.error(FileOp::Writer, "the writer thread has stopped");
        let queue = self.shared.queue.as_ref().ok_or_else(gone)?;
        queue.send(Job { op, durable }).map_err(|_| gone())
    }

    /// The answer to an op queued with [`enqueue`](Self::enqueue).
    async fn answer<T>(
        &self,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let gone = || self.error(FileOp::Writer, "the writer thread has stopped");
        answer.await.map_err(|_| gone())?
    }
}

/// The counters kept in the file, creating its meta table on first open.
fn counters(db: &Database) -> Result<(u64, u64), redb::Error> {
    let txn = db.begin_write()?;
    let found = {
        let meta = txn.open_table(META)?;
        let revision = meta.get(REVISION)?.map_or(0, |g| g.value());
        let ceiling = meta.get(CEILING)?.map_or(0, |g| g.value());
        (revision, ceiling)
    };
    txn.commit()?;
    Ok(found)
}
