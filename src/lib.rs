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
//! * [`llm`]: model agents (`LlmAgent`, prompts with quoted data; with the cargo feature `llm`,
//!   the OpenAI-compatible client and the `model.<name>` tool).
//! * [`plan_file`] and [`runner`]: `quorate run PLAN.toml`; [`durable`]: the runs kept in a
//!   store file (`quorate run --store`, `quorate resume`).
//!
//! The default cargo feature `cli` adds the `quorate` binary and the modules only it uses:
//! `experiment` (`quorate experiment ...`, `quorate eval`), `bench_dag` (`quorate bench dag`),
//! `report` (`quorate report`), `telemetry` (the Prometheus endpoint and the OTLP span export
//! of `quorate run`) and `stdout`. A library user turns it off
//! (`default-features = false`) and compiles no command-line, plotting, progress-bar or
//! allocator crate.
//!
//! The reference pages live beside the code in the repository's `docs/` folder: `cli.md` (every
//! command, flag, exit code and the JSON report), `plan-format.md`, `trace.md`,
//! `architecture.md` (crates, the store, resume, known limits), `reliability.md`,
//! `performance.md`, `experiments.md`, `memory.md` and `durable.md` (the redb backend); the
//! README has the quickstart.

#![forbid(unsafe_code)]

#[cfg(feature = "cli")]
pub mod bench_dag;
pub mod durable;
#[cfg(feature = "cli")]
pub mod experiment;
pub mod plan_file;
#[cfg(feature = "nats")]
pub mod process;
#[cfg(feature = "cli")]
pub mod report;
pub mod runner;
pub mod security;
#[cfg(feature = "cli")]
pub mod stdout;
#[cfg(feature = "cli")]
pub mod telemetry;

pub use quorate_coordinator as coordinator;
pub use quorate_llm as llm;
pub use quorate_memory as memory;
pub use quorate_protocols as protocols;
pub use quorate_state as state;
pub use quorate_workers as workers;

/// The README's Rust blocks, compiled and run as doctests so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
