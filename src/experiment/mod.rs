//! Research experiments: measured costs of topologies, voting under correlated errors (on
//! simulated and on real vote data), and critical paths of task DAGs.
//!
//! * [`topology`] with [`topology_model`]: star vs all-to-all on real actors with a counting
//!   transport; counted messages, bytes, modelled context tokens and the largest context one
//!   agent reads per round, beside their closed forms; wall times repeated.
//! * [`voting`] with [`models`], [`plurality`] and the runtime primitive [`vote`](quorate_coordinator::vote): accuracy of
//!   naive and source-deduplicated majority or plurality votes under five correlation models,
//!   Monte Carlo (Wilson intervals) beside exact closed forms (log space, finite at any n), part
//!   of the trials run through worker actors.
//! * [`vote_data`] and [`vote_matrix`]: a real vote matrix read from CSV, its estimates with
//!   bootstrap intervals, the models fitted to it and their predictions against n; and a matrix
//!   made by the runtime's voter actors.
//! * [`critical_path`]: list scheduling of DAGs on a virtual clock against the lower bound
//!   `max(critical path, work / W)`.
//! * [`eval`]: plans over seeds in both topologies.
//! * [`cli`]: the `quorate experiment ...` subcommands; [`output`] writes JSON, CSV and SVG
//!   (`-`: stdout); [`stats`] holds the shared statistics.

pub mod cli;
pub mod critical_path;
pub mod eval;
pub mod models;
pub mod output;
pub mod plurality;
mod present;
mod present_data;
mod present_voting;
mod runtime_voters;
pub mod stats;
pub mod topology;
pub mod topology_model;
#[cfg(feature = "nats")]
mod topology_nats;
mod topology_report;
pub mod vote_data;
pub mod vote_matrix;
pub mod voting;
