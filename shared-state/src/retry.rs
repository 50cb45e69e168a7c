//! The one CAS-retry loop every ledger (and `quorate-memory`) uses: read, apply a pure update,
//! CAS, and on conflict start over from the value the conflict returned.

use quorate_protocols::Version;

use crate::{CasOutcome, Store, StoreError, Versioned};

/// How many conflicts an [`update`] tolerates before it gives up with
/// [`UpdateError::Contention`].
pub const MAX_CAS_ATTEMPTS: u32 = 10_000;

/// An [`update`] could not be applied. Nothing was written, except perhaps on a `Store` error
/// (the backend may have failed after the write landed).
#[derive(Debug, thiserror::Error)]
pub enum UpdateError<E> {
    /// The pure update refused (its own typed error). Retrying the same input cannot help.
    #[error(transparent)]
    Refused(E),
    /// The backend failed; re-read before acting (the write may or may not have landed).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Lost the race [`MAX_CAS_ATTEMPTS`] times in a row; retrying later can help.
    #[error("gave up after {attempts} CAS conflicts")]
    Contention {
        /// Conflicts seen.
        attempts: u32,
    },
}

/// What the pure update of an [`update`] wants done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change<V, T> {
    /// Write `V` (with CAS on the version read), then return `T`.
    Write(V, T),
    /// Write nothing and return `T` (the update was already applied, or is a read).
    Keep(T),
}

/// What an [`update`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "an update may have kept the value instead of writing it"]
pub struct Updated<T> {
    /// What the pure update returned on the run that counted.
    pub value: T,
    /// The version the write committed, or `None` if the update returned [`Change::Keep`].
    pub version: Option<Version>,
    /// How many CAS conflicts were lost on the way (each one re-ran the update against the
    /// value that won).
    pub conflicts: u32,
}

/// Reads `key`, calls `f` with the current value (`None`: the key is absent), writes what it
/// returns with CAS on the version read, and on a conflict calls `f` again with the value that
/// won, until the write lands, `f` refuses or keeps, or [`MAX_CAS_ATTEMPTS`] conflicts were lost.
///
/// `f` must be pure: it may run many times, and only the result of its last run counts.
///
/// ```
/// use std::convert::Infallible;
///
/// use quorate_state::{update, Change, MemoryStore, UpdateError};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// let increment = |n: Option<&u32>| {
///     let next = n.map_or(1, |n| n + 1);
///     Ok::<_, Infallible>(Change::Write(next, next))
/// };
/// let first = update(&store, "counter", increment).await?;
/// assert_eq!((first.value, first.conflicts), (1, 0));
/// assert_eq!(first.version, Some(store.get_now("counter").unwrap().version));
///
/// // A concurrent writer gets in between our read and our CAS: the update loses once, runs
/// // again on the value that won, and commits on top of it.
/// let mut interfered = false;
/// let second = update(&store, "counter", |n: Option<&u32>| {
///     if !interfered {
///         interfered = true;
///         assert!(store.cas_now("counter", first.version, 10).is_committed());
///     }
///     increment(n)
/// })
/// .await?;
/// assert_eq!((second.value, second.conflicts), (11, 1));
///
/// // Keeping the value writes nothing and reports no version.
/// let read = update(&store, "counter", |n: Option<&u32>| {
///     Ok::<_, Infallible>(Change::<u32, _>::Keep(n.copied()))
/// })
/// .await?;
/// assert_eq!((read.value, read.version), (Some(11), None));
///
/// // A refusal comes back as the update's own error, and nothing is written.
/// let refused = update(&store, "counter", |_: Option<&u32>| Err::<Change<u32, ()>, _>("closed"))
///     .await;
/// assert!(matches!(refused, Err(UpdateError::Refused("closed"))));
/// assert_eq!(store.get_now("counter").unwrap().value, 11);
/// # Ok::<(), UpdateError<Infallible>>(())
/// # }).unwrap();
/// ```
pub async fn update<V, S, T, E, F>(
    store: &S,
    key: &str,
    mut f: F,
) -> Result<Updated<T>, UpdateError<E>>
where
    S: Store<V> + ?Sized,
    F: FnMut(Option<&V>) -> Result<Change<V, T>, E>,
{
    let mut current: Option<Versioned<V>> = store.get(key).await?;
    for conflicts in 0..MAX_CAS_ATTEMPTS {
        let change = f(current.as_ref().map(|c| &c.value)).map_err(UpdateError::Refused)?;
        let (value, out) = match change {
            Change::Keep(out) => {
                return Ok(Updated {
                    value: out,
                    version: None,
                    conflicts,
                })
            }
            Change::Write(value, out) => (value, out),
        };
        let expected = current.as_ref().map(|c| c.version);
        match store.cas(key, expected, value).await? {
            CasOutcome::Committed(version) => {
                return Ok(Updated {
                    value: out,
                    version: Some(version),
                    conflicts,
                })
            }
            CasOutcome::Conflict { current: now } => current = now,
        }
    }
    Err(UpdateError::Contention {
        attempts: MAX_CAS_ATTEMPTS,
    })
}
