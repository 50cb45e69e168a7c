//! [`IdempotencyRegistry`]: one side effect per [`ActionId`], in the store; and
//! [`ActionRecord`], what is known about one action, kept the same way in a worker's in-memory
//! action book (`quorate_workers::ActionBook`) and in the registry.
//!
//! The registry is the book's store-backed form: a worker writes a task's records before each
//! side-effecting call, and a worker that takes the task over reads them back with
//! [`IdempotencyRegistry::book`] (for failover across machines, where the lost worker's book
//! would otherwise be lost with it).

use quorate_protocols::{
    ActionEvent, ActionId, ActionState, ActionTransitionError, ParamDigest, TaskId,
};
use serde::{Deserialize, Serialize};

use crate::retry::{update, Change, UpdateError};
use crate::{Store, StoreError};

/// What is known about one action: its tool, the parameter digest its id is bound to, where it
/// is in its life, and what came of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The tool.
    pub tool: String,
    /// Digest of the parameters the id is bound to.
    pub digest: ParamDigest,
    /// Where the action is in its life.
    pub state: ActionState,
    /// The recorded output once it succeeded (shared with the call's receipt).
    pub output: Option<quorate_protocols::Payload>,
    /// A query by id found nothing committed (so a retry may be considered).
    pub queried_absent: bool,
    /// Successful answers seen for this id (more than one is a duplicate effect).
    pub successes: u32,
    /// How many times the call was sent to its tool (`Started` and `Retried`).
    pub sends: u32,
}

impl ActionRecord {
    /// A record of `tool` bound to `digest`, at `state`, with nothing seen yet.
    #[must_use]
    pub fn new(tool: &str, digest: ParamDigest, state: ActionState) -> Self {
        Self {
            tool: tool.to_owned(),
            digest,
            state,
            output: None,
            queried_absent: false,
            successes: 0,
            sends: 0,
        }
    }

    /// Applies `event` through [`ActionState::on`]: a send (`Started`, `Retried`) is counted
    /// and, as the call executes again, clears an earlier *queried absent*. Changes nothing on
    /// a refused event.
    pub fn on(&mut self, event: ActionEvent) -> Result<ActionState, ActionTransitionError> {
        let next = self.state.on(event)?;
        self.state = next;
        if matches!(event, ActionEvent::Started | ActionEvent::Retried) {
            self.sends += 1;
        }
        if next == ActionState::Executing {
            self.queried_absent = false;
        }
        Ok(next)
    }
}

/// The result of [`IdempotencyRegistry::begin`].
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub enum Begin {
    /// First time this action is seen: it is recorded as `proposed`.
    New,
    /// Seen before with the same parameters: here is what is known (a succeeded action must not
    /// run again; an outcome-unknown one must be queried first).
    Existing(ActionRecord),
}

/// An idempotency check failed.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// The id was used before with other parameters. Refused: an `ActionId` names exactly one
    /// intended effect. Retrying cannot help; propose a new intent version instead.
    #[error("action {action} is bound to parameters {recorded}; refused reuse with {offered}")]
    DigestMismatch {
        /// The action.
        action: ActionId,
        /// The digest it is bound to.
        recorded: ParamDigest,
        /// The digest offered now.
        offered: ParamDigest,
    },
    /// The action was never begun.
    #[error("action {action} is unknown")]
    UnknownAction {
        /// The action.
        action: ActionId,
    },
    /// The event does not fit the action's state.
    #[error("action {action}: {source}")]
    Transition {
        /// The action.
        action: ActionId,
        /// Why.
        source: ActionTransitionError,
    },
    /// A key under the registry's prefix does not name an action (`idem/TASK/STEP/INTENT`):
    /// something else wrote there. Retrying cannot help.
    #[error("key {key} under the idempotency prefix names no action")]
    BadKey {
        /// The key.
        key: String,
    },
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Lost the CAS race too often.
    #[error("gave up after {attempts} CAS conflicts")]
    Contention {
        /// Conflicts seen.
        attempts: u32,
    },
}

impl<E: Into<IdempotencyError>> From<UpdateError<E>> for IdempotencyError {
    fn from(e: UpdateError<E>) -> Self {
        match e {
            UpdateError::Refused(e) => e.into(),
            UpdateError::Store(e) => IdempotencyError::Store(e),
            UpdateError::Contention { attempts } => IdempotencyError::Contention { attempts },
        }
    }
}

/// Maps each [`ActionId`] to its parameter digest, state and outcome, in any [`Store`].
///
/// ```
/// use quorate_protocols::{ActionEvent, ActionId, ParamDigest, TaskId};
/// use quorate_state::{Begin, IdempotencyError, IdempotencyRegistry, MemoryStore};
/// use serde_json::json;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let registry = IdempotencyRegistry::new(MemoryStore::new());
/// let action = ActionId::new(TaskId::from_u128(1), 3, 0);
/// let digest = ParamDigest::of(&json!({"row": 7, "qty": 2}));
/// assert_eq!(registry.begin(action, "save", digest).await?, Begin::New);
/// assert!(matches!(registry.begin(action, "save", digest).await?, Begin::Existing(_)));
/// let other = ParamDigest::of(&json!({"row": 7, "qty": 3}));
/// assert!(matches!(
///     registry.begin(action, "save", other).await,
///     Err(IdempotencyError::DigestMismatch { .. })
/// ));
/// # Ok::<(), IdempotencyError>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct IdempotencyRegistry<S> {
    store: S,
}

impl<S: Store<ActionRecord>> IdempotencyRegistry<S> {
    /// A registry kept in `store`.
    pub fn new(store: S) -> Self {
        Self { store }
    }

    fn key(action: ActionId) -> String {
        format!(
            "{}{}/{}",
            Self::task_prefix(action.task),
            action.step,
            action.intent_version
        )
    }

    fn task_prefix(task: TaskId) -> String {
        format!("idem/{task}/")
    }

    /// Binds `action` (a call of `tool`) to `digest` on first sight; afterwards returns what is
    /// known, or refuses a different digest.
    pub async fn begin(
        &self,
        action: ActionId,
        tool: &str,
        digest: ParamDigest,
    ) -> Result<Begin, IdempotencyError> {
        let out = update(
            &self.store,
            &Self::key(action),
            |current: Option<&ActionRecord>| match current {
                None => Ok(Change::Write(
                    ActionRecord::new(tool, digest, ActionState::Proposed),
                    Begin::New,
                )),
                Some(r) if r.digest == digest => Ok(Change::Keep(Begin::Existing(r.clone()))),
                Some(r) => Err(IdempotencyError::DigestMismatch {
                    action,
                    recorded: r.digest,
                    offered: digest,
                }),
            },
        )
        .await?;
        Ok(out.value)
    }

    /// Applies `event` to the action ([`ActionRecord::on`]; `Started` and `Retried` count a
    /// send) and records `output` if given; returns the new state.
    pub async fn transition(
        &self,
        action: ActionId,
        event: ActionEvent,
        output: Option<quorate_protocols::Payload>,
    ) -> Result<ActionState, IdempotencyError> {
        let out = update(
            &self.store,
            &Self::key(action),
            |current: Option<&ActionRecord>| {
                let mut r = current
                    .cloned()
                    .ok_or(IdempotencyError::UnknownAction { action })?;
                r.on(event)
                    .map_err(|source| IdempotencyError::Transition { action, source })?;
                if output.is_some() {
                    r.output = output.clone();
                }
                let state = r.state;
                Ok::<_, IdempotencyError>(Change::Write(r, state))
            },
        )
        .await?;
        Ok(out.value)
    }

    /// What is known about `action`, if anything.
    pub async fn record(&self, action: ActionId) -> Result<Option<ActionRecord>, IdempotencyError> {
        Ok(self.store.get(&Self::key(action)).await?.map(|v| v.value))
    }

    /// Every action recorded for `task`, by id: the task's action book as the store has it,
    /// for a worker that takes the task over (`quorate_workers::ActionBook::import`).
    pub async fn book(
        &self,
        task: TaskId,
    ) -> Result<Vec<(ActionId, ActionRecord)>, IdempotencyError> {
        let prefix = Self::task_prefix(task);
        let mut out = Vec::new();
        for (key, versioned) in self.store.scan(&prefix).await? {
            let mut parts = key[prefix.len()..].split('/');
            let (Some(step), Some(intent), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(IdempotencyError::BadKey { key });
            };
            let (Ok(step), Ok(intent_version)) = (step.parse(), intent.parse()) else {
                return Err(IdempotencyError::BadKey { key });
            };
            out.push((ActionId::new(task, step, intent_version), versioned.value));
        }
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use serde_json::json;

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn book_reads_back_one_tasks_records_in_id_order() {
        run(async {
            let registry = IdempotencyRegistry::new(MemoryStore::new());
            let task = TaskId::from_u128(1);
            let digest = ParamDigest::of(&json!({"row": 7}));
            // Step 10 sorts before step 2 as a key; the book is in id order.
            for step in [10, 2] {
                let action = ActionId::new(task, step, 0);
                assert_eq!(
                    registry.begin(action, "save", digest).await.unwrap(),
                    Begin::New
                );
            }
            let sent = ActionId::new(task, 2, 0);
            for event in [ActionEvent::GatePassed, ActionEvent::Started] {
                registry.transition(sent, event, None).await.unwrap();
            }
            let other = ActionId::new(TaskId::from_u128(2), 0, 0);
            let _ = registry.begin(other, "save", digest).await.unwrap();

            let book = registry.book(task).await.unwrap();
            let ids: Vec<ActionId> = book.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, [sent, ActionId::new(task, 10, 0)]);
            let (_, record) = &book[0];
            assert_eq!(record.tool, "save");
            assert_eq!(record.state, ActionState::Executing);
            assert_eq!(record.sends, 1);
            assert_eq!(book[1].1.state, ActionState::Proposed);
        });
    }

    #[test]
    fn book_refuses_a_key_that_names_no_action() {
        run(async {
            let store = MemoryStore::new();
            let task = TaskId::from_u128(3);
            let stray = format!("idem/{task}/not-a-step/0");
            let record =
                ActionRecord::new("save", ParamDigest::of(&json!(1)), ActionState::Proposed);
            assert!(store
                .cas(&stray, None, record)
                .await
                .unwrap()
                .is_committed());
            let err = IdempotencyRegistry::new(store)
                .book(task)
                .await
                .unwrap_err();
            assert!(matches!(err, IdempotencyError::BadKey { key } if key == stray));
        });
    }

    #[test]
    fn a_send_is_counted_and_clears_queried_absent() {
        let mut record =
            ActionRecord::new("save", ParamDigest::of(&json!(1)), ActionState::Validated);
        assert_eq!(record.on(ActionEvent::Started), Ok(ActionState::Executing));
        assert_eq!(
            record.on(ActionEvent::TimedOut),
            Ok(ActionState::OutcomeUnknown)
        );
        record.queried_absent = true;
        assert_eq!(record.on(ActionEvent::Retried), Ok(ActionState::Executing));
        assert!(!record.queried_absent);
        assert_eq!(record.sends, 2);
        // A refused event changes nothing.
        let before = record.clone();
        assert!(record.on(ActionEvent::GatePassed).is_err());
        assert_eq!(record, before);
    }
}
