//! A supervisor core for the crate's unit tests: one plan, one worker, fixed ids.

use quorate_protocols::{AgentId, IdSource, PlanSpec, Role, RunId, Sender};

use crate::core::{SupervisorConfig, SupervisorCore};

/// The one worker of [`one_worker_core`].
pub(crate) const WORKER: Sender = Sender {
    agent: AgentId::from_u128(2),
    role: Role::Worker,
};

/// A core over `spec` (which must validate) with `config`, run 9, supervisor agent 1 and
/// [`WORKER`], drawing its ids from a source seeded with `seed`; not started.
pub(crate) fn one_worker_core(
    spec: PlanSpec,
    config: SupervisorConfig,
    seed: u64,
) -> SupervisorCore {
    let me = Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    };
    SupervisorCore::new(
        RunId::from_u128(9),
        spec.validate().expect("a valid plan"),
        config,
        me,
        vec![WORKER],
        IdSource::seeded(seed),
    )
}
