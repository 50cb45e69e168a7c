//! The in-core idempotency map: every action a task proposed past the gate, bound to its
//! parameter digest, with its [`ActionState`] and recorded output.
//!
//! It is kept per task across attempts on one worker, so a later attempt that proposes the same
//! [`ActionId`] gets the recorded answer instead of a second effect. It is pure and in memory;
//! the persistent `quorate_state::IdempotencyRegistry` can back it later without changing the
//! gate.

use std::collections::BTreeMap;

use quorate_protocols::{ActionEvent, ActionId, ActionState, ActionTransitionError, ParamDigest};

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
}

/// What the book knows about one action.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionRecord {
    /// The tool.
    pub tool: String,
    /// Digest of the parameters the id is bound to.
    pub digest: ParamDigest,
    /// Where the action is in its life.
    pub state: ActionState,
    /// The recorded output once it succeeded.
    pub output: Option<serde_json::Value>,
    /// A query by id found nothing committed (so a retry may be considered).
    pub queried_absent: bool,
    /// Successful answers seen for this id (more than one is a duplicate effect).
    pub successes: u32,
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
            ActionRecord {
                tool: tool.to_owned(),
                digest,
                state: ActionState::Proposed,
                output: None,
                queried_absent: false,
                successes: 0,
            },
        );
        true
    }

    /// Restores an action a crashed process sent to its tool (from its [`ActionIntent`](crate::ActionIntent)),
    /// as `outcome-unknown`: the gate queries the tool by id before anything else is done
    /// with it. Changes nothing if the id is recorded already.
    pub fn restore_unknown(&mut self, action: ActionId, tool: &str, digest: ParamDigest) {
        self.records.entry(action).or_insert_with(|| ActionRecord {
            tool: tool.to_owned(),
            digest,
            state: ActionState::OutcomeUnknown,
            output: None,
            queried_absent: false,
            successes: 0,
        });
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
        let next = record
            .state
            .on(event)
            .map_err(|source| BookError::Transition { action, source })?;
        record.state = next;
        if next == ActionState::Executing {
            record.queried_absent = false;
        }
        Ok(next)
    }

    /// Applies a tool's answer (to the call, or to a query by id): success moves the action to
    /// `succeeded` (from `executing`, or from `outcome-unknown` as *found committed*), an error to
    /// `failed`. A second success for an action that already succeeded is a duplicate effect.
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
            ToolAnswer::Ok { .. } if record.state == ActionState::Succeeded => {
                record.successes += 1;
                return Ok(Resolved::DuplicateEffect);
            }
            ToolAnswer::Ok { .. } if unknown => (ActionEvent::FoundCommitted, Resolved::Succeeded),
            ToolAnswer::Ok { .. } => (ActionEvent::Succeeded, Resolved::Succeeded),
            ToolAnswer::Err { .. } if unknown => (ActionEvent::FoundAbsent, Resolved::Failed),
            ToolAnswer::Err { .. } => (ActionEvent::Failed, Resolved::Failed),
        };
        record.state = record
            .state
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
