//! Generators and a driver shared by the property tests: a small universe of tenants,
//! principals, tasks, objects, sources and claims, so that random operations collide often.

#![allow(dead_code, unreachable_pub)]

use proptest::prelude::*;
use quorate_memory::{ClaimSpec, Freshness, FreshnessPolicy, MemoryObservation, Principal};
use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, RecordId, Source, TaskId, Timestamp, Validity,
};

pub const TENANTS: [&str; 2] = ["acme", "globex"];
pub const PRINCIPALS: [Option<&str>; 3] = [None, Some("ann"), Some("bob")];
pub const OBJECTS: [&str; 3] = ["inventory/sku-1", "inventory/sku-2", "price/sku-1"];
pub const SOURCES: [&str; 4] = ["db", "scanner", "audit", "model"];
pub const CLAIMS: [&str; 3] = ["one unit", "two units", "three units"];
/// Every evidence status.
pub const ALL_STATUSES: [EvidenceStatus; 5] = [
    EvidenceStatus::Verified,
    EvidenceStatus::Unverified,
    EvidenceStatus::Conflicting,
    EvidenceStatus::Superseded,
    EvidenceStatus::Expired,
];

pub fn task(i: usize) -> Option<TaskId> {
    [None, Some(TaskId::from_u128(1)), Some(TaskId::from_u128(2))][i]
}

pub fn rule(t: usize, p: usize, k: usize) -> AccessRule {
    AccessRule {
        tenant: TENANTS[t].into(),
        principal: PRINCIPALS[p].map(Into::into),
        task: task(k),
    }
}

/// Mostly one tenant and wide rules, so that records meet each other often.
/// The rule every reader of `access`'s tenant passes.
pub fn tenant_wide(access: &AccessRule) -> AccessRule {
    AccessRule {
        tenant: access.tenant.clone(),
        principal: None,
        task: None,
    }
}

pub fn arb_rule() -> impl Strategy<Value = AccessRule> {
    (
        prop_oneof![4 => Just(0usize), 1 => Just(1usize)],
        prop_oneof![3 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize)],
        prop_oneof![3 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize)],
    )
        .prop_map(|(t, p, k)| rule(t, p, k))
}

pub fn arb_reader() -> impl Strategy<Value = Principal> {
    (0..2usize, 1..3usize, 0..3usize).prop_map(|(t, p, k)| Principal {
        tenant: TENANTS[t].into(),
        principal: PRINCIPALS[p].unwrap_or("ann").into(),
        task: task(k),
    })
}

/// An observation before ids are assigned: derived links are indexes into "records written so
/// far", resolved by the driver.
#[derive(Clone, Debug)]
pub struct ObsSpec {
    pub source: usize,
    pub version: u8,
    pub at: u64,
    pub access: AccessRule,
    /// `None`: the writer's authority is the tenant-wide rule of the record's tenant.
    pub authority: Option<AccessRule>,
    pub status: EvidenceStatus,
    pub derived: Vec<usize>,
    pub claims: Vec<ClaimPick>,
}

/// Indexes into OBJECTS, CLAIMS and the kinds, and an optional validity `(from, length)`.
pub type ClaimPick = (usize, usize, usize, Option<(u64, u64)>);

pub fn arb_status() -> impl Strategy<Value = EvidenceStatus> {
    prop_oneof![
        6 => Just(EvidenceStatus::Unverified),
        3 => Just(EvidenceStatus::Verified),
        1 => Just(EvidenceStatus::Conflicting),
    ]
}

pub fn arb_kind(i: usize) -> MemoryKind {
    [
        MemoryKind::Semantic,
        MemoryKind::Semantic,
        MemoryKind::Procedural,
        MemoryKind::Working,
    ][i]
}

pub fn arb_obs() -> impl Strategy<Value = ObsSpec> {
    (
        prop_oneof![4 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize), 1 => Just(3usize)],
        0..3u8,
        0..20u64,
        arb_rule(),
        prop::option::weighted(0.15, arb_rule()),
        arb_status(),
        prop::collection::vec(0..64usize, 0..3).prop_map(|v| v),
        prop::bool::weighted(0.35),
        prop::collection::vec(
            (
                0..3usize,
                0..3usize,
                0..4usize,
                prop::option::weighted(0.3, (0..20u64, 1..20u64)),
            ),
            1..3,
        ),
    )
        .prop_map(
            |(source, version, at, access, authority, status, derived, is_derived, claims)| {
                ObsSpec {
                    source,
                    version,
                    at,
                    access,
                    authority,
                    status,
                    derived: if is_derived { derived } else { Vec::new() },
                    claims,
                }
            },
        )
}

/// Turns a spec into an observation with ids `next..`, resolving derived links against `known`.
pub fn build(
    spec: &ObsSpec,
    next: &mut u128,
    known: &[RecordId],
) -> (AccessRule, MemoryObservation) {
    let mut id = || {
        *next += 1;
        RecordId::from_u128(*next)
    };
    let derived_from = if known.is_empty() {
        Vec::new()
    } else {
        spec.derived
            .iter()
            .map(|i| known[i % known.len()])
            .collect()
    };
    let authority = spec
        .authority
        .clone()
        .unwrap_or_else(|| tenant_wide(&spec.access));
    let event = id();
    let claims = spec
        .claims
        .iter()
        .map(|&(object, claim, kind, validity)| {
            ClaimSpec::new(
                id(),
                arb_kind(kind),
                OBJECTS[object],
                CLAIMS[claim],
                validity.map_or(Validity::default(), |(from, len)| Validity {
                    from: Some(Timestamp(from)),
                    until: Some(Timestamp(from + len)),
                }),
            )
        })
        .collect();
    let obs = MemoryObservation {
        event,
        episode: format!("read {}", SOURCES[spec.source]),
        source: Source {
            name: SOURCES[spec.source].into(),
            version: format!("v{}", spec.version),
        },
        observed_at: Timestamp(spec.at),
        access: spec.access.clone(),
        status: spec.status,
        derived_from,
        claims,
    };
    (authority, obs)
}

/// Reader-set inclusion, restated independently of the crate: every reader of `inner` can read
/// `outer`.
pub fn within(inner: &AccessRule, outer: &AccessRule) -> bool {
    inner.tenant == outer.tenant
        && (outer.principal.is_none() || inner.principal == outer.principal)
        && (outer.task.is_none() || inner.task == outer.task)
}

/// A query naming every word the generated records use: everything is relevant.
pub fn everything() -> String {
    let mut text: Vec<&str> = OBJECTS.to_vec();
    text.extend(CLAIMS);
    text.extend(SOURCES);
    text.push("episode read");
    text.join(" ")
}

/// No decay for any kind: relevance depends on the terms only.
pub fn timeless() -> FreshnessPolicy {
    FreshnessPolicy {
        working: Freshness::None,
        episodic: Freshness::None,
        semantic: Freshness::None,
        procedural: Freshness::None,
    }
}

/// A reader who may read records with `access` (any principal stands in for an unset one).
pub fn reader_of(access: &AccessRule) -> Principal {
    Principal {
        tenant: access.tenant.clone(),
        principal: access.principal.clone().unwrap_or_else(|| "ann".into()),
        task: access.task,
    }
}
