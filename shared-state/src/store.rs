//! The [`Store`] trait: versioned compare-and-swap over string keys.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;

use quorate_protocols::Version;

/// A value together with the version it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<V> {
    /// The value.
    pub value: V,
    /// Its version. Pass it back as `expected` to update the value.
    pub version: Version,
}

/// What a [`Store::cas`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a CAS may have lost the race; a conflict must be re-read and merged"]
pub enum CasOutcome<V> {
    /// The value was written; this is its new version.
    Committed(Version),
    /// The expected version did not match. `current` is what is there now (`None`: the key is
    /// absent); merge into it and try again with its version.
    Conflict {
        /// The current value and version, if the key exists.
        current: Option<Versioned<V>>,
    },
}

impl<V> CasOutcome<V> {
    /// `true` if the write happened.
    #[must_use]
    pub fn is_committed(&self) -> bool {
        matches!(self, CasOutcome::Committed(_))
    }
}

/// What a [`Store::delete`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "a delete may have lost the race"]
pub enum DeleteOutcome<V> {
    /// The key was removed.
    Deleted,
    /// The key is at another version (or absent: `current` is `None`); nothing was removed.
    Conflict {
        /// The current value and version, if the key exists.
        current: Option<Versioned<V>>,
    },
}

/// A backend failed. The in-memory backend never returns one; the durable and networked backends
/// do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend could not be reached. Retrying later can help; the operation may or may not
    /// have been applied, so re-read before acting on it (the same rule as *outcome unknown*).
    #[error("store unavailable: {reason}")]
    Unavailable {
        /// What the backend said.
        reason: String,
    },
    /// The backend refused the caller: its credentials were wrong or missing, or its role may
    /// not read or write that key (an etcd user without the permission). Nothing was changed;
    /// retrying with the same credentials cannot help.
    #[error("store refused the caller: {reason}")]
    Denied {
        /// What the backend said.
        reason: String,
    },
    /// A stored value could not be decoded as the expected type. Retrying cannot help.
    #[error("value at {key:?} could not be decoded: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// The decoder's message.
        reason: String,
    },
    /// A value could not be encoded for storage (for example a map whose keys are not strings,
    /// which JSON cannot hold). Nothing was written; retrying the same value cannot help.
    #[error("value for {key:?} could not be encoded: {reason}")]
    Unencodable {
        /// The key (for a log: `log/<name>/<run>`).
        key: String,
        /// The encoder's message.
        reason: String,
    },
    /// The durable backend's file failed `operation` (I/O error, full disk, a file that another
    /// process holds, a file that is not a store, a stored record that does not decode).
    /// After a failed [`FileOp::Commit`] the write may or may not be on disk (*outcome unknown*:
    /// re-read before acting on it), and the file takes no further writes until it is reopened.
    #[error("{operation} on {}: {reason}", path.display())]
    File {
        /// The database file.
        path: PathBuf,
        /// What was being done.
        operation: FileOp,
        /// What the database said.
        reason: String,
    },
}

/// The operation on a durable store's file that a [`StoreError::File`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileOp {
    /// Opening (or creating) the file, its tables and its counters.
    Open,
    /// A read transaction (`get`, `scan`, `read`).
    Read,
    /// Applying a write inside a transaction (before its commit).
    Write,
    /// Committing a transaction (making it visible, and durable if asked).
    Commit,
    /// Reaching the file's writer thread, which has stopped.
    Writer,
}

impl fmt::Display for FileOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileOp::Open => "open",
            FileOp::Read => "read",
            FileOp::Write => "write",
            FileOp::Commit => "commit",
            FileOp::Writer => "hand-over to the writer thread",
        })
    }
}

/// Versioned key-value storage with compare-and-swap.
///
/// Every key has a [`Version`]. [`cas`](Store::cas) writes only if the current version equals
/// `expected` (or the key is absent when `expected` is `None`); otherwise it returns the current
/// value and version so the caller can re-read and merge. Nothing is overwritten blindly: there is
/// no unconditional `put`.
///
/// Versions are opaque tokens compared only for equality. A backend must never hand out a version
/// it handed out before for the same key (even after a delete), so a stale `expected` can never
/// match by accident (no ABA).
///
/// The methods return futures so a networked backend (etcd) can implement the trait without
/// blocking; the in-memory backend's futures are ready at once. Because the methods return
/// `impl Future`, the trait is not object-safe: callers are generic over `S: Store<V>`, which also
/// keeps dispatch static in hot paths. [`crate::conformance`] is the suite every implementation
/// must pass.
pub trait Store<V>: Send + Sync {
    /// The current value and version of `key`, if any.
    fn get(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Versioned<V>>, StoreError>> + Send;

    /// Writes `value` if `key` is at version `expected` (`None`: if the key is absent).
    fn cas(
        &self,
        key: &str,
        expected: Option<Version>,
        value: V,
    ) -> impl Future<Output = Result<CasOutcome<V>, StoreError>> + Send;

    /// Removes `key` if it is at version `expected`.
    fn delete(
        &self,
        key: &str,
        expected: Version,
    ) -> impl Future<Output = Result<DeleteOutcome<V>, StoreError>> + Send;

    /// Every key starting with `prefix`, with its value and version, in key order.
    fn scan(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<(String, Versioned<V>)>, StoreError>> + Send;
}
