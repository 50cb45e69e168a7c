//! # quorate-coordinator
//!
//! The supervisor of a star-topology run.
//!
//! * [`SupervisorCore`] is the pure decision logic: scheduling tasks whose dependencies
//!   completed, delegating budget slices from the run's root account (reserve + children <=
//!   limit), judging replies (duplicate, late, stale and unauthorized replies are rejected and
//!   counted, and never change a terminal task), running acceptance checks on observed results,
//!   and the stop conditions. It reads no clock and does no I/O: inputs are `handle_*(now, ..)`,
//!   outputs are [`SupervisorEffect`]s.
//! * The task rules it shares with peer mode's [`PeerCore`] (which replies a task accepts, the
//!   approval `Quiet` handshake, attempt timeouts) live in one module, `coordinator/src/rules/`;
//!   every state change of a task goes through `TaskState::on` (in `quorate-protocols`).
//! * The actix shell delivers messages to it and carries out its effects.
//! * [`drive`] holds the core's one drive loop ([`drive::drive`] over a [`drive::SupervisorEnv`]),
//!   which the actix shell, the simulator, the test harnesses and the fuzz target all use.
//! * [`peer::drive`] holds the peer core's one drive loop (`PeerEnv` + `drive`), which the peer
//!   actor, the peer process, the simulator and the tests all use.
//! * [`RunReport`] is what a run reports; [`StopReason`] why it ended; [`Event`] each decision;
//!   [`run_metrics`] publishes a stopped run's counters to the `metrics` facade.
//! * [`vote::MajorityVote`] is a runtime primitive a pipeline puts after several agents: a pure
//!   vote over their answers with quorum, tie policy, a budget per vote and one vote per
//!   evidence source (the voting experiments run on it).
//!
//! The payloads the supervisor and its workers exchange (`Assignment`, `Control`, `Report`) are
//! defined in [`quorate_protocols::wire`], beside the envelope that carries them.

#![forbid(unsafe_code)]

pub mod acceptance;
mod actor;
mod assign;
mod blob;
pub mod chaos;
mod core;
pub mod drive;
mod event;
mod event_pack;
mod journal;
mod link;
pub mod peer;
mod report;
mod rules;
mod run;
mod run_linked;
pub mod run_metrics;
mod shell;
mod stop;
pub mod trace;
pub mod vote;

pub use crate::core::{
    ApprovalPolicy, CheckTicket, CommitOutcome, CommitTicket, ConfigError, InputRefused,
    MessageCounts, ReplanError, ReplyRefusal, ResumeError, SupervisorConfig, SupervisorCore,
    SupervisorEffect, TopUp, TopUpError, TopUpPolicy, TopUpRequest,
};
pub use actor::{
    CancelRun, Decide, SupervisorActor, UnauthorizedDelivery, WorkerLink, WorkerLiveness,
};
pub use event::{Event, EventKind, PlanNode, Record, RecordTask, Rejection, StopControl};
pub use journal::{ResumeFrom, RunJournal};
pub use link::ChaosLink;
pub use peer::{run_peer, PeerCore, PeerEffect, PeerMsg};
pub use report::{BudgetRow, RunReport, TaskRow};
pub use run::{result_key, run_star, Durable, RunError, RunOptions, RunOutput};
pub use run_linked::{run_star_linked, run_star_linked_to, LinkedInputs, Participants};
pub use stop::StopReason;
