//! The dedupe keys a task has accepted replies under.

use quorate_protocols::DedupeKey;

/// The dedupe keys of the replies accepted for one task. Almost always one or two (an answer,
/// perhaps an approval request first), so the first is kept inline and more go behind one
/// pointer, grown by copying in the rare task that needs it.
#[derive(Clone, Debug, Default)]
pub(crate) enum SeenKeys {
    /// No reply accepted yet.
    #[default]
    None,
    /// One.
    One(DedupeKey),
    /// Two or more.
    Many(Box<[DedupeKey]>),
}

impl SeenKeys {
    /// `true` if `key` was seen.
    pub(crate) fn contains(&self, key: &DedupeKey) -> bool {
        match self {
            Self::None => false,
            Self::One(k) => k == key,
            Self::Many(keys) => keys.contains(key),
        }
    }

    /// Records `key`; `false` if it was seen before.
    pub(crate) fn insert(&mut self, key: DedupeKey) -> bool {
        if self.contains(&key) {
            return false;
        }
        match self {
            Self::None => *self = Self::One(key),
            Self::One(first) => *self = Self::Many(Box::new([*first, key])),
            Self::Many(keys) => *keys = keys.iter().copied().chain([key]).collect(),
        }
        true
    }

    /// `true` if no key was seen.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Self::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_keys_accept_each_key_once() {
        let keys: Vec<DedupeKey> = (0..4).map(DedupeKey::from_u128).collect();
        let mut seen = SeenKeys::default();
        assert!(seen.is_empty());
        for (n, k) in keys.iter().enumerate() {
            assert!(!seen.contains(k));
            assert!(seen.insert(*k), "key {n} is new");
            assert!(!seen.insert(*k), "key {n} again");
            assert!(keys[..=n].iter().all(|k| seen.contains(k)));
        }
        assert!(!seen.is_empty());
    }
}
