//! One peer's record of one task, and which replies of its own worker it accepts.

use quorate_protocols::wire::SharedEvidence;
use quorate_protocols::{Budget, Envelope, RunId, Sender, TaskId, TaskState};

use crate::event::Rejection;
use crate::peer::Terminal;
use crate::rules::{judge, Parked, ReplyGuard};

/// A peer's view of one task.
#[derive(Debug)]
pub(crate) struct PeerTask {
    pub(crate) id: TaskId,
    /// The state in this peer's view (`running` also for tasks another peer claimed).
    pub(crate) state: TaskState,
    pub(crate) deps_left: usize,
    /// Waiting for the shell to check the task's store preconditions.
    pub(crate) checking: bool,
    /// This peer tried to claim the task (a claim is tried once: the key is written once).
    pub(crate) claim_tried: bool,
    /// This peer won the claim.
    pub(crate) mine: bool,
    /// This peer's worker is working on the current attempt.
    pub(crate) worker_live: bool,
    /// A terminal record for the task is being committed by this peer.
    pub(crate) committing: bool,
    /// The committed record and its store version, once known.
    pub(crate) terminal: Option<(Terminal, u64)>,
    pub(crate) attempt: u32,
    /// The attempt this peer raised the task's fence to (0: none yet; fenced cores only).
    pub(crate) fence: u32,
    /// Waiting for the shell to raise the task's fence ([`crate::peer::PeerEffect::RaiseFence`]).
    pub(crate) raising: bool,
    pub(crate) version: u64,
    pub(crate) seen: crate::rules::SeenKeys,
    pub(crate) result: Option<(quorate_protocols::Payload, SharedEvidence)>,
    pub(crate) allocated: bool,
    pub(crate) closed: bool,
    pub(crate) granted: Budget,
    pub(crate) spent: Budget,
    /// The action parked for a human and its `Quiet` handshake: the task settles as
    /// waiting-approval once nothing else of it works.
    pub(crate) parked: Parked,
    /// CASes on the root account tried in a row for the current change (allocation or return).
    pub(crate) root_tries: u32,
    /// Commits of the terminal record that found it vanished, in a row.
    pub(crate) commit_tries: u32,
    /// The attempt whose earlier replies (an approval request, a quiet notice) put call
    /// outputs on record, and those calls: what a later answer of the attempt may cite.
    pub(crate) recorded: (u32, Vec<quorate_protocols::ActionId>),
}

impl PeerTask {
    pub(crate) fn new(id: TaskId, deps: usize) -> Self {
        Self {
            id,
            state: TaskState::Pending,
            deps_left: deps,
            checking: false,
            claim_tried: false,
            mine: false,
            worker_live: false,
            committing: false,
            terminal: None,
            attempt: 0,
            fence: 0,
            raising: false,
            version: 0,
            seen: crate::rules::SeenKeys::default(),
            result: None,
            allocated: false,
            closed: false,
            granted: Budget::ZERO,
            spent: Budget::ZERO,
            parked: Parked::default(),
            root_tries: 0,
            commit_tries: 0,
            recorded: (0, Vec::new()),
        }
    }

    /// `true` once the task's terminal record is known here.
    pub(crate) fn settled(&self) -> bool {
        self.terminal.is_some()
    }

    /// `true` once an accepted reply arrived for the task.
    pub(crate) fn reported(&self) -> bool {
        !self.seen.is_empty()
    }
}

/// The reply rules ([`judge`]) for a peer's own worker: a task whose terminal record is committed
/// is settled, and only this peer's worker is assigned.
pub(crate) fn judge_reply<P>(
    run: RunId,
    worker: Sender,
    task: &PeerTask,
    reply: &Envelope<P>,
) -> Result<(), Rejection> {
    #[cfg(feature = "mutants")]
    if quorate_protocols::mutant::is(quorate_protocols::mutant::Mutant::PeerAcceptsSettled)
        && task.settled()
        && task.mine
        && reply.run == run
        && reply.sender == worker
        && reply.attempt == task.attempt
        && !task.seen.contains(&reply.dedupe)
    {
        return Ok(());
    }
    let guard = ReplyGuard {
        run,
        state: task.state,
        settled: task.settled(),
        attempt: task.attempt,
        version: quorate_protocols::Version::new(task.version),
        assigned: task.mine.then_some(worker.agent),
        seen: &task.seen,
    };
    judge(&guard, reply)
}
