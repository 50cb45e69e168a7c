//! What arrives at the memory ([`MemoryObservation`], [`ClaimSpec`]) and step 1 of the write path,
//! [`split`]: the event record and one claim candidate per claim, each bound to the
//! observation's source and version, access rule and status, and marked derived when the
//! observation is a model's inference.

use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, ProvenanceRecord, RecordId, Source, Timestamp, Validity,
};
use serde::{Deserialize, Serialize};

use crate::error::WriteError;
use crate::record::{estimate_tokens, terms, MemoryRecord, FULL_PRIORITY};

/// One claim an observation makes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimSpec {
    /// The claim's record id (the caller chooses it, so the write path stays deterministic).
    pub id: RecordId,
    /// Working, episodic, semantic or procedural.
    pub kind: MemoryKind,
    /// What the claim is about (an entity key such as `inventory/sku-42`).
    pub object: String,
    /// The claim.
    pub claim: String,
    /// When the claim holds.
    pub validity: Validity,
    /// Extra retrieval keys besides the words of object and claim.
    pub keywords: Vec<String>,
    /// Context cost in tokens; `None`: [`estimate_tokens`].
    pub tokens: Option<u32>,
}

impl ClaimSpec {
    /// A claim with no extra keywords and an estimated token cost.
    #[must_use]
    pub fn new(
        id: RecordId,
        kind: MemoryKind,
        object: impl Into<String>,
        claim: impl Into<String>,
        validity: Validity,
    ) -> Self {
        Self {
            id,
            kind,
            object: object.into(),
            claim: claim.into(),
            validity,
            keywords: Vec::new(),
            tokens: None,
        }
    }
}

/// What an agent or tool saw (or what a model inferred), as it arrives at the memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryObservation {
    /// Id for the event record (the episode "this source said this, then").
    pub event: RecordId,
    /// Description of what happened.
    pub episode: String,
    /// Where it came from, with the source's version.
    pub source: Source,
    /// When it was observed.
    pub observed_at: Timestamp,
    /// Who may read the records.
    pub access: AccessRule,
    /// `Verified` if the runtime checked it against the source (a tool receipt), else
    /// `Unverified`. A derived observation must be `Unverified`.
    pub status: EvidenceStatus,
    /// Non-empty for a model's inference: the records it was inferred from. Every record of the
    /// observation is then derived and never counts as an independent source.
    pub derived_from: Vec<RecordId>,
    /// The claims.
    pub claims: Vec<ClaimSpec>,
}

/// The records an observation splits into, before they meet the memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidates {
    /// The event record (kind `Episodic`, object `episode/<source name>`).
    pub event: MemoryRecord,
    /// One record per claim, linked to the event.
    pub claims: Vec<MemoryRecord>,
}

fn new_record(
    obs: &MemoryObservation,
    id: RecordId,
    kind: MemoryKind,
    object: String,
    claim: String,
    validity: Validity,
) -> ProvenanceRecord {
    ProvenanceRecord {
        id,
        kind,
        object,
        claim,
        source: obs.source.clone(),
        observed_at: obs.observed_at,
        validity,
        access: obs.access.clone(),
        status: obs.status,
        derived_from: obs.derived_from.clone(),
    }
}

/// Step 1: the event record and one candidate per claim, each carrying the observation's source
/// and version, access rule, status and derivation links. Checks what needs no memory: status,
/// blank claims, empty validity, task-less working memory.
pub fn split(obs: &MemoryObservation) -> Result<Candidates, WriteError> {
    let derived = !obs.derived_from.is_empty();
    match obs.status {
        EvidenceStatus::Verified if derived => {
            return Err(WriteError::DerivedCannotBeVerified { id: obs.event })
        }
        EvidenceStatus::Verified | EvidenceStatus::Unverified => {}
        status => {
            return Err(WriteError::StatusNotWritable {
                id: obs.event,
                status,
            })
        }
    }
    if obs.episode.trim().is_empty() {
        return Err(WriteError::EmptyClaim { id: obs.event });
    }
    let event_object = format!("episode/{}", obs.source.name);
    let event = MemoryRecord {
        terms: terms(&format!("{event_object} {}", obs.episode)),
        tokens: estimate_tokens(&event_object, &obs.episode),
        record: new_record(
            obs,
            obs.event,
            MemoryKind::Episodic,
            event_object,
            obs.episode.clone(),
            Validity {
                from: Some(obs.observed_at),
                until: None,
            },
        ),
        is_event: true,
        event: None,
        priority: FULL_PRIORITY,
        hot: false,
        supersedes: Vec::new(),
        superseded_by: None,
        invalidated_by: None,
    };
    let mut claims = Vec::with_capacity(obs.claims.len());
    for spec in &obs.claims {
        if spec.claim.trim().is_empty() {
            return Err(WriteError::EmptyClaim { id: spec.id });
        }
        if let (Some(from), Some(until)) = (spec.validity.from, spec.validity.until) {
            if from >= until {
                return Err(WriteError::EmptyValidity { id: spec.id });
            }
        }
        if spec.kind == MemoryKind::Working && obs.access.task.is_none() {
            return Err(WriteError::WorkingNeedsTask { id: spec.id });
        }
        let mut keys = terms(&format!("{} {}", spec.object, spec.claim));
        for k in &spec.keywords {
            keys.extend(terms(k));
        }
        claims.push(MemoryRecord {
            terms: keys,
            tokens: spec
                .tokens
                .unwrap_or_else(|| estimate_tokens(&spec.object, &spec.claim))
                .max(1),
            record: new_record(
                obs,
                spec.id,
                spec.kind,
                spec.object.clone(),
                spec.claim.clone(),
                spec.validity,
            ),
            is_event: false,
            event: Some(obs.event),
            priority: FULL_PRIORITY,
            hot: spec.kind == MemoryKind::Working,
            supersedes: Vec::new(),
            superseded_by: None,
            invalidated_by: None,
        });
    }
    Ok(Candidates { event, claims })
}
