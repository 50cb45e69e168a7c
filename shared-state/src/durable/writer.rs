//! The file's one writer thread: it takes the writes of every handle on the file from a queue,
//! applies each batch in one redb write transaction, commits it once, and only then answers the
//! writers (group commit).
//!
//! Values cross the queue already encoded, so the thread is not generic: one thread serves the
//! stores and logs of every value type on the file.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

use redb::{Database, Durability, ReadableTable, TableDefinition, WriteTransaction};
use tokio::sync::oneshot;

use crate::{FileOp, StoreError};

/// A store's table: key -> (version, encoded value).
pub(super) type KvTable<'a> = TableDefinition<'a, &'static str, (u64, &'static [u8])>;
/// A log's table: (run, seq) -> encoded entry. Runs are UUIDs as `u128`, so one run's entries
/// are contiguous and in sequence order.
pub(super) type LogTable<'a> = TableDefinition<'a, (u128, u64), &'static [u8]>;
/// The file's counters.
pub(super) const META: TableDefinition<'static, &'static str, u64> = TableDefinition::new("meta");
/// The last version handed out by a durable commit.
pub(super) const REVISION: &str = "revision";
/// Every version up to this one may have been handed out (by a commit that a crash can undo).
pub(super) const CEILING: &str = "ceiling";
/// How many versions one durable commit reserves for the non-durable commits after it.
const RESERVE: u64 = 1 << 20;

/// The current value of a key as the writer saw it: version and encoded value.
pub(super) type Current = Option<(u64, Vec<u8>)>;

/// What a CAS did (`Store::cas`, before decoding).
pub(super) enum CasDone {
    Committed(u64),
    Conflict(Current),
}

/// What a delete did (`Store::delete`, before decoding).
pub(super) enum DeleteDone {
    Deleted,
    Conflict(Current),
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// One write, with the channel its answer goes back on.
pub(super) enum Op {
    Cas {
        table: Arc<str>,
        key: String,
        expected: Option<u64>,
        value: Vec<u8>,
        reply: Reply<CasDone>,
    },
    Delete {
        table: Arc<str>,
        key: String,
        expected: u64,
        reply: Reply<DeleteDone>,
    },
    Append {
        table: Arc<str>,
        run: u128,
        entry: Vec<u8>,
        reply: Reply<u64>,
    },
    /// Nothing to write: the batch it lands in commits durably.
    Flush { reply: Reply<()> },
}

/// An [`Op`] and whether its batch must commit durably before it is answered.
pub(super) struct Job {
    pub(super) op: Op,
    pub(super) durable: bool,
}

/// An applied op, waiting for its batch's commit.
enum Applied {
    Cas(Reply<CasDone>, CasDone),
    Delete(Reply<DeleteDone>, DeleteDone),
    Append(Reply<u64>, u64),
    Flush(Reply<()>),
}

impl Applied {
    fn confirm(self) {
        // A writer that stopped waiting (its future was dropped) just does not hear the answer.
        match self {
            Applied::Cas(tx, done) => answer(tx, Ok(done)),
            Applied::Delete(tx, done) => answer(tx, Ok(done)),
            Applied::Append(tx, seq) => answer(tx, Ok(seq)),
            Applied::Flush(tx) => answer(tx, Ok(())),
        }
    }

    fn fail(self, err: StoreError) {
        match self {
            Applied::Cas(tx, _) => answer(tx, Err(err)),
            Applied::Delete(tx, _) => answer(tx, Err(err)),
            Applied::Append(tx, _) => answer(tx, Err(err)),
            Applied::Flush(tx) => answer(tx, Err(err)),
        }
    }
}

/// Sends a writer its answer; one that stopped waiting (its future was dropped) does not hear it,
/// which changes nothing about what was written.
fn answer<T>(reply: Reply<T>, result: Result<T, StoreError>) {
    let _ = reply.send(result);
}

impl Op {
    fn fail(self, err: StoreError) {
        match self {
            Op::Cas { reply, .. } => answer(reply, Err(err)),
            Op::Delete { reply, .. } => answer(reply, Err(err)),
            Op::Append { reply, .. } => answer(reply, Err(err)),
            Op::Flush { reply } => answer(reply, Err(err)),
        }
    }
}

/// The writer thread's state.
pub(super) struct Writer {
    pub(super) db: Arc<Database>,
    pub(super) path: PathBuf,
    /// The next version to hand out.
    pub(super) next: u64,
    /// The durable ceiling: every version up to it is reserved.
    pub(super) ceiling: u64,
    pub(super) max_batch: usize,
    /// Set once a commit failed: redb refuses writes until the file is reopened.
    pub(super) broken: Option<String>,
}

impl Writer {
    fn error(&self, operation: FileOp, reason: impl ToString) -> StoreError {
        StoreError::File {
            path: self.path.clone(),
            operation,
            reason: reason.to_string(),
        }
    }

    /// Serves batches until every sender is gone. (Closing the database then makes a pending
    /// non-durable commit durable: redb does that on close.)
    pub(super) fn run(mut self, queue: &Receiver<Job>) {
        while let Ok(first) = queue.recv() {
            let mut jobs = vec![first];
            while jobs.len() < self.max_batch {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.batch(jobs);
        }
    }

    /// Applies `jobs` in one transaction, commits once, then answers each of them.
    fn batch(&mut self, jobs: Vec<Job>) {
        if let Some(reason) = &self.broken {
            let err = self.error(
                FileOp::Commit,
                format!("an earlier commit failed ({reason}); reopen the file"),
            );
            for job in jobs {
                job.op.fail(err.clone());
            }
            return;
        }
        let txn = match self.db.begin_write() {
            Ok(txn) => txn,
            Err(e) => {
                let err = self.error(FileOp::Write, e);
                for job in jobs {
                    job.op.fail(err.clone());
                }
                return;
            }
        };
        let mut durable = jobs.iter().any(|j| j.durable);
        let first_version = self.next;
        let mut applied = Vec::with_capacity(jobs.len());
        let mut jobs = jobs.into_iter();
        let mut failure = None;
        for job in jobs.by_ref() {
            match self.apply(&txn, job.op) {
                Ok(done) => applied.push(done),
                Err(err) => {
                    failure = Some(err);
                    break;
                }
            }
        }
        let mut new_ceiling = None;
        if failure.is_none() {
            let last = self.next - 1;
            if !durable && self.next != first_version && last > self.ceiling {
                // Versions a crash could take back must stay reserved: raise the ceiling, durably.
                new_ceiling = Some(last + RESERVE);
                durable = true;
            }
            if let Err(e) = self.write_counters(&txn, self.next != first_version, new_ceiling) {
                failure = Some(self.error(FileOp::Write, e));
            }
        }
        if let Some(err) = failure {
            // Nothing of this batch was committed: an aborted transaction leaves no trace.
            drop(txn.abort());
            for done in applied {
                done.fail(err.clone());
            }
            for job in jobs {
                job.op.fail(err.clone());
            }
            return;
        }
        let commit = Self::commit(txn, durable);
        match commit {
            Ok(()) => {
                if let Some(ceiling) = new_ceiling {
                    self.ceiling = ceiling;
                }
                for done in applied {
                    done.confirm();
                }
            }
            Err(reason) => {
                self.broken = Some(reason.clone());
                let err = self.error(
                    FileOp::Commit,
                    format!("{reason} (the batch may or may not be on disk)"),
                );
                for done in applied {
                    done.fail(err.clone());
                }
            }
        }
    }

    fn commit(mut txn: WriteTransaction, durable: bool) -> Result<(), String> {
        let level = if durable {
            Durability::Immediate
        } else {
            Durability::None
        };
        txn.set_durability(level).map_err(|e| e.to_string())?;
        txn.commit().map_err(|e| e.to_string())
    }

    fn write_counters(
        &self,
        txn: &WriteTransaction,
        handed_out: bool,
        ceiling: Option<u64>,
    ) -> Result<(), redb::Error> {
        if !handed_out && ceiling.is_none() {
            return Ok(());
        }
        let mut meta = txn.open_table(META)?;
        if handed_out {
            meta.insert(REVISION, self.next - 1)?;
        }
        if let Some(ceiling) = ceiling {
            meta.insert(CEILING, ceiling)?;
        }
        Ok(())
    }

    fn version(&mut self) -> u64 {
        let v = self.next;
        self.next += 1;
        v
    }

    /// Applies one op inside `txn`. On error the op's writer has been told, and the error comes
    /// back so the whole batch is abandoned.
    fn apply(&mut self, txn: &WriteTransaction, op: Op) -> Result<Applied, StoreError> {
        match op {
            Op::Cas {
                table,
                key,
                expected,
                value,
                reply,
            } => {
                let done = self.cas(txn, &table, &key, expected, &value);
                self.settle(reply, done, Applied::Cas)
            }
            Op::Delete {
                table,
                key,
                expected,
                reply,
            } => {
                let done = Self::delete(txn, &table, &key, expected);
                self.settle(reply, done, Applied::Delete)
            }
            Op::Append {
                table,
                run,
                entry,
                reply,
            } => {
                let seq = Self::append(txn, &table, run, &entry);
                self.settle(reply, seq, Applied::Append)
            }
            Op::Flush { reply } => Ok(Applied::Flush(reply)),
        }
    }

    fn settle<T>(
        &self,
        reply: Reply<T>,
        done: Result<T, redb::Error>,
        applied: fn(Reply<T>, T) -> Applied,
    ) -> Result<Applied, StoreError> {
        match done {
            Ok(done) => Ok(applied(reply, done)),
            Err(e) => {
                let err = self.error(FileOp::Write, e);
                answer(reply, Err(err.clone()));
                Err(err)
            }
        }
    }

    fn cas(
        &mut self,
        txn: &WriteTransaction,
        table: &str,
        key: &str,
        expected: Option<u64>,
        value: &[u8],
    ) -> Result<CasDone, redb::Error> {
        let mut kv = txn.open_table(KvTable::new(table))?;
        let current: Current = kv.get(key)?.map(|g| {
            let (v, bytes) = g.value();
            (v, bytes.to_vec())
        });
        let matches = match (&current, expected) {
            (None, None) => true,
            (Some((at, _)), Some(expected)) => *at == expected,
            _ => false,
        };
        if !matches {
            return Ok(CasDone::Conflict(current));
        }
        let version = self.version();
        kv.insert(key, (version, value))?;
        Ok(CasDone::Committed(version))
    }

    fn delete(
        txn: &WriteTransaction,
        table: &str,
        key: &str,
        expected: u64,
    ) -> Result<DeleteDone, redb::Error> {
        let mut kv = txn.open_table(KvTable::new(table))?;
        let current: Current = kv.get(key)?.map(|g| {
            let (v, bytes) = g.value();
            (v, bytes.to_vec())
        });
        match current {
            Some((at, _)) if at == expected => {
                kv.remove(key)?;
                Ok(DeleteDone::Deleted)
            }
            other => Ok(DeleteDone::Conflict(other)),
        }
    }

    fn append(
        txn: &WriteTransaction,
        table: &str,
        run: u128,
        entry: &[u8],
    ) -> Result<u64, redb::Error> {
        let mut log = txn.open_table(LogTable::new(table))?;
        let seq = match log.range((run, 0)..=(run, u64::MAX))?.next_back() {
            Some(last) => last?.0.value().1 + 1,
            None => 0,
        };
        log.insert((run, seq), entry)?;
        Ok(seq)
    }
}
