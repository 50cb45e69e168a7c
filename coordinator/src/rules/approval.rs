//! A task parked for a human's decision, and the `Quiet` handshake that tells when nothing else
//! of it is working.
//!
//! An approval request parks its action. A request of the task's own attempt leaves the task
//! idle at once. A delegated sub-task's request does not: the task's other sub-tasks may still be
//! working, until the task's worker says `Quiet` for that action. The transport may reorder, so a
//! `Quiet` can come before its request; it is kept for that request. Star and peer mode read the
//! same answer: the supervisor stops the run as waiting-approval only when no parked task is
//! [`not_alone`](Parked::not_alone); a peer settles the task as waiting-approval when
//! [`request`](Parked::request) or [`quiet`](Parked::quiet) says it became idle.

use quorate_protocols::ActionId;

/// One task's parked approval and its `Quiet` handshake. See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Parked {
    /// The action parked for a human's decision.
    action: Option<ActionId>,
    /// The parked action is a delegated sub-task's, and the task's other sub-tasks may still be
    /// working (until its worker says `Quiet`). Set anew by every request.
    not_alone: bool,
    /// A `Quiet` that came before its request, for that request.
    quiet_early: Option<ActionId>,
}

impl Parked {
    /// The task's worker asks a human about `action` (a delegated sub-task's when `sub_task`),
    /// which is parked. `true` if the task is idle now: its own request, or a sub-task's whose
    /// `Quiet` came first.
    pub(crate) fn request(&mut self, action: ActionId, sub_task: bool) -> bool {
        self.action = Some(action);
        let quiet = self.quiet_early.take_if(|a| *a == action).is_some();
        self.not_alone = sub_task && !quiet;
        !self.not_alone
    }

    /// The task's worker says nothing else of the task works while `action` waits. `true` if
    /// that made the parked task idle; a `Quiet` that overtook its request is kept for it.
    pub(crate) fn quiet(&mut self, action: ActionId) -> bool {
        if self.action == Some(action) {
            std::mem::replace(&mut self.not_alone, false)
        } else {
            self.quiet_early = Some(action);
            false
        }
    }

    /// The parked action, which stops being parked (a decision was made).
    pub(crate) fn take(&mut self) -> Option<ActionId> {
        self.action.take()
    }

    /// Whether the parked action is a sub-task's while other sub-tasks may still work
    /// (meaningful while the task waits for approval).
    pub(crate) fn not_alone(&self) -> bool {
        self.not_alone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::TaskId;

    fn action(step: u32) -> ActionId {
        ActionId::new(TaskId::from_u128(1), step, 1)
    }

    #[test]
    fn an_own_request_is_idle_at_once() {
        let mut p = Parked::default();
        assert!(p.request(action(1), false));
        assert!(!p.not_alone());
        assert!(!p.quiet(action(1)), "already idle: nothing changes");
        assert_eq!(p.take(), Some(action(1)));
        assert_eq!(p.take(), None, "decided once");
    }

    #[test]
    fn a_sub_task_request_waits_for_its_quiet() {
        let mut p = Parked::default();
        assert!(!p.request(action(1), true));
        assert!(p.not_alone());
        assert!(!p.quiet(action(2)), "another action's quiet does not count");
        assert!(p.not_alone());
        assert!(p.quiet(action(1)));
        assert!(!p.not_alone());
        assert!(!p.quiet(action(1)), "once");
    }

    #[test]
    fn a_quiet_that_overtakes_its_request_is_kept_for_that_request() {
        let mut p = Parked::default();
        assert!(!p.quiet(action(1)));
        assert!(!p.request(action(2), true), "kept for action 1 only");
        assert!(p.request(action(1), true), "its quiet came first");
        assert!(!p.request(action(1), true), "and was used up");
    }
}
