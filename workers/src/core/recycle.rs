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
    use quorate_protocols::wire::{Outcome, Report};
    use quorate_protocols::{Budget, Envelope, ResultKind, RunId, TaskId};
    use serde_json::json;

    use crate::testing::{ids, script, supervisor, Driver};
    use crate::Effect;

    #[test]
    fn a_reply_is_written_into_a_handed_over_box_and_the_assignment_s_box_is_handed_back() {
        // A worker whose agent answers at once.
        let mut d = Driver::new(script(json!([{ "do": "answer", "value": 1 }])), vec![]);
        let assignment = |task: u128| {
            Box::new(Envelope::new(
                RunId::from_u128(9),
                TaskId::from_u128(task),
                supervisor(),
                Driver::assignment(&[], Budget::steps(2)),
                &mut ids(),
            ))
        };
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
        d.core.reuse_reply_boxes([spare]);

        let assigned = assignment(2);
        let assigned_at = std::ptr::from_ref(&*assigned);
        d.core.handle_assignment(0, assigned).unwrap();
        let mut replies = Vec::new();
        while let Some(effect) = d.core.poll_effect() {
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

        let back = d.core.take_assignment_boxes();
        assert_eq!(back.len(), 1, "the ended attempt's assignment");
        assert_eq!(std::ptr::from_ref(&*back[0]), assigned_at);
        assert!(
            d.core.take_assignment_boxes().is_empty(),
            "handed back once"
        );
    }
}
