//! [`Payload`]: a JSON value shared, not copied, by everything that holds it (a task's result,
//! the inputs of each of its dependents, the records that log it, every peer's copy).

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON value behind an [`Arc`]: cloning it shares the value (a reference count) instead of
/// copying it. It serializes exactly as the value does, and reads as one (`Deref`).
///
/// ```
/// use quorate_protocols::Payload;
/// let a = Payload::from(serde_json::json!({"rows": [1, 2, 3]}));
/// let b = a.clone();
/// assert!(Payload::ptr_eq(&a, &b), "shared, not copied");
/// assert_eq!(b["rows"][1], 2);
/// assert_eq!(serde_json::to_string(&a).unwrap(), r#"{"rows":[1,2,3]}"#);
/// ```
#[derive(Clone, Default, PartialEq)]
pub struct Payload(Arc<serde_json::Value>);

impl Payload {
    /// Shares `value`.
    #[must_use]
    pub fn new(value: serde_json::Value) -> Self {
        Self(Arc::new(value))
    }

    /// The value.
    #[must_use]
    pub fn value(&self) -> &serde_json::Value {
        &self.0
    }

    /// The value, owned: taken out if this is its only holder, else copied.
    #[must_use]
    pub fn into_value(self) -> serde_json::Value {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }

    /// `true` if `a` and `b` share one value.
    #[must_use]
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl std::ops::Deref for Payload {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        &self.0
    }
}

impl From<serde_json::Value> for Payload {
    fn from(value: serde_json::Value) -> Self {
        Self::new(value)
    }
}

impl PartialEq<serde_json::Value> for Payload {
    fn eq(&self, other: &serde_json::Value) -> bool {
        *self.0 == *other
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Self::new)
    }
}
