//! Which replies the supervisor accepts. Pure: the rules look only at the task's record and the
//! envelope.

use quorate_protocols::{AgentId, Envelope, Role, RunId, TaskState, Version};

use super::task::SeenKeys;
use crate::event::Rejection;

/// What the reply rules need to know about a task.
#[derive(Debug)]
pub(crate) struct ReplyGuard<'a> {
    pub(crate) run: RunId,
    pub(crate) state: TaskState,
    pub(crate) attempt: u32,
    pub(crate) version: Version,
    pub(crate) assigned: Option<AgentId>,
    pub(crate) seen: &'a SeenKeys,
}

/// Accept a reply only if it is for this run, its dedupe key is new, the task is live, it names
/// the current attempt and state version, and it comes from the worker the attempt was
/// assigned to. The checks run in that order, so a second copy of a reply that was accepted (or
/// acknowledged) is a *duplicate* even after it made the task terminal; a new reply to a
/// terminal task is *late*.
pub(crate) fn judge<P>(guard: &ReplyGuard<'_>, reply: &Envelope<P>) -> Result<(), Rejection> {
    #[cfg(feature = "mutants")]
    if let Some(verdict) = mutant_judge(guard, reply) {
        return verdict;
    }
    if reply.run != guard.run {
        return Err(Rejection::Unauthorized);
    }
    if guard.seen.contains(&reply.dedupe) {
        return Err(Rejection::Duplicate);
    }
    if guard.state.is_terminal() {
        return Err(Rejection::Late);
    }
    if reply.attempt != guard.attempt {
        return Err(Rejection::Late);
    }
    if reply.sender.role != Role::Worker || Some(reply.sender.agent) != guard.assigned {
        return Err(Rejection::Unauthorized);
    }
    if reply.state_version != guard.version {
        return Err(Rejection::Stale);
    }
    if !matches!(guard.state, TaskState::Running | TaskState::WaitingApproval) {
        return Err(Rejection::Late);
    }
    Ok(())
}

/// Seeded bugs (feature `mutants`): the reply rule without its terminal guard, or without its
/// attempt and version checks. `None` when no reply-rule mutant is active.
#[cfg(feature = "mutants")]
fn mutant_judge<P>(guard: &ReplyGuard<'_>, reply: &Envelope<P>) -> Option<Result<(), Rejection>> {
    use quorate_protocols::mutant::{is, Mutant};
    let authentic = reply.run == guard.run
        && !guard.seen.contains(&reply.dedupe)
        && reply.sender.role == Role::Worker
        && Some(reply.sender.agent) == guard.assigned;
    let current = reply.attempt == guard.attempt && reply.state_version == guard.version;
    let live = matches!(guard.state, TaskState::Running | TaskState::WaitingApproval);
    if is(Mutant::NoTerminalGuard) && authentic && current {
        return Some(Ok(()));
    }
    if is(Mutant::AcceptStale) && authentic && live {
        return Some(Ok(()));
    }
    None
}

impl super::SupervisorCore {
    /// Logs what a worker reported of its calls (in its order), for task `i`. Most replies
    /// carry none: an empty list is neither allocated nor freed.
    pub(super) fn record_calls(
        &mut self,
        now: u64,
        i: u32,
        calls: Vec<quorate_workers::CallEvent>,
    ) {
        for call in calls {
            self.record(now, Some(i), crate::EventKind::of_call(call));
        }
    }
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
            attempt: 1,
            version: Version::new(5),
            assigned: Some(agent),
            seen: &seen_before,
        };
        assert_eq!(judge(&guard, &ok), Ok(()));
        assert_eq!(
            judge(&guard, &reply(RunId::from_u128(9), agent, 1, 5)),
            Err(Rejection::Unauthorized)
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
            attempt: 1,
            version,
            assigned,
            seen: &seen,
        };
        assert_eq!(judge(&guard, &ok), Err(Rejection::Duplicate));
    }

    #[test]
    fn a_copy_of_the_final_reply_is_a_duplicate_not_late() {
        let (run, agent, mut seen) = setup();
        let accepted = reply(run, agent, 1, 5);
        seen.insert(accepted.dedupe);
        let guard = ReplyGuard {
            run,
            state: TaskState::Completed,
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
