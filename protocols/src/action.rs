//! Action identity: which tool call this is, and with which parameters.
//!
//! An [`ActionId`] names one intended side effect: `(task, step, intent_version)`. It is bound to
//! the [`ParamDigest`] of its normalized parameters, so a retry can be recognised as *the same*
//! call (same id, same digest) and a reuse of the id for *another* call (same id, different
//! digest) can be refused.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::TaskId;

/// Identifies one intended side effect of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionId {
    /// The task that wants the effect.
    pub task: TaskId,
    /// The agent-loop step that proposed it.
    pub step: u32,
    /// Bumped when the agent deliberately intends a *new* effect at the same step.
    pub intent_version: u32,
}

impl ActionId {
    /// An action id.
    #[must_use]
    pub const fn new(task: TaskId, step: u32, intent_version: u32) -> Self {
        Self {
            task,
            step,
            intent_version,
        }
    }
}

impl fmt::Display for ActionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.task, self.step, self.intent_version)
    }
}

/// SHA-256 of the canonical form of a tool call's parameters.
///
/// The canonical form is JSON with object keys sorted and no insignificant whitespace, written
/// here rather than relying on `serde_json`'s map order (which a feature flag elsewhere in the
/// dependency graph could change). Two parameter values that differ only in key order have the
/// same digest.
///
/// ```
/// use quorate_protocols::ParamDigest;
/// use serde_json::json;
///
/// let a = ParamDigest::of(&json!({"id": 7, "fields": {"b": 1, "a": 2}}));
/// let b = ParamDigest::of(&json!({"fields": {"a": 2, "b": 1}, "id": 7}));
/// assert_eq!(a, b);
/// assert_ne!(a, ParamDigest::of(&json!({"id": 8})));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ParamDigest([u8; 32]);

/// A digest string was not 64 hex digits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("parameter digest must be 64 hex digits, got {got:?}")]
pub struct DigestParseError {
    /// The rejected text (at most 80 characters of it).
    pub got: String,
}

impl ParamDigest {
    /// The digest of `params` in canonical form.
    #[must_use]
    pub fn of(params: &serde_json::Value) -> Self {
        let mut hasher = Sha256::new();
        canonical(params, &mut hasher);
        Self(hasher.finalize().into())
    }

    /// The raw 32 bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The first 8 bytes as a number, for compact keys and logs.
    #[must_use]
    pub fn short(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }
}

fn canonical(value: &serde_json::Value, out: &mut Sha256) {
    use serde_json::Value;
    match value {
        Value::Null => out.update(b"null"),
        Value::Bool(true) => out.update(b"true"),
        Value::Bool(false) => out.update(b"false"),
        Value::Number(n) => out.update(n.to_string().as_bytes()),
        Value::String(s) => out.update(Value::String(s.clone()).to_string().as_bytes()),
        Value::Array(items) => {
            out.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(item, out);
            }
            out.update(b"]");
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.update(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                out.update(Value::String(key.clone()).to_string().as_bytes());
                out.update(b":");
                canonical(&map[key], out);
            }
            out.update(b"}");
        }
    }
}

impl fmt::Debug for ParamDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ParamDigest({:016x}..)", self.short())
    }
}

impl fmt::Display for ParamDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl From<ParamDigest> for String {
    fn from(value: ParamDigest) -> Self {
        value.to_string()
    }
}

impl TryFrom<String> for ParamDigest {
    type Error = DigestParseError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        let err = || DigestParseError {
            got: text.chars().take(80).collect(),
        };
        if text.len() != 64 || !text.is_ascii() {
            return Err(err());
        }
        let mut out = [0u8; 32];
        for (i, chunk) in text.as_bytes().chunks(2).enumerate() {
            let hex = std::str::from_utf8(chunk).map_err(|_| err())?;
            out[i] = u8::from_str_radix(hex, 16).map_err(|_| err())?;
        }
        Ok(Self(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digest_round_trips_through_hex() {
        let d = ParamDigest::of(&json!({"q": "select", "n": [1, 2.5, null, true]}));
        let text = serde_json::to_string(&d).unwrap();
        let back: ParamDigest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, d);
        assert!(serde_json::from_str::<ParamDigest>("\"abc\"").is_err());
    }

    #[test]
    fn string_escapes_do_not_collide() {
        let a = ParamDigest::of(&json!({"a": "x\",\"b\":\"y"}));
        let b = ParamDigest::of(&json!({"a": "x", "b": "y"}));
        assert_ne!(a, b);
    }
}
