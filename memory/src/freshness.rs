//! How much a record's age discounts it, per kind.
//!
//! * [`Freshness::Exponential`]: the claim stops holding at a constant hazard rate `h`, so the
//!   probability it still holds after `Δt` ms is `exp(-h·Δt)`; relevance is multiplied by it.
//!   For things that drift (stock levels, someone's whereabouts, task scratch notes).
//! * [`Freshness::VersionBased`]: configuration-like records do not decay with time; they hold
//!   until the same source shows the reader another version of the same object, then they are
//!   worth nothing (`1` or `0`, see [`MemoryView::is_latest_version`]).
//! * [`Freshness::None`]: historical facts ("the order shipped on May 3") never go stale.

use quorate_protocols::{MemoryKind, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::ParameterError;
use crate::record::{MemoryRecord, Principal};
use crate::view::MemoryView;

/// A hazard rate per millisecond: finite and non-negative.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Hazard(f64);

impl Hazard {
    /// A hazard of `per_ms` per millisecond.
    pub fn per_ms(per_ms: f64) -> Result<Self, ParameterError> {
        if per_ms.is_finite() && per_ms >= 0.0 {
            Ok(Self(per_ms))
        } else {
            Err(ParameterError::InvalidHazard { per_ms })
        }
    }

    /// The hazard under which half of the claims have stopped holding after `ms` milliseconds.
    pub fn half_life_ms(ms: u64) -> Result<Self, ParameterError> {
        if ms == 0 {
            return Err(ParameterError::InvalidHazard {
                per_ms: f64::INFINITY,
            });
        }
        Self::per_ms(std::f64::consts::LN_2 / ms as f64)
    }

    /// The rate per millisecond.
    #[must_use]
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Hazard {
    type Error = ParameterError;
    fn try_from(v: f64) -> Result<Self, Self::Error> {
        Self::per_ms(v)
    }
}

impl From<Hazard> for f64 {
    fn from(h: Hazard) -> f64 {
        h.0
    }
}

/// The freshness model declared for one kind of memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Freshness {
    /// `exp(-hazard · age)`.
    Exponential(Hazard),
    /// `1` while the reader may read no newer version of the same object from the same source,
    /// else `0`.
    VersionBased,
    /// Always `1`.
    None,
}

/// A [`Freshness`] model per [`MemoryKind`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FreshnessPolicy {
    /// Task-local scratch.
    pub working: Freshness,
    /// Things that happened: historical.
    pub episodic: Freshness,
    /// Facts about the world.
    pub semantic: Freshness,
    /// How to do things: configuration-like.
    pub procedural: Freshness,
}

/// One hour in milliseconds.
const HOUR_MS: u64 = 3_600_000;

impl Default for FreshnessPolicy {
    /// Working memory halves every hour, semantic facts every 24 hours, procedures are
    /// version-based and episodes are history.
    fn default() -> Self {
        let half_life = |ms: u64| Hazard(std::f64::consts::LN_2 / ms as f64);
        Self {
            working: Freshness::Exponential(half_life(HOUR_MS)),
            episodic: Freshness::None,
            semantic: Freshness::Exponential(half_life(24 * HOUR_MS)),
            procedural: Freshness::VersionBased,
        }
    }
}

impl FreshnessPolicy {
    /// The model for `kind`.
    #[must_use]
    pub fn for_kind(&self, kind: MemoryKind) -> Freshness {
        match kind {
            MemoryKind::Working => self.working,
            MemoryKind::Episodic => self.episodic,
            MemoryKind::Semantic => self.semantic,
            MemoryKind::Procedural => self.procedural,
        }
    }

    /// This policy with `kind` set to `freshness`.
    #[must_use]
    pub fn with(mut self, kind: MemoryKind, freshness: Freshness) -> Self {
        match kind {
            MemoryKind::Working => self.working = freshness,
            MemoryKind::Episodic => self.episodic = freshness,
            MemoryKind::Semantic => self.semantic = freshness,
            MemoryKind::Procedural => self.procedural = freshness,
        }
        self
    }

    /// The record's freshness in `[0, 1]` at `now` for `reader` (a record observed in the future
    /// counts as age 0). Version-based freshness is judged over the records `reader` may see.
    #[must_use]
    pub fn freshness(
        &self,
        view: &MemoryView,
        reader: &Principal,
        record: &MemoryRecord,
        now: Timestamp,
    ) -> f64 {
        let r = record.record();
        match self.for_kind(r.kind) {
            Freshness::None => 1.0,
            Freshness::Exponential(h) => {
                let age = now.0.saturating_sub(r.observed_at.0) as f64;
                (-h.get() * age).exp()
            }
            Freshness::VersionBased => {
                if view.is_latest_version(reader, r) {
                    1.0
                } else {
                    0.0
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hazards_validate() {
        assert!(Hazard::per_ms(-1.0).is_err());
        assert!(Hazard::per_ms(f64::NAN).is_err());
        assert!(Hazard::half_life_ms(0).is_err());
        let h = Hazard::half_life_ms(1000).unwrap();
        assert!((((-h.get()) * 1000.0).exp() - 0.5).abs() < 1e-12);
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<Hazard>(&json).unwrap(), h);
        assert!(serde_json::from_str::<Hazard>("-3.0").is_err());
    }

    #[test]
    fn policy_per_kind() {
        let p = FreshnessPolicy::default().with(MemoryKind::Semantic, Freshness::VersionBased);
        assert_eq!(p.for_kind(MemoryKind::Semantic), Freshness::VersionBased);
        assert_eq!(p.for_kind(MemoryKind::Episodic), Freshness::None);
        assert!(matches!(
            p.for_kind(MemoryKind::Working),
            Freshness::Exponential(_)
        ));
    }
}
