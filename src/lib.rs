//! # quorate
//!
//! A runtime for coordinating many agents on actix: a supervisor turns a plan DAG into tasks,
//! carves budget slices out of its own budget and merges results through a versioned
//! compare-and-swap store; workers exchange envelopes whose ids, versions and dedupe keys make
//! duplicate, late or forged replies harmless.
//!
//! This crate re-exports the workspace's crates and holds the plan-file format and the runner
//! behind the `quorate` command:
//!
//! * [`protocols`]: ids, envelopes, budgets, capabilities, plans, lifecycles, records.
//! * [`state`]: the versioned CAS [`state::Store`], the in-memory backend and the ledgers.
//! * [`workers`]: the `Agent` and `Tool` traits, the execution gate, the worker actor.
//! * [`coordinator`]: the supervisor core and actor, run reports and traces.
//! * [`memory`]: memory with provenance on the store.
//! * [`plan_file`] and [`runner`]: `quorate run PLAN.toml`.
//! * [`telemetry`]: the Prometheus endpoint and the OTLP span export of `quorate run`.
//!
//! The reference pages live beside the code in the repository's `docs/` folder: `cli.md` (every
//! command, flag, exit code and the JSON report), `plan-format.md`, `trace.md`,
//! `architecture.md` (crates, the store, resume, known limits), `reliability.md`,
//! `performance.md`, `experiments.md`, `memory.md` and `durable.md` (the redb backend); the
//! README has the quickstart.

#![forbid(unsafe_code)]

pub mod bench_dag;
pub mod durable;
pub mod experiment;
pub mod plan_file;
pub mod report;
pub mod runner;
pub mod stdout;
pub mod telemetry;

pub use quorate_coordinator as coordinator;
pub use quorate_memory as memory;
pub use quorate_protocols as protocols;
pub use quorate_state as state;
pub use quorate_workers as workers;

/// The README's Rust blocks, compiled and run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
