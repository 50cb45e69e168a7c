//! No-progress detection.
//!
//! An attempt makes no progress when the same [`ProgressSignature`] (tool, parameter digest,
//! environment version, error class) keeps coming back with the same observation. The
//! environment version is part of the signature, so any change in the environment is new
//! information by construction; an observation that differs from the last one for the same
//! signature (a read that returned something else) is new information too and restarts the
//! count.

use std::collections::HashMap;

use quorate_protocols::ParamDigest;

use quorate_protocols::wire::ProgressSignature;

/// The detector's verdict on one observation.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgressVerdict {
    /// Keep going.
    Continue,
    /// `signature` was seen `times` times without new information: stop.
    Stop {
        /// The repeated signature.
        signature: ProgressSignature,
        /// How often it was seen.
        times: u32,
    },
}

/// Counts repeats of each signature since its observation last changed.
///
/// ```
/// use quorate_protocols::ParamDigest;
/// use quorate_workers::{ProgressDetector, ProgressSignature, ProgressVerdict};
///
/// let sig = ProgressSignature {
///     tool: "db.read".into(),
///     digest: ParamDigest::of(&serde_json::json!({})),
///     environment: 0,
///     error_class: Some("busy".into()),
/// };
/// let same = ParamDigest::of(&serde_json::json!("busy"));
/// let mut detector = ProgressDetector::new(2);
/// assert_eq!(detector.observe(sig.clone(), same), ProgressVerdict::Continue);
/// assert_eq!(
///     detector.observe(sig.clone(), same),
///     ProgressVerdict::Stop { signature: sig, times: 2 }
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressDetector {
    limit: u32,
    seen: HashMap<ProgressSignature, (ParamDigest, u32)>,
}

impl ProgressDetector {
    /// A detector that stops at the `limit`-th identical sighting; `0` never stops.
    #[must_use]
    pub fn new(limit: u32) -> Self {
        Self {
            limit,
            seen: HashMap::new(),
        }
    }

    /// Records `signature` with a digest of what was observed.
    pub fn observe(
        &mut self,
        signature: ProgressSignature,
        observed: ParamDigest,
    ) -> ProgressVerdict {
        let slot = self.seen.entry(signature.clone()).or_insert((observed, 0));
        if slot.0 == observed {
            slot.1 += 1;
        } else {
            *slot = (observed, 1);
        }
        let times = slot.1;
        if self.limit > 0 && times >= self.limit {
            ProgressVerdict::Stop { signature, times }
        } else {
            ProgressVerdict::Continue
        }
    }

    /// Forgets everything (after new information about the environment).
    pub fn reset(&mut self) {
        self.seen.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sig(env: u64, class: Option<&str>) -> ProgressSignature {
        ProgressSignature {
            tool: "t".into(),
            digest: ParamDigest::of(&json!({"a": 1})),
            environment: env,
            error_class: class.map(str::to_owned),
        }
    }

    #[test]
    fn repeats_without_new_information_stop_at_the_limit() {
        let mut d = ProgressDetector::new(3);
        let o = ParamDigest::of(&json!("same"));
        assert_eq!(d.observe(sig(0, Some("e")), o), ProgressVerdict::Continue);
        assert_eq!(d.observe(sig(0, Some("e")), o), ProgressVerdict::Continue);
        assert_eq!(
            d.observe(sig(0, Some("e")), o),
            ProgressVerdict::Stop {
                signature: sig(0, Some("e")),
                times: 3
            }
        );
    }

    #[test]
    fn new_observation_or_environment_restarts_the_count() {
        let mut d = ProgressDetector::new(2);
        let a = ParamDigest::of(&json!("a"));
        let b = ParamDigest::of(&json!("b"));
        assert_eq!(d.observe(sig(0, None), a), ProgressVerdict::Continue);
        assert_eq!(d.observe(sig(0, None), b), ProgressVerdict::Continue);
        assert_eq!(d.observe(sig(1, None), b), ProgressVerdict::Continue);
        d.reset();
        assert_eq!(d.observe(sig(0, None), b), ProgressVerdict::Continue);
        assert!(matches!(
            d.observe(sig(0, None), b),
            ProgressVerdict::Stop { times: 2, .. }
        ));
    }

    #[test]
    fn zero_limit_never_stops() {
        let mut d = ProgressDetector::new(0);
        let o = ParamDigest::of(&json!(null));
        for _ in 0..10 {
            assert_eq!(d.observe(sig(0, None), o), ProgressVerdict::Continue);
        }
    }
}
