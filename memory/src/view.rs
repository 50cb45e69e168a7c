//! [`MemoryView`]: every record of one memory namespace, stored under one store key.
//!
//! Keeping the whole namespace under one key makes each write a single CAS on the memory's
//! version: a write that lost the race re-runs the pure write path against the view it lost to
//! and tries again, so a concurrent update is merged, never overwritten. The views are plain
//! values; the operations that produce a new view are pure functions in the other modules.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use quorate_protocols::{EvidenceStatus, ProvenanceRecord, RecordId, Timestamp};
use serde::{Deserialize, Serialize};

use crate::record::{independent_sources, normalized_claim, MemoryRecord, Principal};

/// Identifies a verification need: the id of the record whose arrival opened it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NeedId(pub RecordId);

impl fmt::Debug for NeedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NeedId({})", self.0)
    }
}

impl fmt::Display for NeedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "need-{}", self.0)
    }
}

/// Records about the same object and time that disagree, kept side by side until someone checks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationNeed {
    /// The need's id.
    pub id: NeedId,
    /// The object the records are about.
    pub object: String,
    /// The records involved (all sides).
    pub records: BTreeSet<RecordId>,
    /// When the disagreement was first observed.
    pub opened_at: Timestamp,
    /// How it was resolved, once it was.
    pub resolution: Option<Resolution>,
}

impl VerificationNeed {
    /// `true` until resolved.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.resolution.is_none()
    }
}

/// How a verification need was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// The record that was checked and kept.
    pub winner: RecordId,
    /// When.
    pub at: Timestamp,
}

/// A versioned snapshot's content: all records of one memory namespace and their indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryView {
    records: BTreeMap<RecordId, MemoryRecord>,
    by_object: BTreeMap<String, BTreeSet<RecordId>>,
    by_term: BTreeMap<String, BTreeSet<RecordId>>,
    needs: BTreeMap<NeedId, VerificationNeed>,
}

impl MemoryView {
    /// An empty memory.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of records (events and claims, of every status).
    #[must_use]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// `true` if the memory holds no record.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// One record, unfiltered. Agents read through [`retrieve`](crate::retrieve()), which
    /// applies the access filter; this accessor is for the trusted runtime.
    #[must_use]
    pub fn get(&self, id: RecordId) -> Option<&MemoryRecord> {
        self.records.get(&id)
    }

    /// Every record in id order, unfiltered (see [`get`](Self::get)).
    pub fn records(&self) -> impl Iterator<Item = &MemoryRecord> {
        self.records.values()
    }

    /// Every record about `object`, unfiltered.
    pub fn about<'a>(&'a self, object: &str) -> impl Iterator<Item = &'a MemoryRecord> + 'a {
        self.by_object
            .get(object)
            .into_iter()
            .flatten()
            .filter_map(|id| self.records.get(id))
    }

    /// Ids of the records indexed under retrieval key `term`.
    pub fn with_term<'a>(&'a self, term: &str) -> impl Iterator<Item = RecordId> + 'a {
        self.by_term.get(term).into_iter().flatten().copied()
    }

    /// Every verification need, open and resolved.
    pub fn needs(&self) -> impl Iterator<Item = &VerificationNeed> {
        self.needs.values()
    }

    /// One verification need.
    #[must_use]
    pub fn need(&self, id: NeedId) -> Option<&VerificationNeed> {
        self.needs.get(&id)
    }

    /// The open verification needs.
    pub fn open_needs(&self) -> impl Iterator<Item = &VerificationNeed> {
        self.needs.values().filter(|n| n.is_open())
    }

    /// Number of independent sources behind `claim` about `object` as `reader` sees them at
    /// `at` (see [`independent_sources`]): the count voting code should use. Only records the
    /// reader may read and whose validity contains `at` count, so a record outside the reader's
    /// scope never adds or removes a vote.
    #[must_use]
    pub fn support(&self, reader: &Principal, object: &str, claim: &str, at: Timestamp) -> usize {
        self.support_at(reader, object, claim, Some(at))
    }

    /// [`support`](Self::support), with `at: None` counting records whatever their validity.
    pub(crate) fn support_at(
        &self,
        reader: &Principal,
        object: &str,
        claim: &str,
        at: Option<Timestamp>,
    ) -> usize {
        let wanted = normalized_claim(claim);
        independent_sources(
            self.about(object)
                .filter(|r| r.is_active() && !r.is_event)
                .map(MemoryRecord::record)
                .filter(|r| reader.can_read(&r.access))
                .filter(|r| at.is_none_or(|t| r.validity.contains(t)))
                .filter(|r| normalized_claim(&r.claim) == wanted),
        )
    }

    /// `true` if no record that `reader` may read, of the same object and source name, was
    /// observed strictly later with another source version: the version-based freshness test for
    /// configuration-like records. Judged over what the reader may see, so a newer version in a
    /// scope the reader cannot read never makes a record stale for them.
    #[must_use]
    pub fn is_latest_version(&self, reader: &Principal, record: &ProvenanceRecord) -> bool {
        !self.about(&record.object).any(|other| {
            let o = &other.record;
            o.source.name == record.source.name
                && o.observed_at > record.observed_at
                && o.source.version != record.source.version
                && reader.can_read(&o.access)
        })
    }

    // ---- crate-internal mutation, used only by the pure operations on a cloned view ----

    pub(crate) fn record_mut(&mut self, id: RecordId) -> Option<&mut MemoryRecord> {
        self.records.get_mut(&id)
    }

    pub(crate) fn contains(&self, id: RecordId) -> bool {
        self.records.contains_key(&id)
    }

    pub(crate) fn insert(&mut self, record: MemoryRecord) {
        let id = record.id();
        self.by_object
            .entry(record.record.object.clone())
            .or_default()
            .insert(id);
        for term in &record.terms {
            self.by_term.entry(term.clone()).or_default().insert(id);
        }
        self.records.insert(id, record);
    }

    pub(crate) fn need_mut(&mut self, id: NeedId) -> Option<&mut VerificationNeed> {
        self.needs.get_mut(&id)
    }

    pub(crate) fn open_need(&mut self, need: VerificationNeed) {
        self.needs.insert(need.id, need);
    }

    /// Open needs that contain `id`.
    pub(crate) fn open_needs_of(&self, id: RecordId) -> Vec<NeedId> {
        self.needs
            .values()
            .filter(|n| n.is_open() && n.records.contains(&id))
            .map(|n| n.id)
            .collect()
    }

    /// Marks `old` superseded by `new` (out of the hot context) and links the two both ways;
    /// what was derived from `old` is left alone (see [`supersede`](Self::supersede)).
    pub(crate) fn mark_superseded(&mut self, old: RecordId, new: RecordId) {
        if let Some(r) = self.records.get_mut(&old) {
            r.record.status = EvidenceStatus::Superseded;
            r.superseded_by = Some(new);
            r.hot = false;
        }
        if let Some(r) = self.records.get_mut(&new) {
            if !r.supersedes.contains(&old) {
                r.supersedes.push(old);
            }
        }
    }

    /// Marks `old` superseded by `new` and invalidates what was derived from `old`. Returns the
    /// invalidated records.
    pub(crate) fn supersede(&mut self, old: RecordId, new: RecordId) -> Vec<RecordId> {
        self.mark_superseded(old, new);
        self.invalidate_derived(old)
    }

    /// Every record derived (directly or through other derived records) from `roots`, excluding
    /// the roots themselves, in id order.
    pub(crate) fn descendants(&self, roots: &[RecordId]) -> BTreeSet<RecordId> {
        let mut children: BTreeMap<RecordId, Vec<RecordId>> = BTreeMap::new();
        for r in self.records.values() {
            for parent in &r.record.derived_from {
                children.entry(*parent).or_default().push(r.id());
            }
        }
        let mut found = BTreeSet::new();
        let mut stack: Vec<RecordId> = roots.to_vec();
        while let Some(next) = stack.pop() {
            for child in children.get(&next).into_iter().flatten() {
                if !roots.contains(child) && found.insert(*child) {
                    stack.push(*child);
                }
            }
        }
        found
    }

    /// Every record that `roots` are derived from, directly or through other derived records,
    /// together with the roots themselves.
    pub(crate) fn ancestors(&self, roots: &[RecordId]) -> BTreeSet<RecordId> {
        let mut found = BTreeSet::new();
        let mut stack: Vec<RecordId> = roots.to_vec();
        while let Some(next) = stack.pop() {
            if found.insert(next) {
                if let Some(r) = self.records.get(&next) {
                    stack.extend(&r.record.derived_from);
                }
            }
        }
        found
    }

    /// `true` if `record`'s validity contains `at`, and so does the validity of every record it
    /// was derived from (transitively): a derivation holds no longer than what it was derived
    /// from, which is what [`expire_due`](crate::expire_due) makes of it once it runs.
    pub(crate) fn valid_with_lineage(&self, record: &MemoryRecord, at: Timestamp) -> bool {
        record.record.validity.contains(at)
            && self
                .ancestors(&record.record.derived_from)
                .iter()
                .filter_map(|id| self.records.get(id))
                .all(|a| a.record.validity.contains(at))
    }

    /// Marks every record derived from `root` invalidated (unless it already was). Returns the
    /// newly invalidated ones.
    pub(crate) fn invalidate_derived(&mut self, root: RecordId) -> Vec<RecordId> {
        let mut out = Vec::new();
        for id in self.descendants(&[root]) {
            if let Some(r) = self.records.get_mut(&id) {
                if r.invalidated_by.is_none() {
                    r.invalidated_by = Some(root);
                    r.hot = false;
                    out.push(id);
                }
            }
        }
        out
    }

    /// Removes `ids` and every index entry and link that refers to them. Returns the number of
    /// index entries removed.
    pub(crate) fn remove_all(&mut self, ids: &BTreeSet<RecordId>) -> usize {
        let mut index_entries = 0;
        for id in ids {
            let Some(r) = self.records.remove(id) else {
                continue;
            };
            if let Some(set) = self.by_object.get_mut(&r.record.object) {
                index_entries += usize::from(set.remove(id));
                if set.is_empty() {
                    self.by_object.remove(&r.record.object);
                }
            }
            for term in &r.terms {
                if let Some(set) = self.by_term.get_mut(term) {
                    index_entries += usize::from(set.remove(id));
                    if set.is_empty() {
                        self.by_term.remove(term);
                    }
                }
            }
        }
        for r in self.records.values_mut() {
            r.supersedes.retain(|s| !ids.contains(s));
            if r.superseded_by.is_some_and(|s| ids.contains(&s)) {
                r.superseded_by = None;
            }
            if r.invalidated_by.is_some_and(|s| ids.contains(&s)) {
                // The ancestor is gone but the invalidation stands: keep the record out of use by
                // pointing at itself rather than at a deleted id.
                r.invalidated_by = Some(r.record.id);
            }
            if r.event.is_some_and(|e| ids.contains(&e)) {
                r.event = None;
            }
        }
        // A need goes when all its records or its winner go: it would only describe deleted
        // content.
        self.needs.retain(|_, need| {
            need.records.retain(|r| !ids.contains(r));
            !need.records.is_empty() && need.resolution.is_none_or(|res| !ids.contains(&res.winner))
        });
        index_entries
    }

    /// `true` if every index entry points at a record that exists and every record is indexed.
    /// Checked by the tests after every operation.
    #[must_use]
    pub fn indexes_consistent(&self) -> bool {
        let objects_ok = self.by_object.iter().all(|(object, ids)| {
            ids.iter().all(|id| {
                self.records
                    .get(id)
                    .is_some_and(|r| r.record.object == *object)
            })
        });
        let terms_ok = self.by_term.iter().all(|(term, ids)| {
            ids.iter()
                .all(|id| self.records.get(id).is_some_and(|r| r.terms.contains(term)))
        });
        let all_indexed = self.records.values().all(|r| {
            self.by_object
                .get(&r.record.object)
                .is_some_and(|s| s.contains(&r.id()))
                && r.terms
                    .iter()
                    .all(|t| self.by_term.get(t).is_some_and(|s| s.contains(&r.id())))
        });
        let links_ok = self.records.values().all(|r| {
            r.supersedes.iter().all(|s| self.records.contains_key(s))
                && r.superseded_by
                    .is_none_or(|s| self.records.contains_key(&s))
                && r.invalidated_by
                    .is_none_or(|s| self.records.contains_key(&s))
                && r.event.is_none_or(|s| self.records.contains_key(&s))
                && r.record
                    .derived_from
                    .iter()
                    .all(|s| self.records.contains_key(s))
        });
        let needs_ok = self
            .needs
            .values()
            .all(|n| n.records.iter().all(|id| self.records.contains_key(id)));
        objects_ok && terms_ok && all_indexed && links_ok && needs_ok
    }
}
