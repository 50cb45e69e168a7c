//! Retrieval: filter first, then choose under a token budget.
//!
//! **Filter.** A record is visible to a [`Principal`] only if the principal may read its access
//! rule (tenant, principal, task), its status is one the [`Query`] asks for (an invalidated
//! derived record counts as superseded), its kind is asked for, and its validity contains the
//! query's time (`now`, or the time given to [`Query::valid_at`]), as does the validity of every
//! record it was derived from. That holds whether or not [`expire_due`](crate::expire_due) has
//! run: the same query at the same time gets the same answer before and after housekeeping. A caller who wants history asks for it
//! ([`Query::include_history`]). Nothing after this step sees an invisible record, so no
//! relevance score can bypass the filter.
//!
//! **Score.** `relevance(i) = |Q ∩ Tᵢ| / |Q| · priorityᵢ/100 · freshnessᵢ · wᵢ`, where `Q` are
//! the query's terms, `Tᵢ` the record's retrieval keys, freshness follows the per-kind
//! [`FreshnessPolicy`], and `wᵢ` is [`DERIVED_WEIGHT`] for a derived record (a model's answer
//! or a summary ranks below the evidence it came from) and 1 otherwise. Visible records with
//! freshness 0 are reported as `stale` and not offered.
//!
//! **Choose.** Hot records go in first (most relevant first, while they fit). The rest is chosen
//! to maximise `F(S) = Σ_{i∈S} relᵢ − λ·Σ_{i<j∈S} sim(i, j)` subject to `Σ costᵢ ≤ B`, where
//! `sim` is the Jaccard similarity of the retrieval keys. `F` is submodular (the penalty is a
//! sum of non-negative pairwise terms) but not monotone when `λ > 0`.
//!
//! * Up to [`EXACT_LIMIT`] candidates: exhaustive search, exactly optimal.
//! * More: greedy by marginal gain per token (`relᵢ − λ·Σ_{j∈S} sim(i, j)`, divided by `costᵢ`),
//!   stopping when no positive gain fits, then compared with the best single record. For
//!   `λ = 0` this is the classic modified greedy for 0/1 knapsack and is within a factor 2 of the
//!   optimum. For `λ > 0` no constant-factor bound is claimed for this deterministic greedy
//!   (known guarantees for non-monotone submodular knapsack need randomised or multi-pass
//!   algorithms); it never returns less than the hot records alone.

use std::collections::BTreeSet;

use quorate_protocols::{EvidenceStatus, MemoryKind, RecordId, Timestamp};

use crate::error::ParameterError;
use crate::freshness::FreshnessPolicy;
use crate::record::{terms, MemoryRecord, Principal};
use crate::view::MemoryView;

/// Candidate counts up to which retrieval searches exhaustively (2^12 subsets).
pub const EXACT_LIMIT: usize = 12;

/// Relevance factor of a derived record relative to an observation.
pub const DERIVED_WEIGHT: f64 = 0.5;

/// The most free items [`select_using`] will search exhaustively (2^20 subsets).
pub const EXACT_MAX: usize = 20;

/// What to retrieve.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    terms: BTreeSet<String>,
    budget: u32,
    now: Timestamp,
    statuses: Vec<EvidenceStatus>,
    kinds: Option<Vec<MemoryKind>>,
    redundancy: f64,
    validity: ValidAt,
}

/// Which validity intervals a query keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValidAt {
    /// Those containing the query's `now` (the default).
    Now,
    /// Those containing this time.
    Time(Timestamp),
    /// All: history included.
    Any,
}

impl Query {
    /// Records relevant to the words of `text`, within `budget` tokens, scored at `now`.
    /// Defaults: statuses verified, unverified and conflicting; every kind; only records valid
    /// at `now`; redundancy λ = 0.5.
    #[must_use]
    pub fn new(text: &str, budget: u32, now: Timestamp) -> Self {
        Self {
            terms: terms(text),
            budget,
            now,
            statuses: vec![
                EvidenceStatus::Verified,
                EvidenceStatus::Unverified,
                EvidenceStatus::Conflicting,
            ],
            kinds: None,
            redundancy: 0.5,
            validity: ValidAt::Now,
        }
    }

    /// Only records with one of these statuses.
    #[must_use]
    pub fn statuses(mut self, statuses: &[EvidenceStatus]) -> Self {
        self.statuses = statuses.to_vec();
        self
    }

    /// Only records of these kinds.
    #[must_use]
    pub fn kinds(mut self, kinds: &[MemoryKind]) -> Self {
        self.kinds = Some(kinds.to_vec());
        self
    }

    /// Only records whose validity contains `at` instead of `now` (freshness is still scored at
    /// `now`). Replaces an earlier [`include_history`](Self::include_history).
    #[must_use]
    pub fn valid_at(mut self, at: Timestamp) -> Self {
        self.validity = ValidAt::Time(at);
        self
    }

    /// Records whatever their validity interval: history included. Only the validity filter is
    /// lifted; to also get records marked superseded or expired, ask for those
    /// [`statuses`](Self::statuses) too. Replaces an earlier [`valid_at`](Self::valid_at).
    #[must_use]
    pub fn include_history(mut self) -> Self {
        self.validity = ValidAt::Any;
        self
    }

    /// The time a record's validity must contain to pass the filter; `None` with
    /// [`include_history`](Self::include_history).
    fn validity_time(&self) -> Option<Timestamp> {
        match self.validity {
            ValidAt::Now => Some(self.now),
            ValidAt::Time(at) => Some(at),
            ValidAt::Any => None,
        }
    }

    /// The redundancy weight λ (finite, ≥ 0).
    pub fn redundancy(mut self, lambda: f64) -> Result<Self, ParameterError> {
        if !(lambda.is_finite() && lambda >= 0.0) {
            return Err(ParameterError::InvalidRedundancy { lambda });
        }
        self.redundancy = lambda;
        Ok(self)
    }

    /// The token budget.
    #[must_use]
    pub fn budget(&self) -> u32 {
        self.budget
    }
}

/// A chosen record with its scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    /// The record.
    pub record: MemoryRecord,
    /// Its relevance (already scaled by priority and freshness).
    pub relevance: f64,
    /// Its freshness in `[0, 1]`.
    pub freshness: f64,
    /// Independent sources behind its claim about its object among the records the reader may
    /// see at the query's time ([`MemoryView::support`]; history included with
    /// [`Query::include_history`]): the count to vote with. 0 for an event record.
    pub support: usize,
}

/// How the budgeted choice was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Exhaustive search: optimal.
    Exact,
    /// Greedy by gain per token with the best-single fallback (see the module docs).
    Greedy,
}

/// What a retrieval returned.
#[derive(Clone, Debug, PartialEq)]
pub struct Retrieval {
    /// Hot records first, then the budgeted choice in the order it was made.
    pub chosen: Vec<Scored>,
    /// Tokens used (≤ the budget).
    pub tokens_used: u32,
    /// `F` of the chosen set.
    pub objective: f64,
    /// How the choice was made.
    pub method: Method,
    /// How many records passed the filter.
    pub visible: usize,
    /// Visible records whose freshness is 0: refresh them before relying on them.
    pub stale: Vec<RecordId>,
}

/// One candidate of the budgeted choice.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Cost in tokens.
    pub cost: u32,
    /// Relevance.
    pub relevance: f64,
    /// Retrieval keys, for the similarity.
    pub terms: BTreeSet<String>,
}

/// Jaccard similarity of two key sets (0 when both are empty).
#[must_use]
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

/// `F(S)` for the items at `chosen`.
#[must_use]
pub fn objective(items: &[Item], chosen: &[usize], lambda: f64) -> f64 {
    let mut f = 0.0;
    for (k, &i) in chosen.iter().enumerate() {
        f += items[i].relevance;
        for &j in &chosen[..k] {
            f -= lambda * jaccard(&items[i].terms, &items[j].terms);
        }
    }
    f
}

fn cost_of(items: &[Item], chosen: &[usize]) -> u64 {
    chosen.iter().map(|&i| u64::from(items[i].cost)).sum()
}

/// Chooses items maximising `F` within `budget`, keeping the items at `fixed` (which must fit):
/// exact up to [`EXACT_LIMIT`] free items, greedy beyond. Returns the chosen indices (fixed
/// first) and the method used.
#[must_use]
pub fn select(items: &[Item], fixed: &[usize], budget: u32, lambda: f64) -> (Vec<usize>, Method) {
    let free = items.len().saturating_sub(fixed.len());
    let method = if free <= EXACT_LIMIT {
        Method::Exact
    } else {
        Method::Greedy
    };
    select_using(method, items, fixed, budget, lambda)
}

/// [`select`] with the method chosen by the caller (for comparisons). The exact search is
/// exponential; beyond [`EXACT_MAX`] free items it falls back to greedy, and says so.
#[must_use]
pub fn select_using(
    method: Method,
    items: &[Item],
    fixed: &[usize],
    budget: u32,
    lambda: f64,
) -> (Vec<usize>, Method) {
    let free: Vec<usize> = (0..items.len()).filter(|i| !fixed.contains(i)).collect();
    let room = u64::from(budget).saturating_sub(cost_of(items, fixed));
    if method == Method::Exact && free.len() <= EXACT_MAX {
        (
            select_exact(items, fixed, &free, room, lambda),
            Method::Exact,
        )
    } else {
        (
            select_greedy(items, fixed, &free, room, lambda),
            Method::Greedy,
        )
    }
}

fn select_exact(
    items: &[Item],
    fixed: &[usize],
    free: &[usize],
    room: u64,
    lambda: f64,
) -> Vec<usize> {
    let mut best: Vec<usize> = fixed.to_vec();
    let mut best_f = objective(items, &best, lambda);
    let mut best_cost = 0;
    for mask in 1u64..(1u64 << free.len()) {
        let extra: Vec<usize> = (0..free.len())
            .filter(|b| mask & (1 << b) != 0)
            .map(|b| free[b])
            .collect();
        let cost = cost_of(items, &extra);
        if cost > room {
            continue;
        }
        let mut set = fixed.to_vec();
        set.extend(&extra);
        let f = objective(items, &set, lambda);
        if f > best_f || (f == best_f && cost < best_cost) {
            (best, best_f, best_cost) = (set, f, cost);
        }
    }
    best
}

fn select_greedy(
    items: &[Item],
    fixed: &[usize],
    free: &[usize],
    room: u64,
    lambda: f64,
) -> Vec<usize> {
    let sim = |a: usize, b: usize| jaccard(&items[a].terms, &items[b].terms);
    let mut penalty: Vec<f64> = free
        .iter()
        .map(|&i| fixed.iter().map(|&j| lambda * sim(i, j)).sum())
        .collect();
    let mut taken = vec![false; free.len()];
    let mut chosen = fixed.to_vec();
    let mut left = room;
    loop {
        let mut best: Option<(usize, f64, f64)> = None;
        for (k, &i) in free.iter().enumerate() {
            let cost = u64::from(items[i].cost);
            let gain = items[i].relevance - penalty[k];
            if taken[k] || cost > left || gain <= 0.0 {
                continue;
            }
            let ratio = gain / cost.max(1) as f64;
            if best.is_none_or(|(_, r, g)| ratio > r || (ratio == r && gain > g)) {
                best = Some((k, ratio, gain));
            }
        }
        let Some((k, _, _)) = best else { break };
        taken[k] = true;
        chosen.push(free[k]);
        left -= u64::from(items[free[k]].cost);
        for (m, &i) in free.iter().enumerate() {
            penalty[m] += lambda * sim(i, free[k]);
        }
    }
    let mut best_f = objective(items, &chosen, lambda);
    for &i in free {
        if u64::from(items[i].cost) <= room {
            let mut single = fixed.to_vec();
            single.push(i);
            let f = objective(items, &single, lambda);
            if f > best_f {
                (chosen, best_f) = (single, f);
            }
        }
    }
    chosen
}

/// Retrieves what `reader` may see and what fits the query's budget (see the module docs).
#[must_use]
pub fn retrieve(
    view: &MemoryView,
    reader: &Principal,
    query: &Query,
    policy: &FreshnessPolicy,
) -> Retrieval {
    // 1. Filter. Nothing below this line sees a record the reader may not read, or one whose
    // validity does not contain the query's time.
    let at = query.validity_time();
    let visible: Vec<&MemoryRecord> = view
        .records()
        .filter(|r| {
            let rec = r.record();
            reader.can_read(&rec.access)
                && query.statuses.contains(&r.effective_status())
                && query.kinds.as_ref().is_none_or(|k| k.contains(&rec.kind))
                && at.is_none_or(|t| view.valid_with_lineage(r, t))
        })
        .collect();

    // 2. Score.
    let mut stale = Vec::new();
    let mut scored: Vec<Scored> = Vec::new();
    for r in &visible {
        let freshness = policy.freshness(view, reader, r, query.now);
        if freshness <= 0.0 {
            stale.push(r.id());
            continue;
        }
        let overlap = query.terms.intersection(r.terms()).count();
        let relevance = if query.terms.is_empty() {
            0.0
        } else {
            let weight = if r.record().is_derived() {
                DERIVED_WEIGHT
            } else {
                1.0
            };
            overlap as f64 / query.terms.len() as f64 * f64::from(r.priority()) / 100.0
                * freshness
                * weight
        };
        if relevance > 0.0 || r.is_hot() {
            let rec = r.record();
            scored.push(Scored {
                record: (*r).clone(),
                relevance,
                freshness,
                support: view.support_at(reader, &rec.object, &rec.claim, at),
            });
        }
    }

    // 3. Hot records first, most relevant first, while they fit.
    let mut order: Vec<usize> = (0..scored.len()).collect();
    order.sort_by(|&a, &b| {
        scored[b]
            .relevance
            .total_cmp(&scored[a].relevance)
            .then(scored[a].record.id().cmp(&scored[b].record.id()))
    });
    let mut fixed = Vec::new();
    let mut used: u64 = 0;
    for &i in &order {
        let cost = u64::from(scored[i].record.tokens());
        if scored[i].record.is_hot() && used + cost <= u64::from(query.budget) {
            fixed.push(i);
            used += cost;
        }
    }
    // Hot records that did not fit are not offered again.
    let offered: Vec<usize> = (0..scored.len())
        .filter(|i| fixed.contains(i) || !scored[*i].record.is_hot())
        .collect();
    let items: Vec<Item> = offered
        .iter()
        .map(|&i| Item {
            cost: scored[i].record.tokens(),
            relevance: scored[i].relevance,
            terms: scored[i].record.terms().clone(),
        })
        .collect();
    let fixed_items: Vec<usize> = fixed
        .iter()
        .filter_map(|f| offered.iter().position(|o| o == f))
        .collect();

    // 4. Choose.
    let (picked, method) = select(&items, &fixed_items, query.budget, query.redundancy);
    let objective = objective(&items, &picked, query.redundancy);
    let tokens_used = picked.iter().map(|&i| items[i].cost).sum();
    let chosen = picked.iter().map(|&i| scored[offered[i]].clone()).collect();
    Retrieval {
        chosen,
        tokens_used,
        objective,
        method,
        visible: visible.len(),
        stale,
    }
}
