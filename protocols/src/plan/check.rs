use serde::{Deserialize, Serialize};

use crate::{ResultKind, Version};

/// Something that must hold before a task may run (and again before a write it makes).
///
/// Preconditions are checked by the runtime against the store, never by the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Precondition {
    /// The key exists in the store.
    KeyExists {
        /// Store key.
        key: String,
    },
    /// The key does not exist.
    KeyAbsent {
        /// Store key.
        key: String,
    },
    /// The key exists at exactly this version (the target has not changed since it was read).
    KeyAtVersion {
        /// Store key.
        key: String,
        /// The version that was read.
        version: Version,
    },
    /// Every dependency produced a non-empty result.
    InputsNonEmpty,
}

impl Precondition {
    /// `true` for the checks made against the store (all but `inputs-non-empty`, which is
    /// checked on the dependencies' results).
    ///
    /// ```
    /// use quorate_protocols::Precondition;
    /// assert!(Precondition::KeyExists { key: "k".into() }.needs_store());
    /// assert!(!Precondition::InputsNonEmpty.needs_store());
    /// ```
    #[must_use]
    pub fn needs_store(&self) -> bool {
        !matches!(self, Precondition::InputsNonEmpty)
    }
}

/// One check on a task's observed result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Check {
    /// The result is not null, not an empty string, not an empty array or object.
    NonEmpty,
    /// The JSON pointer `field` (e.g. `/count`) exists in the result.
    FieldPresent {
        /// JSON pointer into the result.
        field: String,
    },
    /// The JSON pointer `field` holds exactly `value`.
    FieldEquals {
        /// JSON pointer into the result.
        field: String,
        /// The expected value.
        value: serde_json::Value,
    },
    /// Reading `key` back from the store after the task's writes shows a new version: the write
    /// really changed something ("saved" is not enough).
    ReadBackChanged {
        /// Store key the task claims to have written.
        key: String,
    },
}

/// What a task's observed result must satisfy before the task may complete.
///
/// The default accepts a *verified conclusion* or an *execution receipt*, and no checks: an
/// agent that only suggests an answer does not complete its task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acceptance {
    /// The result kinds that may complete the task.
    #[serde(default = "default_kinds")]
    pub kinds: Vec<ResultKind>,
    /// Checks on the result; all must pass.
    #[serde(default)]
    pub checks: Vec<Check>,
}

fn default_kinds() -> Vec<ResultKind> {
    vec![ResultKind::VerifiedConclusion, ResultKind::ExecutionReceipt]
}

impl Default for Acceptance {
    fn default() -> Self {
        Self {
            kinds: default_kinds(),
            checks: Vec::new(),
        }
    }
}
