//! Checking a task's store preconditions against the run's store: what the supervisor's and
//! the peers' shells do before a task becomes ready, and a worker's shell before each write call
//! of the task.

use quorate_protocols::{Precondition, Version};

use crate::MemoryStore;

/// Why a task's preconditions do not hold: the first failing check, naming its key and what
/// the store showed. The text (`Display`) is the observation the trace and the report print.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreconditionFailure {
    /// `key-exists`: the key is absent.
    #[error("{key} does not exist")]
    Missing {
        /// The key.
        key: String,
    },
    /// `key-absent`: the key exists.
    #[error("{key} exists")]
    Present {
        /// The key.
        key: String,
    },
    /// `key-at-version`: the key is at another version (another writer moved it).
    #[error("{key} is at {found}, expected {expected}")]
    WrongVersion {
        /// The key.
        key: String,
        /// The version the task was planned against.
        expected: Version,
        /// The version the store holds.
        found: Version,
    },
    /// `key-at-version`: the key is absent.
    #[error("{key} does not exist (expected {expected})")]
    MissingAtVersion {
        /// The key.
        key: String,
        /// The version the task was planned against.
        expected: Version,
    },
    /// `inputs-non-empty`: these dependencies (node names) delivered empty results.
    #[error("empty input from {}", from.join(", "))]
    EmptyInputs {
        /// The dependencies whose results are empty, in plan order.
        from: Vec<String>,
    },
    /// The task has store preconditions and there is no store to check them against, so they
    /// cannot be shown to hold (a worker built without the run's store).
    #[error("no store to check the task's preconditions against")]
    NoStore,
}

/// Checks `checks` against `store`; the error is the first failing check.
/// `inputs-non-empty` is not a store check and always passes here.
pub fn check_preconditions(
    store: &MemoryStore<quorate_protocols::Payload>,
    checks: &[Precondition],
) -> Result<(), PreconditionFailure> {
    for c in checks {
        match c {
            Precondition::KeyExists { key } => {
                if store.get_now(key).is_none() {
                    return Err(PreconditionFailure::Missing { key: key.clone() });
                }
            }
            Precondition::KeyAbsent { key } => {
                if store.get_now(key).is_some() {
                    return Err(PreconditionFailure::Present { key: key.clone() });
                }
            }
            Precondition::KeyAtVersion { key, version } => match store.get_now(key) {
                Some(v) if v.version == *version => {}
                Some(v) => {
                    return Err(PreconditionFailure::WrongVersion {
                        key: key.clone(),
                        expected: *version,
                        found: v.version,
                    })
                }
                None => {
                    return Err(PreconditionFailure::MissingAtVersion {
                        key: key.clone(),
                        expected: *version,
                    })
                }
            },
            Precondition::InputsNonEmpty => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn first_failing_check_is_reported() {
        let store = MemoryStore::new();
        let crate::CasOutcome::Committed(v) =
            store.cas_now("config/pricing", None, json!({"currency": "EUR"}).into())
        else {
            panic!("fresh key")
        };
        let ok = [
            Precondition::KeyExists {
                key: "config/pricing".into(),
            },
            Precondition::KeyAtVersion {
                key: "config/pricing".into(),
                version: v,
            },
            Precondition::KeyAbsent {
                key: "lock/pricing".into(),
            },
        ];
        assert_eq!(check_preconditions(&store, &ok), Ok(()));
        let bad = [Precondition::KeyExists {
            key: "config/tax".into(),
        }];
        let missing = check_preconditions(&store, &bad).unwrap_err();
        assert_eq!(
            missing,
            PreconditionFailure::Missing {
                key: "config/tax".into()
            }
        );
        assert_eq!(missing.to_string(), "config/tax does not exist");
        let moved = [Precondition::KeyAtVersion {
            key: "config/pricing".into(),
            version: Version::new(v.raw() + 1),
        }];
        let failure = check_preconditions(&store, &moved).unwrap_err();
        assert_eq!(
            failure,
            PreconditionFailure::WrongVersion {
                key: "config/pricing".into(),
                expected: Version::new(v.raw() + 1),
                found: v,
            }
        );
        assert_eq!(
            failure.to_string(),
            format!(
                "config/pricing is at {v}, expected {}",
                Version::new(v.raw() + 1)
            )
        );
    }
}
