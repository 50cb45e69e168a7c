//! The in-core idempotency map: every action a task proposed past the gate, bound to its
//! parameter digest, with its [`ActionState`] and recorded output.
//!
//! It is kept per task across attempts on one worker, so a later attempt that proposes the same
//! [`ActionId`] gets the recorded answer instead of a second effect. It is pure and in memory;
//! its records are [`ActionRecord`]s of `quorate_state`, the same the store-backed
//! [`IdempotencyRegistry`](quorate_state::IdempotencyRegistry) keeps, so a worker that takes a
//! task over can [`import`](ActionBook::import) the book the registry read back.

use std::collections::BTreeMap;

use quorate_protocols::{ActionEvent, ActionId, ActionState, ActionTransitionError, ParamDigest};
use quorate_state::ActionRecord;

use crate::tool::ToolAnswer;

/// What [`ActionBook::resolve`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The action succeeded now.
    Succeeded,
    /// The action failed now.
    Failed,
    /// The action had succeeded before: this answer is a second effect.
    DuplicateEffect,
    /// The answer was lost ([`ToolAnswer::Lost`]): an action that was executing is now
    /// `outcome-unknown`; one in any other state is left as it was.
    Unknown,
}

/// An action event could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BookError {
    /// No action with this id was recorded.
    #[error("action {action} is not recorded")]
    UnknownAction {
        /// The id.
        action: ActionId,
    },
    /// The event does not fit the action's state.
    #[error("action {action}: {source}")]
    Transition {
        /// The id.
        action: ActionId,
        /// Why the state machine refused.
        source: ActionTransitionError,
    },
}

/// Actions by id, for one task.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActionBook {
    records: BTreeMap<ActionId, ActionRecord>,
}

impl ActionBook {
    /// What is known about `action`.
    #[must_use]
    pub fn get(&self, action: &ActionId) -> Option<&ActionRecord> {
        self.records.get(action)
    }

    /// All records, by id.
    pub fn iter(&self) -> impl Iterator<Item = (&ActionId, &ActionRecord)> {
        self.records.iter()
    }

    /// Records a new proposal (state `proposed`). Returns `false` and changes nothing if the id
    /// is recorded already.
    pub fn propose(&mut self, action: ActionId, tool: &str, digest: ParamDigest) -> bool {
        if self.records.contains_key(&action) {
            return false;
        }
        self.records.insert(
            action,
            ActionRecord::new(tool, digest, ActionState::Proposed),
        );
        true
    }

    /// Restores an action a crashed process sent to its tool (from its [`ActionIntent`](crate::ActionIntent)),
    /// as `outcome-unknown`: the gate queries the tool by id before anything else is done
    /// with it. Changes nothing if the id is recorded already.
    pub fn restore_unknown(&mut self, action: ActionId, tool: &str, digest: ParamDigest) {
        self.records
            .entry(action)
            .or_insert_with(|| ActionRecord::new(tool, digest, ActionState::OutcomeUnknown));
    }

    /// Takes over a task's book as another worker left it (read back from the store with
    /// [`IdempotencyRegistry::book`](quorate_state::IdempotencyRegistry::book)): every record
    /// is kept, and an action that was in flight (`validated` or `executing`: it may have been
    /// sent) becomes `outcome-unknown`, so the gate queries its tool by id before anything else
    /// is done with it. Ids already in this book keep their record here.
    pub fn import(&mut self, records: impl IntoIterator<Item = (ActionId, ActionRecord)>) {
        for (action, mut record) in records {
            if matches!(
                record.state,
                ActionState::Validated | ActionState::Executing
            ) {
                record.state = ActionState::OutcomeUnknown;
            }
            self.records.entry(action).or_insert(record);
        }
    }

    /// Applies `event` through [`ActionState::on`].
    pub fn apply(
        &mut self,
        action: ActionId,
        event: ActionEvent,
    ) -> Result<ActionState, BookError> {
        let record = self
            .records
            .get_mut(&action)
            .ok_or(BookError::UnknownAction { action })?;
        record
            .on(event)
            .map_err(|source| BookError::Transition { action, source })
    }

    /// Applies a tool's answer (to the call, or to a query by id): success moves the action to
    /// `succeeded` (from `executing`, or from `outcome-unknown` as *found committed*), an error to
    /// `failed`, a lost answer from `executing` to `outcome-unknown`. A second success for an action that already succeeded is a duplicate effect.
    pub fn resolve(
        &mut self,
        action: ActionId,
        answer: &ToolAnswer,
    ) -> Result<Resolved, BookError> {
        let record = self
            .records
            .get_mut(&action)
            .ok_or(BookError::UnknownAction { action })?;
        let unknown = record.state == ActionState::OutcomeUnknown;
        let (event, resolved) = match answer {
            ToolAnswer::Lost { .. } if record.state == ActionState::Executing => {
                (ActionEvent::TimedOut, Resolved::Unknown)
            }
            ToolAnswer::Lost { .. } => return Ok(Resolved::Unknown),
            ToolAnswer::Ok { .. } if record.state == ActionState::Succeeded => {
                record.successes += 1;
                return Ok(Resolved::DuplicateEffect);
            }
            ToolAnswer::Ok { .. } if unknown => (ActionEvent::FoundCommitted, Resolved::Succeeded),
            ToolAnswer::Ok { .. } => (ActionEvent::Succeeded, Resolved::Succeeded),
            ToolAnswer::Err { .. } if unknown => (ActionEvent::FoundAbsent, Resolved::Failed),
            ToolAnswer::Err { .. } => (ActionEvent::Failed, Resolved::Failed),
        };
        record
            .on(event)
            .map_err(|source| BookError::Transition { action, source })?;
        if let ToolAnswer::Ok { output, .. } = answer {
            record.output = Some(output.clone());
            record.successes += 1;
        }
        Ok(resolved)
    }

    /// Notes that a query found nothing committed under `action`.
    pub fn mark_absent(&mut self, action: ActionId) {
        if let Some(record) = self.records.get_mut(&action) {
            record.queried_absent = true;
        }
    }

    /// Forgets failed and rejected actions (they committed nothing), so a new attempt may
    /// propose their ids again. Succeeded and unknown ones stay.
    pub fn forget_ended_without_effect(&mut self) {
        self.records
            .retain(|_, r| !matches!(r.state, ActionState::Failed | ActionState::Rejected));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::TaskId;
    use serde_json::json;

    fn record(state: ActionState) -> ActionRecord {
        ActionRecord::new("save", ParamDigest::of(&json!({"row": 7})), state)
    }

    #[test]
    fn import_makes_in_flight_actions_unknown_and_keeps_the_rest() {
        let task = TaskId::from_u128(1);
        let id = |step| ActionId::new(task, step, 0);
        let mut done = record(ActionState::Succeeded);
        done.output = Some(json!("saved").into());
        let mut book = ActionBook::default();
        assert!(book.propose(id(4), "save", ParamDigest::of(&json!(0))));
        book.import([
            (id(0), record(ActionState::Validated)),
            (id(1), record(ActionState::Executing)),
            (id(2), done.clone()),
            (id(3), record(ActionState::OutcomeUnknown)),
            (id(4), record(ActionState::Executing)),
        ]);
        let state = |step| book.get(&id(step)).map(|r| r.state);
        assert_eq!(state(0), Some(ActionState::OutcomeUnknown));
        assert_eq!(state(1), Some(ActionState::OutcomeUnknown));
        assert_eq!(book.get(&id(2)), Some(&done));
        assert_eq!(state(3), Some(ActionState::OutcomeUnknown));
        // An id this book already had keeps its own record.
        assert_eq!(state(4), Some(ActionState::Proposed));
    }

    #[test]
    fn an_imported_unknown_action_is_resolved_by_its_query() {
        let action = ActionId::new(TaskId::from_u128(2), 0, 0);
        let mut book = ActionBook::default();
        book.import([(action, record(ActionState::Executing))]);
        let found = ToolAnswer::Ok {
            output: json!("saved").into(),
            changed: true,
            cost: quorate_protocols::Budget::ZERO,
        };
        assert_eq!(book.resolve(action, &found), Ok(Resolved::Succeeded));
        assert_eq!(
            book.get(&action).unwrap().output,
            Some(json!("saved").into())
        );
    }
}
