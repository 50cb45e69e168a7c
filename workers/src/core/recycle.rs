//! The boxes a worker's messages travel in, reused: the supervisor hands over the boxes of
//! replies it has read (with the next assignments), the worker writes its replies into them,
//! and hands back the boxes of the assignments whose attempts ended (with its replies). A
//! task's two messages then allocate nothing once the run is under way (see [`BoxPool`]).
//! Reuse decides nothing: a core that is never handed a box allocates.

use quorate_protocols::wire::{Assignment, Report};
#[cfg(doc)]
use quorate_protocols::BoxPool;
use quorate_protocols::Envelope;

use super::WorkerCore;

impl WorkerCore {
    /// Keeps the boxes of replies the supervisor has read, for this worker's next replies to
    /// be written into.
    pub fn reuse_reply_boxes(&mut self, boxes: impl IntoIterator<Item = Box<Envelope<Report>>>) {
        self.reply_boxes.give_all(boxes);
    }

    /// The boxes of the assignments whose attempts ended since the last call, to hand back to
    /// the supervisor (they may still hold the assignment they carried).
    #[must_use]
    #[allow(clippy::vec_box)]
    pub fn take_assignment_boxes(&mut self) -> Vec<Box<Envelope<Assignment>>> {
        self.assignment_boxes.take(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use quorate_protocols::wire::{Assignment, Outcome, Report};
    use quorate_protocols::{Budget, Capabilities, Envelope, NodeId, ResultKind, RunId, TaskId};

    use crate::agent::{Agent, AgentContext, AgentRegistry, Proposal};
    use crate::testing::{ids, supervisor};
    use crate::{Effect, ToolRegistry, WorkerConfig, WorkerCore};

    /// Answers at once.
    struct Done;

    impl Agent for Done {
        fn propose(&mut self, _: &AgentContext<'_>) -> Proposal {
            Proposal::Finish {
                kind: ResultKind::Suggestion,
                value: serde_json::json!(1).into(),
                evidence: vec![],
            }
        }
    }

    fn assignment(task: u128) -> Box<Envelope<Assignment>> {
        let assignment = Assignment {
            node: NodeId::new("n").unwrap(),
            role: "worker".into(),
            goal: None,
            inputs: Default::default(),
            capabilities: Capabilities::default(),
            budget: Budget::steps(2),
            evidence_text: vec![],
            preconditions: vec![],
        };
        let (run, task) = (RunId::from_u128(9), TaskId::from_u128(task));
        Box::new(Envelope::new(
            run,
            task,
            supervisor(),
            assignment,
            &mut ids(),
        ))
    }

    #[test]
    fn a_reply_is_written_into_a_handed_over_box_and_the_assignment_s_box_is_handed_back() {
        let agents = AgentRegistry::new().with_fallback(|_: &Assignment| Box::new(Done) as _);
        let me = quorate_protocols::AgentId::from_u128(2);
        let mut core = WorkerCore::new(
            me,
            WorkerConfig::default(),
            agents,
            ToolRegistry::new(),
            ids(),
        );
        // A box of a reply the supervisor has read (what is left in it is stale).
        let stale = assignment(1).reply(
            supervisor(),
            ResultKind::Suggestion,
            Report {
                outcome: Outcome::Cancelled,
                spent: Budget::ZERO,
                actions: Default::default(),
                calls: vec![],
            },
            &mut ids(),
        );
        let spare = Box::new(stale);
        let spare_at = std::ptr::from_ref(&*spare);
        core.reuse_reply_boxes([spare]);

        let assigned = assignment(2);
        let assigned_at = std::ptr::from_ref(&*assigned);
        core.handle_assignment(0, assigned).unwrap();
        let mut replies = Vec::new();
        while let Some(effect) = core.poll_effect() {
            if let Effect::Reply(reply) = effect {
                replies.push(reply);
            }
        }
        assert_eq!(replies.len(), 1);
        assert_eq!(
            std::ptr::from_ref(&*replies[0]),
            spare_at,
            "the handed-over box"
        );
        assert_eq!(
            replies[0].task,
            TaskId::from_u128(2),
            "holding the new reply"
        );
        assert!(matches!(replies[0].payload.outcome, Outcome::Answer { .. }));

        let back = core.take_assignment_boxes();
        assert_eq!(back.len(), 1, "the ended attempt's assignment");
        assert_eq!(std::ptr::from_ref(&*back[0]), assigned_at);
        assert!(core.take_assignment_boxes().is_empty(), "handed back once");
    }
}
