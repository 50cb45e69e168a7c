//! [`SharedEvidence`]: the evidence a dependency's result rested on, as its dependents receive
//! it.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::EvidenceRef;

/// The evidence list of an accepted result, shared by reference count with the dependency's
/// record and its other dependents. A result that cites nothing holds no list at all, so that
/// cloning and dropping it touches no reference count (most inputs cite nothing, and an atomic
/// increment and decrement per input is most of what handing one on costs). It serializes as
/// the list does (a JSON array) and reads as a slice (`Deref`).
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
    /// Shares `list` (an empty one is held as no list).
    #[must_use]
    pub fn shared(list: Arc<Vec<EvidenceRef>>) -> Self {
        Self((!list.is_empty()).then_some(list))
    }

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
            SharedEvidence::shared(Arc::new(Vec::new())),
            serde_json::from_str("[]").unwrap(),
        ];
        for e in &made {
            assert!(e.0.is_none(), "{e:?}");
            assert_eq!(e, &made[0]);
        }
    }

    #[test]
    fn a_shared_list_is_the_same_allocation() {
        let node = crate::NodeId::new("a").unwrap();
        let list = Arc::new(vec![EvidenceRef::Input { node }]);
        let e = SharedEvidence::shared(list.clone());
        assert!(Arc::ptr_eq(e.0.as_ref().unwrap(), &list));
        assert_eq!(&*e, list.as_slice());
    }
}
