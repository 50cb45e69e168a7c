//! Research experiments (issue 4): measured costs of topologies, majority voting under
//! correlated errors, and critical paths of task DAGs.
//!
//! * [`topology`]: star vs all-to-all on real actors with a counting transport; counted
//!   messages, bytes and modelled context tokens beside their closed forms.
//! * [`voting`] with [`models`] and the runtime primitive [`vote`]: accuracy of naive and
//!   source-deduplicated majorities under five correlation models, Monte Carlo beside exact
//!   closed forms, part of the trials run through worker actors.
//! * [`critical_path`]: list scheduling of DAGs on a virtual clock against the lower bound
//!   `max(critical path, work / W)`.
//! * [`cli`]: the `quorate experiment ...` subcommands; [`output`] writes JSON, CSV and SVG.

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
pub mod vote;
pub mod vote_data;
pub mod vote_matrix;
pub mod voting;
