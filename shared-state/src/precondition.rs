//! Checking a task's store preconditions against the run's store: what the supervisor's and
//! the peers' shells do before a task becomes ready, and a worker's shell before each write call
//! of the task.

use quorate_protocols::Precondition;

use crate::MemoryStore;

/// Checks `checks` against `store`; the error is the first failing observation.
/// `inputs-non-empty` is not a store check and always passes here.
pub fn check_preconditions(
    store: &MemoryStore<serde_json::Value>,
    checks: &[Precondition],
) -> Result<(), String> {
    for c in checks {
        match c {
            Precondition::KeyExists { key } => {
                if store.get_now(key).is_none() {
                    return Err(format!("{key} does not exist"));
                }
            }
            Precondition::KeyAbsent { key } => {
                if store.get_now(key).is_some() {
                    return Err(format!("{key} exists"));
                }
            }
            Precondition::KeyAtVersion { key, version } => match store.get_now(key) {
                Some(v) if v.version == *version => {}
                Some(v) => return Err(format!("{key} is at {}, expected {version}", v.version)),
                None => return Err(format!("{key} does not exist (expected {version})")),
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
            store.cas_now("config/pricing", None, json!({"currency": "EUR"}))
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
        assert_eq!(
            check_preconditions(&store, &bad),
            Err("config/tax does not exist".into())
        );
    }
}
