//! One error enum per operation (access rules in them are boxed to keep `Result`s small). Every variant names the input that was wrong. Retrying the same
//! input does not help, except after `CommitError::Contention` (a CAS conflict is not an error: it
//! is re-read and merged; only losing too often in a row is).

use quorate_protocols::{AccessRule, EvidenceStatus, RecordId};
use quorate_state::UpdateError;

use crate::NeedId;

/// [`write`](crate::write()) refused an observation. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The observation asks for an access rule wider than the writer's own authority. Narrow the
    /// record's access (or write with an authority that covers it).
    #[error("writer scope {writer:?} cannot grant access {record_access:?}")]
    ScopeViolation {
        /// The writer's authority.
        writer: Box<AccessRule>,
        /// The access rule the record asked for.
        record_access: Box<AccessRule>,
    },
    /// A record derived from `parent` would be readable by someone who cannot read `parent`.
    /// Derived records must be at least as narrow as every record they came from.
    #[error("record {id} would widen the access of the record {parent} it is derived from")]
    WidensAccess {
        /// The derived record.
        id: RecordId,
        /// The record it is derived from.
        parent: RecordId,
        /// That record's access rule.
        parent_access: Box<AccessRule>,
        /// The access rule the derived record asked for.
        record_access: Box<AccessRule>,
    },
    /// A model's inference (a record with `derived_from`) asked to be stored as verified. Derived
    /// records are stored unverified; verify the sources instead.
    #[error("derived record {id} cannot be stored as verified")]
    DerivedCannotBeVerified {
        /// The record.
        id: RecordId,
    },
    /// Writers may only ask for `Verified` or `Unverified`; the other statuses are assigned by the
    /// write path, resolution and forgetting.
    #[error("record {id} asked for status {status:?}, which only the memory assigns")]
    StatusNotWritable {
        /// The record.
        id: RecordId,
        /// The status asked for.
        status: EvidenceStatus,
    },
    /// `derived_from` names a record that is not in the memory (it may have been deleted).
    #[error("record {id} is derived from {missing}, which is not in memory")]
    UnknownSource {
        /// The derived record.
        id: RecordId,
        /// The missing source.
        missing: RecordId,
    },
    /// `derived_from` names a record that was superseded, expired or invalidated since it was
    /// read: refresh the inference from the current records.
    #[error("record {id} is derived from {parent}, which is no longer active ({status:?})")]
    StaleSource {
        /// The derived record.
        id: RecordId,
        /// The inactive record it is derived from.
        parent: RecordId,
        /// That record's status.
        status: EvidenceStatus,
    },
    /// Working memory is task-local: a `Working` record must name a task in its access rule.
    #[error("working-memory record {id} has no task in its access rule")]
    WorkingNeedsTask {
        /// The record.
        id: RecordId,
    },
    /// The id is already used by a record in memory or earlier in the same observation.
    #[error("record id {id} is already in use")]
    IdInUse {
        /// The id.
        id: RecordId,
    },
    /// The validity interval is empty (`from >= until`).
    #[error("record {id} has an empty validity interval")]
    EmptyValidity {
        /// The record.
        id: RecordId,
    },
    /// The claim (or the episode) is blank.
    #[error("record {id} has an empty claim")]
    EmptyClaim {
        /// The record.
        id: RecordId,
    },
}

/// [`resolve`](crate::resolve()) refused to close a verification need. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No verification need has this id.
    #[error("no verification need {need}")]
    UnknownNeed {
        /// The need.
        need: NeedId,
    },
    /// The need was resolved already.
    #[error("verification need {need} is already resolved")]
    AlreadyResolved {
        /// The need.
        need: NeedId,
    },
    /// The proposed winner is not one of the need's records.
    #[error("record {id} is not part of verification need {need}")]
    NotInNeed {
        /// The need.
        need: NeedId,
        /// The record.
        id: RecordId,
    },
    /// The proposed winner was superseded, expired or invalidated.
    #[error("record {id} is not active ({status:?})")]
    NotActive {
        /// The record.
        id: RecordId,
        /// Its status.
        status: EvidenceStatus,
    },
    /// The proposed winner is a model's inference; only an independent record can be verified.
    #[error("derived record {id} cannot be verified")]
    DerivedCannotBeVerified {
        /// The record.
        id: RecordId,
    },
    /// The resolver's authority does not cover one of the need's records.
    #[error("resolver scope {writer:?} does not cover access {record_access:?}")]
    ScopeViolation {
        /// The resolver's authority.
        writer: Box<AccessRule>,
        /// The access rule of the record it cannot touch.
        record_access: Box<AccessRule>,
    },
}

/// A forgetting operation was refused. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForgetError {
    /// No record has this id.
    #[error("no record {id}")]
    UnknownRecord {
        /// The id.
        id: RecordId,
    },
    /// The caller's authority does not cover the record.
    #[error("scope {writer:?} does not cover access {record_access:?}")]
    ScopeViolation {
        /// The caller's authority.
        writer: Box<AccessRule>,
        /// The record's access rule.
        record_access: Box<AccessRule>,
    },
    /// Priorities are percentages: at most 100.
    #[error("priority {priority} is above 100")]
    InvalidPriority {
        /// The priority asked for.
        priority: u8,
    },
}

/// A retrieval parameter was out of range.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
pub enum ParameterError {
    /// The redundancy weight λ must be finite and non-negative.
    #[error("redundancy weight {lambda} must be finite and >= 0")]
    InvalidRedundancy {
        /// The value given.
        lambda: f64,
    },
    /// A hazard rate must be finite and non-negative (and a half-life positive).
    #[error("hazard rate {per_ms} per ms must be finite and >= 0")]
    InvalidHazard {
        /// The value given.
        per_ms: f64,
    },
}

/// An authority that does not cover a record's access rule, as found by
/// [`authorize`](crate::record::authorize); each operation reports it as its own
/// `ScopeViolation` variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScopeViolation {
    /// The caller's authority.
    pub(crate) writer: Box<AccessRule>,
    /// The access rule it does not cover.
    pub(crate) record_access: Box<AccessRule>,
}

/// Each operation reports a [`ScopeViolation`] as its own `ScopeViolation` variant.
macro_rules! scope_violation_is {
    ($($error:ty),*) => {$(
        impl From<ScopeViolation> for $error {
            fn from(v: ScopeViolation) -> Self {
                Self::ScopeViolation {
                    writer: v.writer,
                    record_access: v.record_access,
                }
            }
        }
    )*};
}

scope_violation_is!(WriteError, ResolveError, ForgetError);

/// A [`Memory`](crate::Memory) operation failed: the pure step refused (`Refused`, with the
/// operation's own error), the backend failed (`Store`), or the CAS kept losing (`Contention`).
/// It is the state crate's [`UpdateError`]: memory commits through the same retry loop.
pub type CommitError<E> = UpdateError<E>;
