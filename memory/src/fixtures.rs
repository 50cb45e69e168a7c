//! Builders shared by the unit tests.

use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, RecordId, Source, Timestamp, Validity,
};

use crate::observation::{ClaimSpec, MemoryObservation};

/// The tenant-wide access rule of tenant `acme`.
pub(crate) fn tenant() -> AccessRule {
    AccessRule {
        tenant: "acme".into(),
        principal: None,
        task: None,
    }
}

/// An unverified, tenant-wide observation ("read `source`", event `100·n`) by `source` at
/// `version`, observed at `at`, with one semantic claim `n` about `object`, valid always.
pub(crate) fn observation(
    n: u128,
    source: &str,
    version: &str,
    at: u64,
    object: &str,
    claim: &str,
) -> MemoryObservation {
    MemoryObservation {
        event: RecordId::from_u128(n * 100),
        episode: format!("read {source}"),
        source: Source {
            name: source.into(),
            version: version.into(),
        },
        observed_at: Timestamp(at),
        access: tenant(),
        status: EvidenceStatus::Unverified,
        derived_from: vec![],
        claims: vec![ClaimSpec::new(
            RecordId::from_u128(n),
            MemoryKind::Semantic,
            object,
            claim,
            Validity::default(),
        )],
    }
}
