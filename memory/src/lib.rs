//! # quorate-memory
//!
//! Memory with provenance for long-running agents: every record keeps its source, a model's
//! stored answer is a derived record that never counts as an independent source, and nothing
//! leaks across access scopes.
//!
//! A tour, in the order a record meets the types:
//!
//! * An agent or tool reports a [`MemoryObservation`]: an episode, its [`Source`] and source
//!   version, an access rule, and [`ClaimSpec`]s. A model's inference names the records it came
//!   from in `derived_from`.
//! * The write path ([`write()`]) is a chain of pure steps: [`split`] into an event record and
//!   claim candidates ([`MemoryRecord`] wraps the protocols' [`ProvenanceRecord`]), [`check`]
//!   the writer's scope and the derivation links, find the [`related`] records (same object,
//!   kind and access rule, overlapping validity) and classify each pair ([`relations`],
//!   [`classify`]; [`Relation`]: duplicate, corroborates, supersedes, superseded-by, conflicts,
//!   disputes), then apply: supersede where the revision is clear (invalidating what was derived
//!   from the replaced record), keep both sides with a [`VerificationNeed`] where it is not. A
//!   claim never supersedes a record it derives from, and the [`WriteReport`] gives the statuses
//!   the write left.
//! * [`Memory`] keeps one namespace's [`MemoryView`] under one store key and commits each
//!   operation with one CAS on its version; on a conflict it re-runs the pure step against the
//!   view that won, so concurrent updates are merged, never overwritten.
//! * [`resolve()`] closes a verification need once someone checked.
//! * Forgetting has four meanings, each its own operation ([`Forget`]): [`evict_from_hot`],
//!   [`deprioritize`], [`expire`], [`delete`] (which also removes derived records and index
//!   entries).
//! * [`retrieve()`] filters by [`Principal`] (tenant, principal, task), status, kind and validity
//!   at the query's time first ([`Query::include_history`] for history), then chooses records
//!   for a token budget maximising relevance minus a redundancy penalty, with per-kind freshness
//!   ([`FreshnessPolicy`]).
//! * Wired into a runtime (shown in `examples/memory.rs`; the coordinator and the workers do not
//!   use the memory yet), a [`Recall`] turns into [`EvidenceRef`]s for an assignment, and
//!   [`before_write`] returns either a `KeyAtVersion` precondition or the instruction to
//!   refresh a stale record first. Votes use [`independent_sources`] / [`MemoryView::support`]
//!   (per reader), or the `support` of each retrieved [`Scored`].
//!
//! ## Validity, scope and relations
//!
//! | judgement                     | made at         | among                              |
//! |-------------------------------|-----------------|------------------------------------|
//! | validity                      | query (filter)  | the record and all it derives from |
//! | duplicate, corroboration      | write (stored)  | records of one access rule         |
//! | conflict, dispute             | write (stored)  | records of one access rule         |
//! | supersession                  | write, resolve  | one access rule; never own sources |
//! | invalidation                  | with its source | what derives from it (never wider) |
//! | staleness (version-based)     | query           | what the reader may read           |
//! | support (independent sources) | query           | what the reader may read, valid    |
//!
//! Validity is judged at the query's time (`now`, or [`Query::valid_at`]); a derived record
//! holds no longer than what it derives from. Judgements stored at write time are seen by every
//! reader of a record, so they are only formed between records with the same access rule (what
//! is derived from a superseded or expired record is invalidated with it, and is never wider
//! than it), and a claim never supersedes a record it derives from. Judgements made at query time
//! know the reader and count exactly what the reader may read. Hence: for any reader, nothing
//! done to records they cannot read changes what they retrieve; and [`expire_due`] is
//! housekeeping: it marks records whose validity ended (as history queries show) but never
//! changes the answer to a query at the same time.
//!
//! No I/O, no clock: time is always an argument, ids are chosen by the caller.
//!
//! [`Source`]: quorate_protocols::Source
//! [`ProvenanceRecord`]: quorate_protocols::ProvenanceRecord
//! [`EvidenceRef`]: quorate_protocols::EvidenceRef

#![forbid(unsafe_code)]

mod classify;
mod error;
#[cfg(test)]
mod fixtures;
mod forget;
mod freshness;
mod memory;
mod observation;
mod record;
mod resolve;
mod retrieve;
mod runtime;
mod view;
mod write;

pub use classify::{classify, related, relations, Relation};
pub use error::{CommitError, ForgetError, ParameterError, ResolveError, WriteError};
pub use forget::{delete, deprioritize, evict_from_hot, expire, expire_due, Forget, ForgetReport};
pub use freshness::{Freshness, FreshnessPolicy, Hazard};
pub use memory::{Committed, Memory, Recall, Snapshot};
pub use observation::{split, Candidates, ClaimSpec, MemoryObservation};
pub use record::{
    access_within, estimate_tokens, independent_sources, terms, MemoryRecord, Principal,
    FULL_PRIORITY,
};
pub use resolve::{resolve, ResolveReport};
pub use retrieve::{
    jaccard, objective, retrieve, select, select_using, Item, Method, Query, Retrieval, Scored,
    DERIVED_WEIGHT, EXACT_LIMIT, EXACT_MAX,
};
pub use runtime::{
    before_write, evidence_refs, record_key, source_store_version, store_source, BeforeWrite,
};
pub use view::{MemoryView, NeedId, Resolution, VerificationNeed};
pub use write::{check, write, ClaimOutcome, WriteReport};
