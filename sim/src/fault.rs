//! The faults a schedule can exercise, and per-schedule counters of them.

/// A fault the simulator injects (or a script plays).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// An envelope was lost.
    Drop,
    /// An envelope was delivered twice.
    Duplicate,
    /// An envelope was held back (short extra delay).
    Delay,
    /// An envelope was overtaken (held back past the attempt timeout).
    Reorder,
    /// A worker crashed mid-task.
    WorkerCrash,
    /// A tool call timed out and nothing had been committed.
    TimeoutBeforeCommit,
    /// A tool call timed out after it had committed.
    TimeoutAfterCommit,
    /// A tool answer arrived after its call had timed out.
    LateToolAnswer,
    /// A query by action id got no answer.
    QueryTimeout,
    /// The coordinator crashed and resumed from the store.
    CoordinatorCrash,
    /// The user cancelled the run.
    Cancel,
    /// A human decided about an approval.
    Approval,
    /// A record that a task's store precondition guards changed in the store mid-run.
    StoreChange,
    /// A worker's lease expired and it never came back (failover to another worker).
    WorkerLost,
    /// A worker was paused past its lease, then came back (failover, then fencing).
    WorkerPaused,
    /// The store refused a worker's write of a task's book: a newer attempt owns it.
    Fenced,
    /// A store precondition failed and the supervisor switched to the `[fallback]` plan.
    Replan,
}

impl Fault {
    /// Every fault, in report order.
    pub const ALL: [Fault; 17] = [
        Fault::Drop,
        Fault::Duplicate,
        Fault::Delay,
        Fault::Reorder,
        Fault::WorkerCrash,
        Fault::TimeoutBeforeCommit,
        Fault::TimeoutAfterCommit,
        Fault::LateToolAnswer,
        Fault::QueryTimeout,
        Fault::CoordinatorCrash,
        Fault::Cancel,
        Fault::Approval,
        Fault::StoreChange,
        Fault::WorkerLost,
        Fault::WorkerPaused,
        Fault::Fenced,
        Fault::Replan,
    ];

    /// A stable name for reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Fault::Drop => "drop",
            Fault::Duplicate => "duplicate",
            Fault::Delay => "delay",
            Fault::Reorder => "reorder",
            Fault::WorkerCrash => "worker-crash",
            Fault::TimeoutBeforeCommit => "tool-timeout-before-commit",
            Fault::TimeoutAfterCommit => "tool-timeout-after-commit",
            Fault::LateToolAnswer => "late-tool-answer",
            Fault::QueryTimeout => "query-timeout",
            Fault::CoordinatorCrash => "coordinator-crash-resume",
            Fault::Cancel => "cancel",
            Fault::Approval => "approval-decision",
            Fault::StoreChange => "guarded-record-changed",
            Fault::WorkerLost => "worker-lost",
            Fault::WorkerPaused => "worker-paused-past-lease",
            Fault::Fenced => "fenced-write",
            Fault::Replan => "replan-to-fallback",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// How often each fault happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts([u64; Fault::ALL.len()]);

impl FaultCounts {
    /// Counts one occurrence of `fault`.
    pub fn bump(&mut self, fault: Fault) {
        self.0[fault.index()] += 1;
    }

    /// Occurrences of `fault`.
    #[must_use]
    pub fn get(&self, fault: Fault) -> u64 {
        self.0[fault.index()]
    }

    /// Adds one schedule's counts as "schedules that exercised the fault" (0 or 1 each).
    pub fn add_presence(&mut self, schedule: &FaultCounts) {
        for (total, &n) in self.0.iter_mut().zip(schedule.0.iter()) {
            *total += u64::from(n > 0);
        }
    }
}
