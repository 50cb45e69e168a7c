//! The boxes the supervisor's messages travel in, reused: a worker hands back its assignments'
//! boxes with its replies, and the supervisor hands its replies' boxes on to the workers with
//! the next assignments, so a task's two messages allocate nothing once the run is under way
//! (see [`BoxPool`]). Reuse decides nothing: a core that is never handed a box allocates.

use quorate_protocols::wire::{Assignment, Report};
use quorate_protocols::{BoxPool, Envelope};

use super::SupervisorCore;

/// A supervisor core's pools.
#[derive(Debug)]
pub(crate) struct Boxes {
    /// For the next dispatches (filled only by [`SupervisorCore::reuse_assignment_boxes`]).
    pub(crate) assignments: BoxPool<Envelope<Assignment>>,
    /// Replies read, for the workers. The actor takes them after every message it hands the
    /// core, so a few batches' worth is plenty; a driver that never takes them (the
    /// simulator's, the tests') keeps no more than that.
    pub(crate) replies: BoxPool<Envelope<Report>>,
}

impl Default for Boxes {
    fn default() -> Self {
        Self {
            assignments: BoxPool::default(),
            replies: BoxPool::with_cap(256),
        }
    }
}

impl SupervisorCore {
    /// Keeps the boxes of assignments a worker is done with (those its reply batch handed
    /// back) for the next dispatches to write into.
    pub fn reuse_assignment_boxes(
        &mut self,
        boxes: impl IntoIterator<Item = Box<Envelope<Assignment>>>,
    ) {
        self.boxes.assignments.give_all(boxes);
    }

    /// Moves the boxes of the replies this core has handled to `spare`, from which the shell
    /// hands them to the workers (with their next assignments) to write replies into.
    pub fn pass_reply_boxes(&mut self, spare: &mut BoxPool<Envelope<Report>>) {
        self.boxes.replies.pass_to(spare);
    }
}

#[cfg(test)]
mod tests {
    use quorate_protocols::wire::{Assignment, Outcome, Report};
    use quorate_protocols::{
        BoxPool, Budget, Capabilities, Envelope, EvidenceRef, IdSource, NodeId, NodeSpec, PlanSpec,
        ResultKind,
    };

    use crate::core::test_core::{one_worker_core, WORKER};
    use crate::{SupervisorConfig, SupervisorCore, SupervisorEffect};

    fn core() -> SupervisorCore {
        let spec = PlanSpec {
            budget: Budget::steps(10),
            nodes: vec![NodeSpec::named("a").with_budget(Budget::steps(2))],
            ..PlanSpec::default()
        };
        one_worker_core(spec, SupervisorConfig::default(), 4)
    }

    /// An assignment envelope of another run, as a worker hands back a spent one.
    fn spent_assignment(ids: &mut IdSource) -> Box<Envelope<Assignment>> {
        let assignment = Assignment {
            node: NodeId::new("old").unwrap(),
            role: "worker".into(),
            goal: None,
            inputs: Default::default(),
            capabilities: Capabilities::default(),
            budget: Budget::steps(1),
            preconditions: vec![],
            evidence_text: vec!["stale".into()],
        };
        let (run, task) = (ids.run_id(), ids.task_id());
        Box::new(Envelope::new(run, task, WORKER, assignment, ids))
    }

    #[test]
    fn a_dispatch_writes_into_a_handed_back_box_and_a_read_reply_s_box_is_passed_on_empty() {
        let mut ids = IdSource::seeded(7);
        let mut core = core();
        let spare = spent_assignment(&mut ids);
        let spare_at = std::ptr::from_ref(&*spare);
        core.reuse_assignment_boxes([spare]);
        core.start(0);
        let mut sent = None;
        while let Some(effect) = core.poll_effect() {
            if let SupervisorEffect::Dispatch { envelope, .. } = effect {
                sent = Some(envelope);
            }
        }
        let sent = sent.expect("node a dispatched");
        assert_eq!(std::ptr::from_ref(&*sent), spare_at, "the handed-back box");
        assert_eq!(
            sent.payload.node.as_str(),
            "a",
            "holding the new assignment"
        );
        assert!(sent.payload.evidence_text.is_empty());

        let reply = sent.reply(
            WORKER,
            ResultKind::Suggestion,
            Report {
                outcome: Outcome::Answer {
                    value: serde_json::json!(1).into(),
                    receipts: vec![],
                },
                spent: Budget::steps(1),
                actions: Default::default(),
                calls: vec![],
            },
            &mut ids,
        );
        let mut duplicate = Box::new(reply.clone());
        duplicate.evidence = vec![EvidenceRef::Input {
            node: NodeId::new("a").unwrap(),
        }];
        let duplicate_at = std::ptr::from_ref(&*duplicate);
        let reply = Box::new(reply);
        let reply_at = std::ptr::from_ref(&*reply);
        assert_eq!(core.handle_report(1, reply), Ok(()));
        // A refused reply's box is kept too, without what the reply owned.
        assert!(core.handle_report(2, duplicate).is_err(), "a duplicate");
        let mut spare = BoxPool::default();
        core.pass_reply_boxes(&mut spare);
        let passed = spare.take(8);
        assert_eq!(passed.len(), 2);
        assert_eq!(
            std::ptr::from_ref(&*passed[0]),
            reply_at,
            "the reply's own box"
        );
        assert_eq!(std::ptr::from_ref(&*passed[1]), duplicate_at);
        for kept in &passed {
            assert_eq!(
                kept.payload.outcome,
                Outcome::Cancelled,
                "its report taken out"
            );
            assert_eq!(kept.payload.calls.capacity(), 0);
            assert_eq!(kept.evidence.capacity(), 0);
        }
    }
}
