//! [`IdempotencyRegistry`]: one side effect per [`ActionId`].

use quorate_protocols::{ActionEvent, ActionId, ActionState, ActionTransitionError, ParamDigest};
use serde::{Deserialize, Serialize};

use crate::retry::{update, Change, UpdateError};
use crate::{Store, StoreError};

/// What the registry knows about one action.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// Digest of the parameters the id is bound to.
    pub digest: ParamDigest,
    /// Where the action is.
    pub state: ActionState,
    /// The tool's answer once known.
    pub outcome: Option<serde_json::Value>,
    /// How many times it was sent.
    pub sends: u32,
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
/// assert_eq!(registry.begin(action, digest).await?, Begin::New);
/// assert!(matches!(registry.begin(action, digest).await?, Begin::Existing(_)));
/// let other = ParamDigest::of(&json!({"row": 7, "qty": 3}));
/// assert!(matches!(
///     registry.begin(action, other).await,
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
            "idem/{}/{}/{}",
            action.task, action.step, action.intent_version
        )
    }

    /// Binds `action` to `digest` on first sight; afterwards returns what is known, or refuses a
    /// different digest.
    pub async fn begin(
        &self,
        action: ActionId,
        digest: ParamDigest,
    ) -> Result<Begin, IdempotencyError> {
        let out = update(
            &self.store,
            &Self::key(action),
            |current: Option<&ActionRecord>| match current {
                None => Ok(Change::Write(
                    ActionRecord {
                        digest,
                        state: ActionState::Proposed,
                        outcome: None,
                        sends: 0,
                    },
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

    /// Applies `event` to the action's state (and records `outcome` if given); returns the new
    /// state. `Started` and `Retried` count a send.
    pub async fn transition(
        &self,
        action: ActionId,
        event: ActionEvent,
        outcome: Option<serde_json::Value>,
    ) -> Result<ActionState, IdempotencyError> {
        let out = update(
            &self.store,
            &Self::key(action),
            |current: Option<&ActionRecord>| {
                let mut r = current
                    .cloned()
                    .ok_or(IdempotencyError::UnknownAction { action })?;
                r.state = r
                    .state
                    .on(event)
                    .map_err(|source| IdempotencyError::Transition { action, source })?;
                if matches!(event, ActionEvent::Started | ActionEvent::Retried) {
                    r.sends += 1;
                }
                if outcome.is_some() {
                    r.outcome = outcome.clone();
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
}
