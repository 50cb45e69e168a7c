//! The process split over NATS JetStream (feature `nats`): a supervisor process
//! (`quorate run PLAN --nats URL --remote-workers N`) and worker processes
//! (`quorate worker --nats URL --run RUN --plan PLAN`), each an unchanged core driven by a
//! shell that moves its envelopes over the run's stream (docs/distributed.md, "Processes").
//!
//! Besides the run's stream (`quorate.<run>.<to>.<from>`, see [`quorate_nats::subject`]), three
//! plain NATS subjects (not JetStream: they are outside the stream's `quorate.<run>.>`) carry
//! the run's setup and end:
//!
//! * `quorate.register.<run>.<worker>`: a worker announces itself ([`Registration`]), again
//!   every second until it is welcomed; the supervisor takes the worker's id from the subject,
//!   which the worker's NATS permissions fix to its own (docs/distributed.md, "Security");
//! * `quorate.welcome.<run>.<worker>`: once `N` distinct workers registered, the supervisor
//!   creates the stream and every consumer, then welcomes each of them ([`Welcome`]: the
//!   supervisor's id), after which the worker binds to its consumer;
//! * `quorate.end.<run>`: the supervisor's run stopped; workers exit 0.
//!
//! A run kept in a store (`--store`) keeps its supervisor's and workers' ids in its record;
//! after the supervisor process is lost, `quorate resume` brings it back with the same id
//! (module `resume`).

#[cfg(feature = "etcd")]
pub mod failover;
mod fence;
mod lease;
#[cfg(feature = "etcd")]
pub mod peer;
mod resume;
mod supervisor;
mod worker;

use std::time::Duration;

use quorate_nats::secure::SecureConnectError;
use quorate_nats::transport::TransportError;
use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{AgentId, RunId};
use serde::{Deserialize, Serialize};

use crate::security::Security;

pub use lease::lease_name;
pub use resume::{
    check as check_resume, resume_remote, run_remote_kept, ResumeRemote, HALTED, HALT_AT_REPLY,
};
pub use supervisor::{run_remote, RemoteArgs, RemoteRun};
pub use worker::{run_worker, WorkerArgs, WorkerExit};

/// Exit code of a process whose counterpart did not show up in time: a supervisor that did not
/// see `N` workers register, a worker that was not welcomed.
pub const EXIT_NO_COUNTERPART: u8 = 9;

/// A worker's announcement on `quorate.register.<run>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    /// The worker's agent id (its consumer is `to-<worker>`).
    pub worker: AgentId,
    /// The plan roles it serves (`quorate worker --roles`); empty (and absent from a
    /// registration of an older worker): every role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

/// The supervisor's answer on `quorate.welcome.<run>.<worker>`: the stream and the worker's
/// consumer exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The supervisor's agent id (the worker's replies go to it).
    pub supervisor: AgentId,
}

/// The subject worker `worker` of run `run` registers on.
#[must_use]
pub fn register_subject(run: RunId, worker: AgentId) -> String {
    format!("quorate.register.{run}.{worker}")
}

/// The subjects of every registration for run `run` (what the supervisor subscribes to).
#[must_use]
pub fn registrations_subject(run: RunId) -> String {
    format!("quorate.register.{run}.*")
}

/// The worker a registration subject names (its last token), if it is one of run `run`'s.
#[must_use]
pub fn registered_worker(run: RunId, subject: &str) -> Option<AgentId> {
    let rest = subject.strip_prefix(&format!("quorate.register.{run}."))?;
    parse_id(rest).ok()
}

/// The subject worker `worker` of run `run` is welcomed on.
#[must_use]
pub fn welcome_subject(run: RunId, worker: AgentId) -> String {
    format!("quorate.welcome.{run}.{worker}")
}

/// The subject the end of run `run` is announced on.
#[must_use]
pub fn end_subject(run: RunId) -> String {
    format!("quorate.end.{run}")
}

/// What reaches a worker's consumer: an assignment or a control message (told apart by shape:
/// a control message is one of [`Control`]'s variants, an assignment a record of many fields).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToWorker {
    /// Cancel, approve or reject.
    Control(Control),
    /// Work on a task.
    Assignment(Box<Assignment>),
}

/// A process of the split could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The plan file could not be loaded or run.
    #[error(transparent)]
    Plan(#[from] crate::runner::RunFileError),
    /// The NATS server could not be reached at the start.
    #[error("connecting to NATS at {url}: {message}")]
    Connect {
        /// The `--nats` address.
        url: String,
        /// The client's error.
        message: String,
    },
    /// The connection was refused: plaintext without `--allow-plaintext`, credentials or a
    /// certificate the server did not accept.
    #[error(transparent)]
    Secure(#[from] SecureConnectError),
    /// `--id` names another agent than the NATS user the process connects as.
    #[error("--id {id} but --nats-user {user}: a process speaks only as its NATS user's agent")]
    IdMismatch {
        /// `--id`.
        id: AgentId,
        /// The user's agent id.
        user: AgentId,
    },
    /// The JetStream side failed (stream, consumer, publish, ack).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// A plain NATS subscribe, publish or flush on `subject` failed.
    #[error("NATS subject {subject}: {message}")]
    Subject {
        /// The subject.
        subject: String,
        /// The client's error.
        message: String,
    },
    /// The supervisor waited `waited` for `wanted` workers and saw only `registered`.
    #[error("{registered} of {wanted} workers registered within {waited:?} (start them with `quorate worker --nats URL --run RUN --plan PLAN`)")]
    NotEnoughWorkers {
        /// Workers that registered.
        registered: usize,
        /// `--remote-workers`.
        wanted: usize,
        /// `--wait-ms`.
        waited: Duration,
    },
    /// The worker was not welcomed by a supervisor of its run within `waited`.
    #[error("no supervisor of run {run} welcomed this worker within {waited:?} (is `quorate run --nats ... --run {run}` running, and waiting for more workers?)")]
    NotWelcomed {
        /// The run.
        run: RunId,
        /// `--wait-ms`.
        waited: Duration,
    },
    /// The tokio runtime that carries the NATS client could not start.
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
    /// The store of record (`--store etcd://...`) could not be used for the workers' world,
    /// books or leases.
    #[error("the store at {url}: {message}")]
    Store {
        /// The `--store` address.
        url: String,
        /// What failed.
        message: String,
    },
    /// A registered worker holds no lease on the supervisor's `--store` (started without
    /// `--store`, or on another cluster or prefix): it would be taken for lost at once.
    #[error("worker {worker} holds no lease on {store}: start every worker of a run whose supervisor has --store with the same --store")]
    Unleased {
        /// The worker.
        worker: AgentId,
        /// The supervisor's `--store`.
        store: String,
    },
    /// The run's record (`--store`) could not be read or written.
    #[error(transparent)]
    Kept(#[from] crate::durable::DurableError),
    /// `resume --nats` was given a run whose record keeps no supervisor process ids: it ran in
    /// one process, or its supervisor process stopped before its workers registered.
    #[error("run {run} keeps no supervisor process ids (it ran in one process, or its supervisor stopped before its workers registered); resume it without --nats")]
    NotAProcessRun {
        /// The run.
        run: RunId,
    },
    /// The plan has a task whose role no registered worker serves (each was started with
    /// `--roles` naming others): refused before the run starts.
    #[error("task {task} has role {role:?}, which no registered worker serves (start a worker with --roles {role}, or one without --roles)")]
    UnservedRole {
        /// The task's node id.
        task: String,
        /// Its role.
        role: String,
    },
    /// `resume --nats` was given another number of workers than the run has.
    #[error("run {run} has {kept} worker processes; --remote-workers {given} does not match")]
    WorkersMismatch {
        /// The run.
        run: RunId,
        /// Workers kept in its record.
        kept: usize,
        /// `--remote-workers`.
        given: usize,
    },
}

impl ProcessError {
    /// The exit code: 2 bad input or an unreachable NATS server, 9 no counterpart in time, 8
    /// an unusable store of record or anything failing mid-run.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            ProcessError::Plan(_)
            | ProcessError::Connect { .. }
            | ProcessError::Secure(_)
            | ProcessError::IdMismatch { .. }
            | ProcessError::Unleased { .. }
            | ProcessError::NotAProcessRun { .. }
            | ProcessError::UnservedRole { .. }
            | ProcessError::WorkersMismatch { .. } => 2,
            // A cluster that does not answer: the runtime could not go on; the rest is input.
            ProcessError::Kept(crate::durable::DurableError::Store(
                quorate_state::StoreError::Unavailable { .. },
            )) => quorate_coordinator::StopReason::EXIT_RUNTIME,
            ProcessError::Kept(_) => 2,
            ProcessError::NotEnoughWorkers { .. } | ProcessError::NotWelcomed { .. } => {
                EXIT_NO_COUNTERPART
            }
            ProcessError::Transport(_)
            | ProcessError::Subject { .. }
            | ProcessError::Runtime(_)
            | ProcessError::Store { .. } => quorate_coordinator::StopReason::EXIT_RUNTIME,
        }
    }
}

fn subject_err(subject: &str) -> impl Fn(String) -> ProcessError + '_ {
    move |message| ProcessError::Subject {
        subject: subject.to_string(),
        message,
    }
}

/// The runtime the NATS client lives on (2 threads, apart from the actix system's).
pub(crate) fn nats_runtime() -> Result<tokio::runtime::Runtime, ProcessError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("quorate-nats")
        .enable_all()
        .build()
        .map_err(ProcessError::Runtime)
}

/// Connects to `url` as agent `agent` with `security` (TLS and credentials; plaintext only when
/// allowed): every NATS connection of a process is made here.
pub(crate) async fn connect(
    url: &str,
    security: &Security,
    agent: AgentId,
) -> Result<quorate_nats::async_nats::Client, ProcessError> {
    let js = quorate_nats::secure::connect_with(url, &security.nats_options(agent)).await?;
    Ok(js.client())
}

/// The agent id a process speaks as: `--id`, else its NATS user's ([`Security::agent`]), else
/// random. Both given and different is refused.
///
/// # Errors
/// [`ProcessError::IdMismatch`].
pub fn own_id(id: Option<AgentId>, security: &Security) -> Result<AgentId, ProcessError> {
    match (id, security.agent()) {
        (Some(id), Some(user)) if id != user => Err(ProcessError::IdMismatch { id, user }),
        (Some(id), _) | (None, Some(id)) => Ok(id),
        (None, None) => Ok(quorate_workers::edge::random_ids().agent_id()),
    }
}

/// The first task of `plan` whose role none of `roles` (one list per worker; an empty list
/// serves every role) serves.
///
/// # Errors
/// [`ProcessError::UnservedRole`].
pub fn check_roles(
    plan: &quorate_protocols::Plan,
    roles: &[Vec<String>],
) -> Result<(), ProcessError> {
    let serves = |r: &Vec<String>, role: &str| r.is_empty() || r.iter().any(|x| x == role);
    for i in 0..plan.len() as u32 {
        let node = plan.node(i);
        if !roles.iter().any(|r| serves(r, &node.role)) {
            return Err(ProcessError::UnservedRole {
                task: node.id.as_str().to_string(),
                role: node.role.to_string(),
            });
        }
    }
    Ok(())
}

/// Parses a run or agent id given on the command line (a uuid; its hyphenated form is what the
/// subjects carry).
///
/// # Errors
/// A message naming the text when it is not a uuid.
pub fn parse_id<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.trim().to_string()))
        .map_err(|_| format!("{text:?} is not a uuid (e.g. 0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6b)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::IdSource;

    #[test]
    fn setup_subjects_stay_outside_the_runs_stream() {
        let mut ids = IdSource::seeded(1);
        let (run, worker) = (ids.run_id(), ids.agent_id());
        for subject in [
            register_subject(run, worker),
            registrations_subject(run),
            welcome_subject(run, worker),
            end_subject(run),
        ] {
            // The stream takes `quorate.<run>.>`: the second token must not be the run.
            assert_ne!(subject.split('.').nth(1), Some(run.to_string().as_str()));
            assert!(quorate_nats::subject::parse(&subject).is_err(), "{subject}");
        }
    }

    #[test]
    fn the_registered_worker_is_the_subjects_last_token() {
        let mut ids = IdSource::seeded(2);
        let (run, other, worker) = (ids.run_id(), ids.run_id(), ids.agent_id());
        assert_eq!(
            registered_worker(run, &register_subject(run, worker)),
            Some(worker)
        );
        assert_eq!(
            registered_worker(other, &register_subject(run, worker)),
            None
        );
        assert_eq!(
            registered_worker(run, &format!("quorate.register.{run}.x")),
            None
        );
    }

    #[test]
    fn a_process_speaks_as_its_nats_user() {
        use crate::security::NatsAuth;
        use quorate_protocols::Secret;
        let mut ids = IdSource::seeded(3);
        let (a, b) = (ids.agent_id(), ids.agent_id());
        let security = Security {
            nats: NatsAuth::User {
                user: a.to_string(),
                password: Secret::new("pw"),
            },
            ..Security::default()
        };
        assert_eq!(own_id(None, &security).unwrap(), a);
        assert_eq!(own_id(Some(a), &security).unwrap(), a);
        assert!(matches!(
            own_id(Some(b), &security),
            Err(ProcessError::IdMismatch { .. })
        ));
        assert_eq!(own_id(Some(b), &Security::plaintext()).unwrap(), b);
    }

    #[test]
    fn a_registration_without_roles_reads_as_every_role() {
        let worker = IdSource::seeded(4).agent_id();
        let old = serde_json::json!({ "worker": worker });
        let r: Registration = serde_json::from_value(old.clone()).expect("an old registration");
        assert!(r.roles.is_empty());
        assert_eq!(serde_json::to_value(&r).unwrap(), old, "written as before");
        let with = Registration {
            worker,
            roles: vec!["alpha".into()],
        };
        let back: Registration =
            serde_json::from_slice(&serde_json::to_vec(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }

    #[test]
    fn a_plan_with_a_role_no_worker_serves_is_refused() {
        use quorate_protocols::{NodeSpec, PlanSpec};
        let plan = PlanSpec {
            nodes: vec![
                NodeSpec::named("a").with_role("alpha"),
                NodeSpec::named("b").with_role("beta"),
            ],
            ..PlanSpec::default()
        }
        .validate()
        .expect("a plan");
        let roles = |lists: &[&[&str]]| -> Vec<Vec<String>> {
            lists
                .iter()
                .map(|l| l.iter().map(|s| s.to_string()).collect())
                .collect()
        };
        assert!(check_roles(&plan, &roles(&[&["alpha"], &["beta", "x"]])).is_ok());
        assert!(check_roles(&plan, &roles(&[&["alpha"], &[]])).is_ok());
        match check_roles(&plan, &roles(&[&["alpha"], &["alpha"]])) {
            Err(e @ ProcessError::UnservedRole { .. }) => {
                assert_eq!(e.exit_code(), 2);
                let text = e.to_string();
                assert!(
                    text.contains("task b") && text.contains("\"beta\""),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_control_and_an_assignment_are_told_apart() {
        let cancel: ToWorker =
            serde_json::from_value(serde_json::to_value(Control::Cancel).unwrap()).unwrap();
        assert!(matches!(cancel, ToWorker::Control(Control::Cancel)));
    }
}
