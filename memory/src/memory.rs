//! [`Memory`]: the thin shell that runs the pure operations against a versioned store.
//!
//! Each operation is one loop ([`quorate_state::update`]): read the view and its version, run the
//! pure operation, CAS the new view on the version read; on a conflict, run the pure operation
//! again against the view that won (never write the stale result). The decisions all live in the
//! pure functions.

use std::convert::Infallible;

use quorate_protocols::{AccessRule, EvidenceRef, RecordId, Timestamp, Version};
use quorate_state::{update, Change, Store, StoreError, Versioned};

use crate::error::{CommitError, ForgetError, ResolveError, WriteError};
use crate::forget::{expire_due, Forget, ForgetReport};
use crate::freshness::FreshnessPolicy;
use crate::observation::MemoryObservation;
use crate::record::Principal;
use crate::resolve::{resolve, ResolveReport};
use crate::retrieve::{retrieve, Query, Retrieval};
use crate::runtime::evidence_refs;
use crate::view::{MemoryView, NeedId};
use crate::write::{write, WriteReport};

/// A memory view and the version it was read at (`None`: nothing written yet).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The records.
    pub view: MemoryView,
    /// The memory's version.
    pub version: Option<Version>,
}

/// A committed operation: the new version of the memory (the published view) and the report.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "the report says what the operation superseded, invalidated or removed"]
pub struct Committed<T> {
    /// The memory's new version.
    pub version: Version,
    /// What changed.
    pub report: T,
    /// How many CAS conflicts were merged on the way (each one re-ran the pure step against
    /// the concurrent update).
    pub conflicts: u32,
}

/// A retrieval together with where and at which version it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct Recall {
    /// The memory's store key.
    pub key: String,
    /// The version the records were read at.
    pub version: Option<Version>,
    /// What was retrieved.
    pub retrieval: Retrieval,
}

impl Recall {
    /// The chosen records as evidence references for a worker's assignment.
    #[must_use]
    pub fn evidence_refs(&self) -> Vec<EvidenceRef> {
        match self.version {
            Some(v) => evidence_refs(
                &self.key,
                v,
                self.retrieval.chosen.iter().map(|s| s.record.id()),
            ),
            None => Vec::new(),
        }
    }
}

/// One memory namespace in a [`Store`], under the single key `memory/<namespace>`.
///
/// ```
/// use quorate_memory::*;
/// use quorate_protocols::*;
/// use quorate_state::MemoryStore;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let memory = Memory::new(MemoryStore::new(), "acme");
/// let ops = AccessRule { tenant: "acme".into(), principal: None, task: None };
/// let observation = MemoryObservation {
///     event: RecordId::from_u128(1),
///     episode: "read the warehouse database".into(),
///     source: Source { name: "warehouse-db".into(), version: "r7".into() },
///     observed_at: Timestamp(1_000),
///     access: ops.clone(),
///     status: EvidenceStatus::Verified,
///     derived_from: vec![],
///     claims: vec![ClaimSpec::new(
///         RecordId::from_u128(2), MemoryKind::Semantic, "inventory/sku-42", "12 units in stock",
///         Validity::default(),
///     )],
/// };
/// let committed = memory.write(&ops, &observation).await?;
/// assert_eq!(committed.conflicts, 0);
///
/// let reader = Principal::new("acme", "alice", None);
/// let query = Query::new("stock of sku 42", 100, Timestamp(2_000));
/// let recall = memory.retrieve(&reader, &query, &FreshnessPolicy::default()).await?;
/// assert_eq!(recall.retrieval.chosen[0].record.id(), RecordId::from_u128(2));
/// assert!(matches!(
///     &recall.evidence_refs()[0],
///     quorate_protocols::EvidenceRef::Record { version, .. } if *version == committed.version
/// ));
///
/// // Another tenant sees nothing, however relevant.
/// let outsider = Principal::new("globex", "mallory", None);
/// let recall = memory.retrieve(&outsider, &query, &FreshnessPolicy::default()).await?;
/// assert!(recall.retrieval.chosen.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Memory<S> {
    store: S,
    key: String,
}

impl<S: Store<MemoryView>> Memory<S> {
    /// The memory `namespace` in `store`.
    pub fn new(store: S, namespace: &str) -> Self {
        Self {
            store,
            key: format!("memory/{namespace}"),
        }
    }

    /// The store key holding the memory.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The underlying store.
    #[must_use]
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The current view and version.
    pub async fn snapshot(&self) -> Result<Snapshot, StoreError> {
        Ok(match self.store.get(&self.key).await? {
            Some(Versioned { value, version }) => Snapshot {
                view: value,
                version: Some(version),
            },
            None => Snapshot::default(),
        })
    }

    /// Runs a pure operation under CAS ([`quorate_state::update`]): on a conflict it is run again
    /// against the current view. `f` may therefore run several times and must not have side
    /// effects.
    pub async fn update<T, E>(
        &self,
        mut f: impl FnMut(&MemoryView) -> Result<(MemoryView, T), E>,
    ) -> Result<Committed<T>, CommitError<E>> {
        let empty = MemoryView::new();
        let done = update(&self.store, &self.key, |current: Option<&MemoryView>| {
            let (next, report) = f(current.unwrap_or(&empty))?;
            Ok(Change::Write(next, report))
        })
        .await?;
        let Some(version) = done.version else {
            unreachable!("the step above always writes, and only a kept value has no version")
        };
        Ok(Committed {
            version,
            report: done.value,
            conflicts: done.conflicts,
        })
    }

    /// Writes an observation through the write path ([`write`](crate::write())).
    pub async fn write(
        &self,
        authority: &AccessRule,
        observation: &MemoryObservation,
    ) -> Result<Committed<WriteReport>, CommitError<WriteError>> {
        self.update(|view| write(view, authority, observation))
            .await
    }

    /// Resolves a verification need ([`resolve`](crate::resolve())).
    pub async fn resolve(
        &self,
        authority: &AccessRule,
        need: NeedId,
        winner: RecordId,
        at: Timestamp,
    ) -> Result<Committed<ResolveReport>, CommitError<ResolveError>> {
        self.update(|view| resolve(view, authority, need, winner, at))
            .await
    }

    /// Applies one of the four forgetting operations.
    pub async fn forget(
        &self,
        authority: &AccessRule,
        op: Forget,
    ) -> Result<Committed<ForgetReport>, CommitError<ForgetError>> {
        self.update(|view| op.apply(view, authority)).await
    }

    /// Expires every record whose validity ended by `now` ([`expire_due`](crate::expire_due)).
    pub async fn expire_due(
        &self,
        now: Timestamp,
    ) -> Result<Committed<ForgetReport>, CommitError<Infallible>> {
        self.update(|view| Ok(expire_due(view, now))).await
    }

    /// Retrieves for `reader` ([`retrieve`](crate::retrieve())).
    pub async fn retrieve(
        &self,
        reader: &Principal,
        query: &Query,
        policy: &FreshnessPolicy,
    ) -> Result<Recall, StoreError> {
        let snapshot = self.snapshot().await?;
        Ok(Recall {
            key: self.key.clone(),
            version: snapshot.version,
            retrieval: retrieve(&snapshot.view, reader, query, policy),
        })
    }
}
