//! [`Payload`]: a JSON value shared, not copied, by everything that holds it (a task's result,
//! the inputs of each of its dependents, the records that log it, every peer's copy).

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON value shared by reference count: cloning it shares the value instead of copying it.
/// Scalars (`null`, booleans, numbers) are held inline, as they copy as cheaply as a reference
/// count and need no allocation; strings, arrays and objects go behind one [`Arc`]. It
/// serializes exactly as the value does, and reads as one (`Deref`).
///
/// ```
/// use quorate_protocols::Payload;
/// let a = Payload::from(serde_json::json!({"rows": [1, 2, 3]}));
/// let b = a.clone();
/// assert!(Payload::ptr_eq(&a, &b), "shared, not copied");
/// assert_eq!(b["rows"][1], 2);
/// assert_eq!(serde_json::to_string(&a).unwrap(), r#"{"rows":[1,2,3]}"#);
/// let n = Payload::from(serde_json::json!(7));
/// assert!(!Payload::ptr_eq(&n, &n.clone()), "a scalar is copied inline");
/// assert_eq!(n, serde_json::json!(7));
/// ```
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    /// `null`, a boolean or a number.
    Inline(serde_json::Value),
    /// A string, an array or an object.
    Shared(Arc<serde_json::Value>),
}

impl Payload {
    /// Shares `value` (a scalar is kept inline).
    #[must_use]
    pub fn new(value: serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Self(Repr::Inline(value)),
            _ => Self(Repr::Shared(Arc::new(value))),
        }
    }

    /// The value.
    #[must_use]
    pub fn value(&self) -> &serde_json::Value {
        match &self.0 {
            Repr::Inline(v) => v,
            Repr::Shared(v) => v,
        }
    }

    /// The value, owned: taken out if this is its only holder, else copied.
    #[must_use]
    pub fn into_value(self) -> serde_json::Value {
        match self.0 {
            Repr::Inline(v) => v,
            Repr::Shared(v) => Arc::try_unwrap(v).unwrap_or_else(|shared| (*shared).clone()),
        }
    }

    /// `true` if `a` and `b` share one value (never for scalars, which are copied inline).
    #[must_use]
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        match (&a.0, &b.0) {
            (Repr::Shared(a), Repr::Shared(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Default for Payload {
    /// `null`.
    fn default() -> Self {
        Self(Repr::Inline(serde_json::Value::Null))
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        Self::ptr_eq(self, other) || self.value() == other.value()
    }
}

impl std::ops::Deref for Payload {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        self.value()
    }
}

impl From<serde_json::Value> for Payload {
    fn from(value: serde_json::Value) -> Self {
        Self::new(value)
    }
}

/// The scalars and strings a [`serde_json::Value`] converts from, so that an answer reads
/// `value: 42.into()` or `value: "saved".into()`.
macro_rules! from_like_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Payload {
            fn from(v: $t) -> Self {
                Self::new(serde_json::Value::from(v))
            }
        }
    )*};
}

from_like_value!(bool, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, f32, f64, String, &str);

impl PartialEq<serde_json::Value> for Payload {
    fn eq(&self, other: &serde_json::Value) -> bool {
        self.value() == other
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scalar needs no allocation: a payload is no larger than the value it holds.
    #[test]
    fn a_payload_is_no_larger_than_a_value() {
        assert_eq!(
            std::mem::size_of::<Payload>(),
            std::mem::size_of::<serde_json::Value>()
        );
        assert_eq!(
            std::mem::size_of::<Option<Payload>>(),
            std::mem::size_of::<serde_json::Value>()
        );
    }
}
