//! The one CAS-retry loop every ledger uses: read, apply a pure update, CAS, and on conflict
//! start over from the value the conflict returned.

use crate::{CasOutcome, Store, StoreError, Versioned};

/// How many conflicts a ledger update tolerates before it gives up with a `Contention` error.
pub const MAX_CAS_ATTEMPTS: u32 = 10_000;

/// An update could not be applied.
#[derive(Debug)]
pub(crate) enum UpdateError<E> {
    /// The pure update refused (its own typed error).
    Refused(E),
    /// The backend failed.
    Store(StoreError),
    /// Lost the race [`MAX_CAS_ATTEMPTS`] times in a row.
    Contention { attempts: u32 },
}

/// What the pure update wants done.
pub(crate) enum Change<V, T> {
    /// Write `V`, then return `T`.
    Write(V, T),
    /// Write nothing and return `T` (the update was already applied, or is a read).
    Keep(T),
}

/// Reads `key`, calls `f` with the current value, writes what it returns with CAS, and retries
/// from the conflicting value until the write lands. `f` must be pure: it may run many times.
pub(crate) async fn update<V, S, T, E>(
    store: &S,
    key: &str,
    mut f: impl FnMut(Option<&V>) -> Result<Change<V, T>, E>,
) -> Result<T, UpdateError<E>>
where
    S: Store<V> + ?Sized,
    V: Clone,
{
    let mut current: Option<Versioned<V>> = store.get(key).await.map_err(UpdateError::Store)?;
    for _ in 0..MAX_CAS_ATTEMPTS {
        let change = f(current.as_ref().map(|c| &c.value)).map_err(UpdateError::Refused)?;
        let (value, out) = match change {
            Change::Keep(out) => return Ok(out),
            Change::Write(value, out) => (value, out),
        };
        let expected = current.as_ref().map(|c| c.version);
        match store
            .cas(key, expected, value)
            .await
            .map_err(UpdateError::Store)?
        {
            CasOutcome::Committed(_) => return Ok(out),
            CasOutcome::Conflict { current: now } => current = now,
        }
    }
    Err(UpdateError::Contention {
        attempts: MAX_CAS_ATTEMPTS,
    })
}
