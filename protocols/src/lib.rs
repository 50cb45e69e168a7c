//! # quorate-protocols
//!
//! The vocabulary every quorate component speaks. Pure data and validation: no actix, no tokio,
//! no I/O, no clock, no operating-system randomness (fresh ids come from a seeded [`IdSource`]).
//!
//! A tour, in the order a run meets the types:
//!
//! * A user writes a [`PlanSpec`]; [`PlanSpec::validate`] turns it into a [`Plan`] (acyclic,
//!   within budget, never granting more [`Capabilities`] than the run has) or a [`PlanError`]
//!   that names the node at fault.
//! * Ids are uuid newtypes ([`RunId`], [`TaskId`], ...); fresh ones are drawn from an
//!   [`IdSource`], which whoever drives a core seeds (at random in production, from the seed in
//!   the simulator).
//! * Each node becomes a task ([`TaskId`]) whose life is the [`TaskState`] machine: a terminal
//!   state never changes again.
//! * Budgets are [`Budget`] vectors with checked arithmetic ([`BudgetError`]); capabilities only
//!   narrow on delegation ([`Capabilities::delegate`]).
//! * Every message is an [`Envelope`]: ids, stamped [`Sender`], attempt, state [`Version`],
//!   evidence, [`ResultKind`], dedupe key and correlation id. Bytes from the outside go through
//!   [`decode_envelope`], which enforces [`Limits`] before parsing.
//! * The payloads the envelopes carry between supervisor (or peer) and worker are in [`wire`]:
//!   [`wire::Assignment`] and [`wire::Control`] to a worker, [`wire::Report`] (an
//!   [`wire::Outcome`], what was spent, the gate's [`wire::CallEvent`]s) back. Plain serde data:
//!   the same on actix in one process and between processes.
//! * A side-effecting tool call is an action: [`ActionId`] bound to the [`ParamDigest`] of its
//!   parameters, living through the [`ActionState`] machine (with an explicit *outcome unknown*).
//! * What agents learn is kept as [`ProvenanceRecord`]s.

#![forbid(unsafe_code)]

mod action;
mod box_pool;
mod budget;
mod capability;
mod decode;
pub mod drive;
mod envelope;
mod id_source;
mod ids;
mod lifecycle;
#[cfg(feature = "mutants")]
pub mod mutant;
mod payload;
mod plan;
mod record;
mod secret;
mod time;
mod version;
pub mod wire;

pub use action::{ActionId, DigestParseError, ParamDigest};
pub use box_pool::BoxPool;
pub use budget::{Budget, BudgetError, Component};
pub use capability::{Capabilities, Capability, CapabilityError, MAX_CAPABILITY_LEN};
pub use decode::{decode_envelope, encode_envelope, prescan, DecodeError, Limits};
pub use envelope::{Envelope, EvidenceRef, ResultKind, Role, Scope, Sender};
pub use id_source::IdSource;
pub use ids::{AgentId, CorrelationId, DedupeKey, RecordId, RunId, TaskId};
pub use lifecycle::{
    ActionEvent, ActionState, ActionTransitionError, TaskEvent, TaskState, TaskTransitionError,
};
pub use payload::Payload;
pub use plan::{
    Acceptance, AgentRole, Check, NodeId, NodeIdError, NodeSpec, OnExhausted, Plan, PlanError,
    PlanSpec, Precondition, MAX_NODE_ID_LEN,
};
pub use record::{
    AccessRule, EvidenceStatus, MemoryKind, ProvenanceRecord, Source, Timestamp, Validity,
};
pub use secret::Secret;
pub use time::{millis, Millis};
pub use version::Version;
