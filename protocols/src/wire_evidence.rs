//! [`SharedEvidence`]: the evidence a dependency's result rested on, as its dependents receive
//! it.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::EvidenceRef;

/// The evidence list of an accepted result, shared by reference count with the dependency's
/// record and its other dependents. A result that cites nothing holds no list at all, so that
/// cloning and dropping it touches no reference count (a profile of `bench dag` put 95% of the
/// samples of dropping an input on its reference counts, when an empty list was one shared
/// `Arc`). It serializes as the list does (a JSON array) and reads as a slice (`Deref`).
///
/// ```
/// use quorate_protocols::wire::SharedEvidence;
/// use quorate_protocols::{EvidenceRef, NodeId};
/// let none = SharedEvidence::default();
/// assert!(none.is_empty());
/// assert_eq!(serde_json::to_string(&none).unwrap(), "[]");
/// let a = NodeId::new("a").unwrap();
/// let cited = SharedEvidence::from(vec![EvidenceRef::Input { node: a }]);
/// let copy = cited.clone();
/// assert!(SharedEvidence::ptr_eq(&cited, &copy), "shared, not copied");
/// assert_eq!(copy.len(), 1);
/// let back: SharedEvidence = serde_json::from_str(&serde_json::to_string(&cited).unwrap()).unwrap();
/// assert_eq!(back, cited);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SharedEvidence(Option<Arc<Vec<EvidenceRef>>>);

impl SharedEvidence {
    /// The evidence.
    #[must_use]
    pub fn as_slice(&self) -> &[EvidenceRef] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    /// `true` if `a` and `b` share one list (never for empty ones, which hold none).
    #[must_use]
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        match (&a.0, &b.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl From<Vec<EvidenceRef>> for SharedEvidence {
    fn from(list: Vec<EvidenceRef>) -> Self {
        Self((!list.is_empty()).then(|| Arc::new(list)))
    }
}

impl std::ops::Deref for SharedEvidence {
    type Target = [EvidenceRef];
    fn deref(&self) -> &[EvidenceRef] {
        self.as_slice()
    }
}

impl Serialize for SharedEvidence {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedEvidence {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<EvidenceRef>::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_is_held_as_none_however_it_was_made() {
        let made = [
            SharedEvidence::default(),
            SharedEvidence::from(Vec::new()),
            serde_json::from_str("[]").unwrap(),
        ];
        for e in &made {
            assert!(e.0.is_none(), "{e:?}");
            assert_eq!(e, &made[0]);
        }
    }

    #[test]
    fn ptr_eq_tells_a_shared_list_from_an_equal_one() {
        let list = || {
            vec![EvidenceRef::Input {
                node: crate::NodeId::new("a").unwrap(),
            }]
        };
        let e = SharedEvidence::from(list());
        let copy = e.clone();
        assert!(Arc::ptr_eq(e.0.as_ref().unwrap(), copy.0.as_ref().unwrap()));
        assert!(SharedEvidence::ptr_eq(&e, &copy));
        let equal = SharedEvidence::from(list());
        assert_eq!(equal, e);
        assert!(!SharedEvidence::ptr_eq(&equal, &e), "equal, not shared");
        let none = SharedEvidence::default();
        assert!(
            !SharedEvidence::ptr_eq(&none, &none.clone()),
            "an empty list holds none"
        );
    }
}
