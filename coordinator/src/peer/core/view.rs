//! What the core tells of the run as this peer sees it: the run, its plan, each task's state,
//! result, id, claim and execution, and this peer's counters (read-only getters).

use quorate_protocols::wire::ActionCounts;
use quorate_protocols::{Plan, RunId, TaskId, TaskState};

use super::PeerCore;
use crate::MessageCounts;

impl PeerCore {
    /// The run.
    pub fn run(&self) -> RunId {
        self.run
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// This peer's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// State of node `i` in this peer's view.
    pub fn task_state(&self, i: u32) -> TaskState {
        self.tasks[i as usize].state
    }

    /// The accepted result of node `i`, as known here.
    pub fn result(&self, i: u32) -> Option<&serde_json::Value> {
        self.tasks[i as usize]
            .result
            .as_ref()
            .map(|(v, _)| v.value())
    }

    /// The run-wide task id of node `i` (all peers give a task the same one).
    pub fn task_id(&self, i: u32) -> TaskId {
        self.tasks[i as usize].id
    }

    /// `true` if this peer won node `i`'s claim.
    pub fn claimed(&self, i: u32) -> bool {
        self.tasks[i as usize].mine
    }

    /// `(attempts, granted, spent)` of node `i` if this peer ran it.
    pub fn execution(
        &self,
        i: u32,
    ) -> Option<(u32, quorate_protocols::Budget, quorate_protocols::Budget)> {
        let t = &self.tasks[i as usize];
        t.mine.then_some((t.attempt, t.granted, t.spent))
    }

    /// This peer's message counters (broadcasts sent count `n - 1` each).
    pub fn messages(&self) -> MessageCounts {
        self.messages
    }

    /// What this peer's worker did, summed over accepted replies.
    pub fn actions(&self) -> ActionCounts {
        self.actions
    }
}
