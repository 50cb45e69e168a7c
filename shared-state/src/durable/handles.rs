//! [`RedbStore`] and [`RedbLog`]: typed handles on a table of a [`RedbDb`].

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use quorate_protocols::{RunId, Version};
use redb::{ReadOnlyTable, ReadableDatabase, TableError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::oneshot;

use super::writer::{CasDone, Current, DeleteDone, KvTable, LogTable, Op};
use super::{Commit, RedbDb};
use crate::codec::{decode, encode};
use crate::{CasOutcome, DeleteOutcome, FileOp, RunLog, Seq, Store, StoreError, Versioned};

/// A [`Store`] on a table of a [`RedbDb`] file.
///
/// Versions are store-wide (file-wide) and never reused, across reopens too. Writes go through
/// the file's writer thread and are answered after their commit ([`Commit`] says whether that
/// commit is durable); reads run inline on a snapshot. Values are stored as CBOR.
///
/// Cloning is cheap and keeps the file open.
pub struct RedbStore<V> {
    db: RedbDb,
    table: Arc<str>,
    commit: Commit,
    values: PhantomData<fn() -> V>,
}

/// A [`RunLog`] on a table of a [`RedbDb`] file: every run's entries, keyed by run id and
/// sequence number.
///
/// Sequence numbers are assigned by the file's writer thread in commit order, so a run's log
/// on disk is always gap-free. Entries are stored as CBOR.
///
/// Cloning is cheap and keeps the file open.
pub struct RedbLog<E> {
    db: RedbDb,
    table: Arc<str>,
    commit: Commit,
    entries: PhantomData<fn() -> E>,
}

macro_rules! handle_common {
    ($name:ident, $prefix:literal, $param:ident, $field:ident) => {
        impl<$param> $name<$param> {
            pub(super) fn new(db: RedbDb, name: &str, commit: Commit) -> Self {
                Self {
                    db,
                    table: Arc::from(format!(concat!($prefix, "{}"), name)),
                    commit,
                    $field: PhantomData,
                }
            }

            /// This handle with its writes committed by `commit` (the file's other handles keep
            /// theirs).
            #[must_use]
            pub fn with_commit(mut self, commit: Commit) -> Self {
                self.commit = commit;
                self
            }

            /// When this handle's writes are on disk.
            #[must_use]
            pub fn commit(&self) -> Commit {
                self.commit
            }

            /// The file this handle writes to.
            #[must_use]
            pub fn db(&self) -> &RedbDb {
                &self.db
            }

            /// [`RedbDb::flush`]: every write confirmed before this call is on disk once it
            /// returns.
            ///
            /// # Errors
            /// [`StoreError::File`]: the durable commit failed.
            pub async fn flush(&self) -> Result<(), StoreError> {
                self.db.flush().await
            }

            fn durable(&self) -> bool {
                self.commit == Commit::Durable
            }
        }

        impl<$param> Clone for $name<$param> {
            fn clone(&self) -> Self {
                Self {
                    db: self.db.clone(),
                    table: self.table.clone(),
                    commit: self.commit,
                    $field: PhantomData,
                }
            }
        }

        impl<$param> fmt::Debug for $name<$param> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("path", &self.db.path())
                    .field("table", &self.table)
                    .field("commit", &self.commit)
                    .finish()
            }
        }
    };
}

handle_common!(RedbStore, "store/", V, values);
handle_common!(RedbLog, "log/", E, entries);

/// Opens `table` for reading; `None` if nothing was ever written to it.
fn open_read<K: redb::Key + 'static, W: redb::Value + 'static>(
    db: &RedbDb,
    def: redb::TableDefinition<'_, K, W>,
) -> Result<Option<ReadOnlyTable<K, W>>, StoreError> {
    let txn = db
        .database()
        .begin_read()
        .map_err(|e| db.error(FileOp::Read, e))?;
    match txn.open_table(def) {
        Ok(table) => Ok(Some(table)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(db.error(FileOp::Read, e)),
    }
}

/// The writer's answer to a CAS of `key`, as a [`CasOutcome`].
fn cas_outcome<V: DeserializeOwned>(key: &str, done: CasDone) -> Result<CasOutcome<V>, StoreError> {
    Ok(match done {
        CasDone::Committed(v) => CasOutcome::Committed(Version::new(v)),
        CasDone::Conflict(current) => CasOutcome::Conflict {
            current: versioned(key, current)?,
        },
    })
}

fn versioned<V: DeserializeOwned>(
    key: &str,
    current: Current,
) -> Result<Option<Versioned<V>>, StoreError> {
    current
        .map(|(version, bytes)| {
            Ok(Versioned {
                value: decode(key, &bytes)?,
                version: Version::new(version),
            })
        })
        .transpose()
}

impl<V: Serialize + DeserializeOwned> RedbStore<V> {
    /// [`Store::get`], synchronously (a short read transaction).
    ///
    /// # Errors
    /// [`StoreError::File`] (the read failed) or [`StoreError::Corrupt`] (the value does not
    /// decode as `V`).
    pub fn get_now(&self, key: &str) -> Result<Option<Versioned<V>>, StoreError> {
        let Some(table) = open_read(&self.db, KvTable::new(&self.table))? else {
            return Ok(None);
        };
        let found = table
            .get(key)
            .map_err(|e| self.db.error(FileOp::Read, e))?
            .map(|g| {
                let (version, bytes) = g.value();
                (version, bytes.to_vec())
            });
        versioned(key, found)
    }

    /// [`Store::scan`], synchronously (a short read transaction).
    ///
    /// # Errors
    /// As [`RedbStore::get_now`].
    pub fn scan_now(&self, prefix: &str) -> Result<Vec<(String, Versioned<V>)>, StoreError> {
        let Some(table) = open_read(&self.db, KvTable::new(&self.table))? else {
            return Ok(Vec::new());
        };
        let read_error = |e: redb::StorageError| self.db.error(FileOp::Read, e);
        let mut out = Vec::new();
        for item in table.range::<&str>(prefix..).map_err(read_error)? {
            let (key, value) = item.map_err(read_error)?;
            let key = key.value();
            if !key.starts_with(prefix) {
                break;
            }
            let (version, bytes) = value.value();
            out.push((
                key.to_owned(),
                Versioned {
                    value: decode(key, bytes)?,
                    version: Version::new(version),
                },
            ));
        }
        Ok(out)
    }
}

impl<V: Serialize + DeserializeOwned + Send + Sync> RedbStore<V> {
    /// The writer's op CASing the encoded `value` under `key`, and where its answer comes back.
    fn cas_op(
        &self,
        key: String,
        expected: Option<Version>,
        value: Vec<u8>,
    ) -> (Op, oneshot::Receiver<Result<CasDone, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let op = Op::Cas {
            table: self.table.clone(),
            key,
            expected: expected.map(Version::raw),
            value,
            reply,
        };
        (op, answer)
    }

    /// CASes every `(key, expected, value)` of `writes`, in order, as [`Store::cas`] would one
    /// after the other (a write sees the ones before it), but queued together before any answer
    /// is awaited: the writer thread applies them in as few transactions as its batch size
    /// allows (one, for up to `RedbOptions::max_batch` writes) and commits each once, instead
    /// of one commit per write awaited in turn. The outcomes come back in order. A write that
    /// cannot be encoded is refused before any is queued.
    ///
    /// # Errors
    /// [`StoreError::Unencodable`] (nothing queued), or [`StoreError::File`].
    pub async fn cas_all(
        &self,
        writes: impl IntoIterator<Item = (String, Option<Version>, V)>,
    ) -> Result<Vec<CasOutcome<V>>, StoreError> {
        let mut ops = Vec::new();
        for (key, expected, value) in writes {
            let bytes = encode(&key, &value)?;
            ops.push((key, expected, bytes));
        }
        let mut answers = Vec::with_capacity(ops.len());
        for (key, expected, value) in ops {
            let (op, answer) = self.cas_op(key.clone(), expected, value);
            self.db.enqueue(op, self.durable())?;
            answers.push((key, answer));
        }
        let mut out = Vec::with_capacity(answers.len());
        for (key, answer) in answers {
            out.push(cas_outcome(&key, self.db.answer(answer).await?)?);
        }
        Ok(out)
    }
}

impl<V: Serialize + DeserializeOwned + Send + Sync> Store<V> for RedbStore<V> {
    async fn get(&self, key: &str) -> Result<Option<Versioned<V>>, StoreError> {
        self.get_now(key)
    }

    async fn cas(
        &self,
        key: &str,
        expected: Option<Version>,
        value: V,
    ) -> Result<CasOutcome<V>, StoreError> {
        let bytes = encode(key, &value)?;
        let (op, answer) = self.cas_op(key.to_owned(), expected, bytes);
        cas_outcome(key, self.db.submit(op, self.durable(), answer).await?)
    }

    async fn delete(&self, key: &str, expected: Version) -> Result<DeleteOutcome<V>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = Op::Delete {
            table: self.table.clone(),
            key: key.to_owned(),
            expected: expected.raw(),
            reply,
        };
        match self.db.submit(op, self.durable(), answer).await? {
            DeleteDone::Deleted => Ok(DeleteOutcome::Deleted),
            DeleteDone::Conflict(current) => Ok(DeleteOutcome::Conflict {
                current: versioned(key, current)?,
            }),
        }
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Versioned<V>)>, StoreError> {
        self.scan_now(prefix)
    }
}

fn run_key(run: RunId) -> u128 {
    run.as_uuid().as_u128()
}

impl<E: Serialize + DeserializeOwned> RedbLog<E> {
    fn entry_key(&self, run: RunId) -> String {
        format!("{}/{run}", self.table)
    }

    /// The writer's op appending the encoded `entry` to `run`'s log, and where its sequence
    /// number comes back.
    fn append_op(
        &self,
        run: RunId,
        entry: Vec<u8>,
    ) -> (Op, oneshot::Receiver<Result<u64, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        let op = Op::Append {
            table: self.table.clone(),
            run: run_key(run),
            entry,
            reply,
        };
        (op, answer)
    }

    /// [`RunLog::read`], synchronously (a short read transaction).
    ///
    /// # Errors
    /// [`StoreError::File`] (the read failed) or [`StoreError::Corrupt`] (an entry does not
    /// decode as `E`).
    pub fn read_now(
        &self,
        run: RunId,
        from: Seq,
        limit: usize,
    ) -> Result<Vec<(Seq, E)>, StoreError> {
        let Some(table) = open_read(&self.db, LogTable::new(&self.table))? else {
            return Ok(Vec::new());
        };
        let read_error = |e: redb::StorageError| self.db.error(FileOp::Read, e);
        let run_id = run_key(run);
        let mut out = Vec::new();
        let range = table
            .range((run_id, from.0)..=(run_id, u64::MAX))
            .map_err(read_error)?;
        for item in range.take(limit) {
            let (key, entry) = item.map_err(read_error)?;
            let seq = key.value().1;
            let entry = decode(&format!("{}/{seq}", self.entry_key(run)), entry.value())?;
            out.push((Seq(seq), entry));
        }
        Ok(out)
    }

    /// Number of entries in `run`'s log (one past its last sequence number).
    ///
    /// # Errors
    /// [`StoreError::File`]: the read failed.
    pub fn len(&self, run: RunId) -> Result<u64, StoreError> {
        let Some(table) = open_read(&self.db, LogTable::new(&self.table))? else {
            return Ok(0);
        };
        let read_error = |e: redb::StorageError| self.db.error(FileOp::Read, e);
        let run_id = run_key(run);
        let last = table
            .range((run_id, 0)..=(run_id, u64::MAX))
            .map_err(read_error)?
            .next_back()
            .transpose()
            .map_err(read_error)?;
        Ok(last.map_or(0, |(key, _)| key.value().1 + 1))
    }
}

impl<E: Serialize + DeserializeOwned + Send + Sync> RedbLog<E> {
    /// Appends `entries` to run `run`'s log, in order, as [`RunLog::append`] would one after
    /// the other, but queued together before any answer is awaited: the writer thread commits
    /// them in as few transactions as its batch size allows (see [`RedbStore::cas_all`]). Their
    /// sequence numbers come back in order (consecutive, unless another writer's appends to the
    /// same run were queued in between). An entry that cannot be encoded is refused before any
    /// is queued.
    ///
    /// # Errors
    /// [`StoreError::Unencodable`] (nothing queued), or [`StoreError::File`].
    pub async fn append_all<'a>(
        &self,
        run: RunId,
        entries: impl IntoIterator<Item = &'a E>,
    ) -> Result<Vec<Seq>, StoreError>
    where
        E: 'a,
    {
        let key = self.entry_key(run);
        let encoded = entries
            .into_iter()
            .map(|e| encode(&key, e))
            .collect::<Result<Vec<_>, _>>()?;
        let mut answers = Vec::with_capacity(encoded.len());
        for bytes in encoded {
            let (op, answer) = self.append_op(run, bytes);
            self.db.enqueue(op, self.durable())?;
            answers.push(answer);
        }
        let mut out = Vec::with_capacity(answers.len());
        for answer in answers {
            out.push(Seq(self.db.answer(answer).await?));
        }
        Ok(out)
    }
}

impl<E: Serialize + DeserializeOwned + Send + Sync> RunLog<E> for RedbLog<E> {
    async fn append(&self, run: RunId, entry: E) -> Result<Seq, StoreError> {
        let bytes = encode(&self.entry_key(run), &entry)?;
        let (op, answer) = self.append_op(run, bytes);
        self.db.submit(op, self.durable(), answer).await.map(Seq)
    }

    async fn read(&self, run: RunId, from: Seq, limit: usize) -> Result<Vec<(Seq, E)>, StoreError> {
        self.read_now(run, from, limit)
    }
}
