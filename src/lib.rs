//! # quorate
//!
//! A runtime for coordinating many agents on actix: a supervisor turns a plan DAG into tasks,
//! carves budget slices out of its own budget and merges results through a versioned
//! compare-and-swap store; workers and peers exchange envelopes whose ids, versions and dedupe
//! keys make duplicate, late or forged replies harmless.
//!
//! This crate re-exports the workspace's crates:
//!
//! * [`protocols`]: ids, envelopes, budgets, capabilities, plans, lifecycles, records.
//! * [`state`]: the versioned CAS [`state::Store`], the in-memory backend and the ledgers.
//! * [`memory`]: memory with provenance on the store.

#![forbid(unsafe_code)]

pub use quorate_memory as memory;
pub use quorate_protocols as protocols;
pub use quorate_state as state;
