//! [`MemoryRecord`]: a [`ProvenanceRecord`] plus what the memory needs around it, and the access
//! rules ([`Principal`], [`access_within`]).

use std::collections::BTreeSet;

use quorate_protocols::{
    AccessRule, EvidenceStatus, ProvenanceRecord, RecordId, TaskId, Timestamp,
};
use serde::{Deserialize, Serialize};

use crate::error::ScopeViolation;

/// Priority of a record that was never deprioritised (a percentage).
pub const FULL_PRIORITY: u8 = 100;

/// A [`ProvenanceRecord`] as the memory keeps it.
///
/// Why a wrapper: `quorate_protocols::ProvenanceRecord` is the wire shape of a claim and its
/// provenance. The memory also needs links and bookkeeping that are not part of the claim and
/// that the write path, not the writer, maintains: the supersede links (`supersedes`,
/// `superseded_by`; the record only has a status), which derived records were invalidated and by
/// what, whether the record is an observation's event record and which event a claim was split
/// from, the retrieval keys and token cost, the retrieval priority and the hot-context flag. The
/// fields are private: only the memory's operations change them, and the inner record's source,
/// derivation links and access rule are never changed after the write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRecord {
    pub(crate) record: ProvenanceRecord,
    pub(crate) is_event: bool,
    pub(crate) event: Option<RecordId>,
    pub(crate) terms: BTreeSet<String>,
    pub(crate) tokens: u32,
    pub(crate) priority: u8,
    pub(crate) hot: bool,
    pub(crate) supersedes: Vec<RecordId>,
    pub(crate) superseded_by: Option<RecordId>,
    pub(crate) invalidated_by: Option<RecordId>,
}

impl MemoryRecord {
    /// The claim and its provenance.
    #[must_use]
    pub fn record(&self) -> &ProvenanceRecord {
        &self.record
    }

    /// The record's id.
    #[must_use]
    pub fn id(&self) -> RecordId {
        self.record.id
    }

    /// `true` for the event record of an observation (the episode), `false` for a claim.
    #[must_use]
    pub fn is_event(&self) -> bool {
        self.is_event
    }

    /// For a claim: the event record of the observation it was split from (if not deleted).
    #[must_use]
    pub fn event(&self) -> Option<RecordId> {
        self.event
    }

    /// Retrieval keys (lower-case words of the object, the claim and any keywords).
    #[must_use]
    pub fn terms(&self) -> &BTreeSet<String> {
        &self.terms
    }

    /// What the record costs in a context window, in tokens (at least 1).
    #[must_use]
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Retrieval priority in percent (100 unless deprioritised).
    #[must_use]
    pub fn priority(&self) -> u8 {
        self.priority
    }

    /// `true` while the record is in the hot context (offered before any budgeted choice).
    #[must_use]
    pub fn is_hot(&self) -> bool {
        self.hot
    }

    /// Records this one replaced.
    #[must_use]
    pub fn supersedes(&self) -> &[RecordId] {
        &self.supersedes
    }

    /// The record that replaced this one, if any.
    #[must_use]
    pub fn superseded_by(&self) -> Option<RecordId> {
        self.superseded_by
    }

    /// For a derived record: the ancestor whose supersession or expiry invalidated it.
    #[must_use]
    pub fn invalidated_by(&self) -> Option<RecordId> {
        self.invalidated_by
    }

    /// `true` if the record can still be used as evidence: verified, unverified or conflicting,
    /// and not invalidated through a superseded or expired ancestor.
    #[must_use]
    pub fn is_active(&self) -> bool {
        matches!(
            self.effective_status(),
            EvidenceStatus::Verified | EvidenceStatus::Unverified | EvidenceStatus::Conflicting
        )
    }

    /// The status the record counts with (and that retrieval filters on): a derived record
    /// invalidated through a superseded or expired ancestor counts as superseded, whatever its
    /// own status says.
    #[must_use]
    pub fn effective_status(&self) -> EvidenceStatus {
        if self.invalidated_by.is_some() {
            EvidenceStatus::Superseded
        } else {
            self.record.status
        }
    }

    /// Marks the record expired and takes it out of the hot context; its validity ends at `at`
    /// unless it already ended earlier. Returns `false` (and changes nothing) if it was already
    /// expired.
    pub(crate) fn expire(&mut self, at: Timestamp) -> bool {
        if self.record.status == EvidenceStatus::Expired {
            return false;
        }
        self.record.status = EvidenceStatus::Expired;
        self.hot = false;
        if self.record.validity.until.is_none_or(|u| at < u) {
            self.record.validity.until = Some(at);
        }
        true
    }
}

/// Who reads: a principal of a tenant, possibly working inside one task.
///
/// ```
/// use quorate_memory::Principal;
/// use quorate_protocols::{AccessRule, TaskId};
///
/// let task = TaskId::from_u128(1);
/// let alice = Principal::new("acme", "alice", Some(task));
/// let tenant_wide = AccessRule { tenant: "acme".into(), principal: None, task: None };
/// let bobs = AccessRule { principal: Some("bob".into()), ..tenant_wide.clone() };
/// assert!(alice.can_read(&tenant_wide));
/// assert!(!alice.can_read(&bobs));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// The tenant.
    pub tenant: String,
    /// The principal (user or service).
    pub principal: String,
    /// The task the reader works in, if any.
    pub task: Option<TaskId>,
}

impl Principal {
    /// A reader.
    #[must_use]
    pub fn new(
        tenant: impl Into<String>,
        principal: impl Into<String>,
        task: Option<TaskId>,
    ) -> Self {
        Self {
            tenant: tenant.into(),
            principal: principal.into(),
            task,
        }
    }

    /// `true` if this reader may see a record with `access`: same tenant, the record's principal
    /// unset or this one, the record's task unset or this reader's task.
    #[must_use]
    pub fn can_read(&self, access: &AccessRule) -> bool {
        admits(access, &self.tenant, Some(&self.principal), self.task)
    }

    /// The narrowest access rule this reader can read: only this principal, only this task.
    #[must_use]
    pub fn private_rule(&self) -> AccessRule {
        AccessRule {
            tenant: self.tenant.clone(),
            principal: Some(self.principal.clone()),
            task: self.task,
        }
    }
}

/// `true` if every reader allowed by `inner` is also allowed by `outer` (`inner` is at most as
/// wide as `outer`). A writer with authority `outer` may write records with access `inner`; a
/// record derived from a source with access `outer` may have access `inner`.
#[must_use]
pub fn access_within(inner: &AccessRule, outer: &AccessRule) -> bool {
    admits(outer, &inner.tenant, inner.principal.as_deref(), inner.task)
}

/// The one scope rule behind [`Principal::can_read`] and [`access_within`]: `rule` admits a
/// reader of `tenant` who is `principal` (`None`: any principal) working in `task` (`None`: no
/// particular task) if the tenant matches and every part `rule` restricts matches exactly.
fn admits(rule: &AccessRule, tenant: &str, principal: Option<&str>, task: Option<TaskId>) -> bool {
    rule.tenant == tenant
        && rule
            .principal
            .as_deref()
            .is_none_or(|p| principal == Some(p))
        && rule.task.is_none_or(|t| task == Some(t))
}

/// The scope check of every operation that changes records: `Ok` if `authority` covers a record
/// with `access` ([`access_within`]), else the violation naming both rules.
pub(crate) fn authorize(authority: &AccessRule, access: &AccessRule) -> Result<(), ScopeViolation> {
    if access_within(access, authority) {
        Ok(())
    } else {
        Err(ScopeViolation {
            writer: Box::new(authority.clone()),
            record_access: Box::new(access.clone()),
        })
    }
}

/// Lower-case alphanumeric words of `text`; the retrieval keys of records and queries.
#[must_use]
pub fn terms(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A deterministic token estimate: a quarter of the characters of object and claim, plus a fixed
/// overhead of 4 for the provenance line. Callers with a real tokenizer pass their own count.
#[must_use]
pub fn estimate_tokens(object: &str, claim: &str) -> u32 {
    let chars = object.chars().count() + claim.chars().count();
    u32::try_from(chars.div_ceil(4))
        .unwrap_or(u32::MAX)
        .saturating_add(4)
}

/// The claim text compared for equality: trimmed, lower-case, inner whitespace collapsed.
pub(crate) fn normalized_claim(claim: &str) -> String {
    claim
        .split_whitespace()
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many independent sources back a set of records (typically: the records that make the
/// same claim about the same object). Votes and agreement are counted with this, not per record:
/// a derived record (a model's stored answer, a summary) counts zero, a superseded or expired
/// record counts zero, and several records from the same source name count once.
///
/// ```
/// use quorate_memory::independent_sources;
/// use quorate_protocols::*;
///
/// let obs = |id: u128, source: &str, derived: Vec<RecordId>| ProvenanceRecord {
///     id: RecordId::from_u128(id), kind: MemoryKind::Semantic, object: "sku-42".into(),
///     claim: "12 in stock".into(),
///     source: Source { name: source.into(), version: "1".into() },
///     observed_at: Timestamp(1), validity: Validity::default(), access: AccessRule::default(),
///     status: EvidenceStatus::Unverified, derived_from: derived,
/// };
/// let records = [
///     obs(1, "warehouse-db", vec![]),
///     obs(2, "warehouse-db", vec![]),                    // same source again: counted once
///     obs(3, "model", vec![RecordId::from_u128(1)]),     // a model's answer: counted zero
///     obs(4, "shelf-scanner", vec![]),
/// ];
/// assert_eq!(independent_sources(&records), 2);
/// ```
#[must_use]
pub fn independent_sources<'a>(records: impl IntoIterator<Item = &'a ProvenanceRecord>) -> usize {
    records
        .into_iter()
        .filter(|r| r.is_independent())
        .map(|r| r.source.name.as_str())
        .collect::<BTreeSet<_>>()
        .len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tenant: &str, principal: Option<&str>, task: Option<u128>) -> AccessRule {
        AccessRule {
            tenant: tenant.into(),
            principal: principal.map(Into::into),
            task: task.map(TaskId::from_u128),
        }
    }

    #[test]
    fn readers_see_only_their_scope() {
        let reader = Principal::new("t", "p", Some(TaskId::from_u128(1)));
        assert!(reader.can_read(&rule("t", None, None)));
        assert!(reader.can_read(&rule("t", Some("p"), Some(1))));
        assert!(!reader.can_read(&rule("u", None, None)));
        assert!(!reader.can_read(&rule("t", Some("q"), None)));
        assert!(!reader.can_read(&rule("t", None, Some(2))));
        let no_task = Principal::new("t", "p", None);
        assert!(!no_task.can_read(&rule("t", None, Some(1))));
        assert!(no_task.can_read(&no_task.private_rule()));
    }

    #[test]
    fn within_is_reader_set_inclusion() {
        let wide = rule("t", None, None);
        let mine = rule("t", Some("p"), None);
        let task = rule("t", Some("p"), Some(1));
        assert!(access_within(&task, &mine) && access_within(&mine, &wide));
        assert!(!access_within(&wide, &mine) && !access_within(&mine, &task));
        assert!(!access_within(&rule("u", None, None), &wide));
        assert!(!access_within(&rule("t", Some("q"), None), &mine));
    }

    #[test]
    fn terms_and_claims_normalise() {
        let t = terms("Inventory/SKU-42: 12 in stock");
        assert!(t.contains("sku") && t.contains("42") && t.contains("inventory"));
        assert_eq!(normalized_claim("  12  In stock "), "12 in stock");
        assert_eq!(estimate_tokens("", ""), 4);
        assert_eq!(estimate_tokens("abcd", "e"), 6);
    }
}
