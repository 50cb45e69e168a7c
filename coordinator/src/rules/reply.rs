//! Which replies a task accepts, in both topologies. Pure: the rules look only at the task's
//! record and the envelope.

use quorate_protocols::{AgentId, Envelope, Role, RunId, TaskState, Version};

use super::SeenKeys;
use crate::core::ReplyRefusal;
use crate::event::Rejection;

/// What the reply rules need to know about a task.
#[derive(Debug)]
pub(crate) struct ReplyGuard<'a> {
    pub(crate) run: RunId,
    pub(crate) state: TaskState,
    /// The task's end is decided although its state may not say so: in peer mode its terminal
    /// record is committed, and a task parked for a human settles as `waiting-approval`. A
    /// settled task takes no reply, as a terminal one.
    pub(crate) settled: bool,
    pub(crate) attempt: u32,
    pub(crate) version: Version,
    pub(crate) assigned: Option<AgentId>,
    pub(crate) seen: &'a SeenKeys,
}

/// Accept a reply only if it is for this run, its dedupe key is new, the task is live (neither
/// terminal nor [settled](ReplyGuard::settled)), it names
/// the current attempt and state version, and it comes from the worker the attempt was
/// assigned to. The checks run in that order, so a second copy of a reply that was accepted (or
/// acknowledged) is a *duplicate* even after it made the task terminal; a new reply to a
/// terminal task is *late*.
pub(crate) fn judge<P>(guard: &ReplyGuard<'_>, reply: &Envelope<P>) -> Result<(), Rejection> {
    refuse(guard, reply).map_err(|why| why.rejection())
}

/// [`judge`], naming the rule that refused the reply.
pub(crate) fn refuse<P>(guard: &ReplyGuard<'_>, reply: &Envelope<P>) -> Result<(), ReplyRefusal> {
    #[cfg(feature = "mutants")]
    if mutant_accepts(guard, reply) {
        return Ok(());
    }
    if reply.run != guard.run {
        return Err(ReplyRefusal::WrongRun {
            expected: guard.run,
            found: reply.run,
        });
    }
    if guard.seen.contains(&reply.dedupe) {
        return Err(ReplyRefusal::Duplicate {
            dedupe: reply.dedupe,
        });
    }
    if guard.state.is_terminal() {
        return Err(ReplyRefusal::AfterTerminal { state: guard.state });
    }
    if guard.settled {
        return Err(ReplyRefusal::Settled { state: guard.state });
    }
    if reply.attempt != guard.attempt {
        return Err(ReplyRefusal::OldAttempt {
            current: guard.attempt,
            found: reply.attempt,
        });
    }
    if reply.sender.role != Role::Worker || Some(reply.sender.agent) != guard.assigned {
        return Err(ReplyRefusal::WrongSender {
            agent: reply.sender.agent,
            role: reply.sender.role,
        });
    }
    if reply.state_version != guard.version {
        return Err(ReplyRefusal::StaleVersion {
            current: guard.version,
            found: reply.state_version,
        });
    }
    if !matches!(guard.state, TaskState::Running | TaskState::WaitingApproval) {
        return Err(ReplyRefusal::NotRunning { state: guard.state });
    }
    Ok(())
}

/// Seeded bugs (feature `mutants`): the reply rule without its terminal guard, or without its
/// attempt and version checks. `true` when an active reply-rule mutant accepts the reply.
#[cfg(feature = "mutants")]
fn mutant_accepts<P>(guard: &ReplyGuard<'_>, reply: &Envelope<P>) -> bool {
    use quorate_protocols::mutant::{is, Mutant};
    let authentic = reply.run == guard.run
        && !guard.seen.contains(&reply.dedupe)
        && reply.sender.role == Role::Worker
        && Some(reply.sender.agent) == guard.assigned;
    let current = reply.attempt == guard.attempt && reply.state_version == guard.version;
    let live = matches!(guard.state, TaskState::Running | TaskState::WaitingApproval);
    (is(Mutant::NoTerminalGuard) && authentic && current)
        || (is(Mutant::AcceptStale) && authentic && live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::{Sender, TaskId};

    fn setup() -> (RunId, AgentId, SeenKeys) {
        (
            RunId::from_u128(1),
            AgentId::from_u128(2),
            SeenKeys::default(),
        )
    }

    fn reply(run: RunId, agent: AgentId, attempt: u32, version: u64) -> Envelope<()> {
        // A fresh source per reply: every reply gets its own dedupe key.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let seed = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut e = Envelope::new(
            run,
            TaskId::from_u128(3),
            Sender {
                agent,
                role: Role::Worker,
            },
            (),
            &mut quorate_protocols::IdSource::seeded(seed),
        );
        e.attempt = attempt;
        e.state_version = Version::new(version);
        e
    }

    #[test]
    fn rules_in_order() {
        let (run, agent, mut seen) = setup();
        let seen_before = seen.clone();
        let ok = reply(run, agent, 1, 5);
        let mut guard = ReplyGuard {
            run,
            state: TaskState::Running,
            settled: false,
            attempt: 1,
            version: Version::new(5),
            assigned: Some(agent),
            seen: &seen_before,
        };
        assert_eq!(judge(&guard, &ok), Ok(()));
        assert_eq!(
            judge(&guard, &reply(RunId::from_u128(9), agent, 1, 5)),
            Err(Rejection::Stale)
        );
        assert_eq!(
            judge(&guard, &reply(run, AgentId::from_u128(7), 1, 5)),
            Err(Rejection::Unauthorized)
        );
        assert_eq!(
            judge(&guard, &reply(run, agent, 0, 5)),
            Err(Rejection::Late)
        );
        assert_eq!(
            judge(&guard, &reply(run, agent, 1, 4)),
            Err(Rejection::Stale)
        );
        let mut forged = ok.clone();
        forged.sender.role = Role::Supervisor;
        assert_eq!(judge(&guard, &forged), Err(Rejection::Unauthorized));
        guard.state = TaskState::Completed;
        assert_eq!(judge(&guard, &ok), Err(Rejection::Late));
        let (run_, version, assigned) = (guard.run, guard.version, guard.assigned);
        seen.insert(ok.dedupe);
        let guard = ReplyGuard {
            run: run_,
            state: TaskState::Running,
            settled: false,
            attempt: 1,
            version,
            assigned,
            seen: &seen,
        };
        assert_eq!(judge(&guard, &ok), Err(Rejection::Duplicate));
    }

    #[test]
    fn a_settled_task_takes_no_reply_whatever_its_state() {
        let (run, agent, seen) = setup();
        let ok = reply(run, agent, 1, 5);
        let guard = |settled| ReplyGuard {
            run,
            state: TaskState::WaitingApproval,
            settled,
            attempt: 1,
            version: Version::new(5),
            assigned: Some(agent),
            seen: &seen,
        };
        assert_eq!(judge(&guard(false), &ok), Ok(()), "parked, not settled");
        assert_eq!(
            judge(&guard(true), &ok),
            Err(Rejection::Late),
            "settled as waiting-approval"
        );
    }

    #[test]
    fn a_copy_of_the_final_reply_is_a_duplicate_not_late() {
        let (run, agent, mut seen) = setup();
        let accepted = reply(run, agent, 1, 5);
        seen.insert(accepted.dedupe);
        let guard = ReplyGuard {
            run,
            state: TaskState::Completed,
            settled: true,
            attempt: 1,
            version: Version::new(5),
            assigned: Some(agent),
            seen: &seen,
        };
        assert_eq!(judge(&guard, &accepted), Err(Rejection::Duplicate));
        assert_eq!(
            judge(&guard, &reply(run, agent, 1, 5)),
            Err(Rejection::Late),
            "a new reply to a terminal task is late"
        );
    }
}
