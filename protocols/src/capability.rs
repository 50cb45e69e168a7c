//! Capabilities: what a task is allowed to do.
//!
//! A capability is a short name such as `db.read` or `mail.send`; a tool declares the one it needs
//! and the execution gate runs it only if the task's [`Capabilities`] contain it. Delegation takes
//! the intersection of the parent's set and what the child asks for ([`Capabilities::delegate`]),
//! so authority can only narrow on the way down; nothing in a message can add to it.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest capability name accepted.
pub const MAX_CAPABILITY_LEN: usize = 64;

/// A validated capability name: 1 to 64 characters from `a-z 0-9 . _ - :`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Capability(String);

/// A capability name was malformed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// The name was empty.
    #[error("capability name is empty")]
    Empty,
    /// The name was longer than [`MAX_CAPABILITY_LEN`].
    #[error("capability name {name:?} is {len} bytes long; the limit is {MAX_CAPABILITY_LEN}")]
    TooLong {
        /// The rejected name (truncated to the limit).
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The name had a character outside `a-z 0-9 . _ - :`.
    #[error("capability name {name:?} contains {bad:?}; allowed are a-z 0-9 . _ - :")]
    BadChar {
        /// The rejected name.
        name: String,
        /// The first character that is not allowed.
        bad: char,
    },
}

impl Capability {
    /// Validates and wraps a capability name.
    pub fn new(name: impl Into<String>) -> Result<Self, CapabilityError> {
        let name = name.into();
        if name.is_empty() {
            return Err(CapabilityError::Empty);
        }
        if name.len() > MAX_CAPABILITY_LEN {
            let len = name.len();
            let cut = (0..=MAX_CAPABILITY_LEN)
                .rev()
                .find(|&i| name.is_char_boundary(i))
                .unwrap_or(0);
            return Err(CapabilityError::TooLong {
                name: name[..cut].to_string(),
                len,
            });
        }
        if let Some(bad) = name.chars().find(|c| {
            !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | ':'))
        }) {
            return Err(CapabilityError::BadChar { name, bad });
        }
        Ok(Self(name))
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Capability {
    type Error = CapabilityError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Capability::new(value)
    }
}

impl From<Capability> for String {
    fn from(value: Capability) -> Self {
        value.0
    }
}

impl fmt::Debug for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A set of capabilities.
///
/// ```
/// use quorate_protocols::Capabilities;
///
/// let parent = Capabilities::parse(["db.read", "db.write"])?;
/// let asked = Capabilities::parse(["db.write", "mail.send"])?;
/// let child = parent.delegate(&asked);
/// assert_eq!(child, Capabilities::parse(["db.write"])?);
/// assert!(child.is_subset(&parent));
/// # Ok::<(), quorate_protocols::CapabilityError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Capabilities(BTreeSet<Capability>);

impl Capabilities {
    /// The empty set.
    #[must_use]
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses every name; the first malformed one is the error.
    pub fn parse<I, S>(names: I) -> Result<Self, CapabilityError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        names
            .into_iter()
            .map(Capability::new)
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// `true` if the set holds `capability`.
    #[must_use]
    pub fn contains(&self, capability: &Capability) -> bool {
        self.0.contains(capability)
    }

    /// What a child gets when it asks for `requested`: the intersection with `self`. Never more
    /// than `self`, whatever was asked.
    #[must_use]
    pub fn delegate(&self, requested: &Capabilities) -> Capabilities {
        if self.0.is_empty() || requested.0.is_empty() {
            // The common case on every dispatch (a node that needs no capability).
            return Capabilities::none();
        }
        Capabilities(self.0.intersection(&requested.0).cloned().collect())
    }

    /// The capabilities in `requested` that `self` does not hold (what a widening attempt asked
    /// for beyond its authority).
    #[must_use]
    pub fn missing(&self, requested: &Capabilities) -> Capabilities {
        Capabilities(requested.0.difference(&self.0).cloned().collect())
    }

    /// `true` if every capability of `self` is in `other`.
    #[must_use]
    pub fn is_subset(&self, other: &Capabilities) -> bool {
        self.0.is_subset(&other.0)
    }

    /// Number of capabilities.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// `true` for the empty set.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The capabilities in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Capability> {
        self.0.iter()
    }
}

/// A set reads as a list of its names: `["db.read", "db.save"]`.
///
/// ```
/// use quorate_protocols::Capabilities;
/// let caps = Capabilities::parse(["db.save", "db.read"]).unwrap();
/// assert_eq!(caps.to_string(), r#"["db.read", "db.save"]"#);
/// ```
impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter().map(|c| &c.0)).finish()
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<T: IntoIterator<Item = Capability>>(iter: T) -> Self {
        Self(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_are_validated() {
        assert_eq!(Capability::new(""), Err(CapabilityError::Empty));
        assert!(matches!(
            Capability::new("DB.write"),
            Err(CapabilityError::BadChar { bad: 'D', .. })
        ));
        assert!(matches!(
            Capability::new("x".repeat(65)),
            Err(CapabilityError::TooLong { len: 65, .. })
        ));
        assert!(Capability::new("db.write:orders").is_ok());
        let err: Result<Capabilities, _> = serde_json::from_str(r#"["ok", "Not Ok"]"#);
        assert!(err.is_err());
    }

    proptest! {
        #[test]
        fn delegation_only_narrows(
            parent in proptest::collection::btree_set("[a-e]", 0..5),
            asked in proptest::collection::btree_set("[a-g]", 0..7),
        ) {
            let parent = Capabilities::parse(parent).unwrap();
            let asked = Capabilities::parse(asked).unwrap();
            let child = parent.delegate(&asked);
            prop_assert!(child.is_subset(&parent));
            prop_assert!(child.is_subset(&asked));
            // Delegating again from the child can never get back what was dropped.
            let grandchild = child.delegate(&parent);
            prop_assert!(grandchild.is_subset(&child));
        }
    }
}
