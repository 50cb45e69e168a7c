//! What a reader cannot see changes nothing they retrieve: for any reader, retrieval (the records,
//! their status, links and support, their freshness and the budgeted choice) is the same after a
//! random multi-tenant history as after the same history without the operations on records the
//! reader cannot read (writes, supersessions and conflicts they cause, resolutions, the four
//! kinds of forgetting).
//!
//! Ids are fixed by the position of the operation in the history, and the records an operation
//! refers to are chosen among the ids of earlier writes, so dropping an operation never renames
//! or retargets another.

mod common;

use common::{
    arb_obs, arb_reader, build, everything, tenant_wide, timeless, ObsSpec, ALL_STATUSES,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use quorate_memory::{
    expire_due, resolve, retrieve, write, Forget, FreshnessPolicy, MemoryObservation, MemoryView,
    Principal, Query, Retrieval,
};
use quorate_protocols::{AccessRule, RecordId, Timestamp};

#[derive(Clone, Debug)]
enum Op {
    Write(ObsSpec),
    /// Resolve the open need holding the picked record, in its favour.
    Resolve(usize),
    Forget {
        what: u8,
        pick: usize,
        at: u64,
    },
    ExpireDue(u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => arb_obs().prop_map(Op::Write),
        2 => (0..64usize).prop_map(Op::Resolve),
        2 => (0..4u8, 0..64usize, 0..30u64)
            .prop_map(|(what, pick, at)| Op::Forget { what, pick, at }),
        1 => (0..30u64).prop_map(Op::ExpireDue),
    ]
}

/// One operation with its ids, target and authority fixed.
#[derive(Clone, Debug)]
enum Step {
    Write(AccessRule, MemoryObservation),
    Resolve(RecordId, AccessRule),
    Forget(Forget, AccessRule),
    ExpireDue(Timestamp),
}

/// A step and the access rule of the records it acts on (`None`: a clock-driven step that acts on
/// every scope).
struct Planned {
    step: Step,
    scope: Option<AccessRule>,
}

/// Fixes ids (operation `k` writes ids `10k+1`…), targets and authorities, independently of what
/// the memory will do with them.
fn plan(ops: &[Op]) -> Vec<Planned> {
    let mut known: Vec<(RecordId, AccessRule)> = Vec::new();
    let mut out = Vec::new();
    for (k, op) in ops.iter().enumerate() {
        let pick = |i: usize| known.get(i % known.len().max(1)).cloned();
        let planned = match op {
            Op::Write(spec) => {
                let mut next = 10 * k as u128;
                let ids: Vec<RecordId> = known.iter().map(|(id, _)| *id).collect();
                let (authority, obs) = build(spec, &mut next, &ids);
                for id in std::iter::once(obs.event).chain(obs.claims.iter().map(|c| c.id)) {
                    known.push((id, obs.access.clone()));
                }
                let scope = Some(obs.access.clone());
                Planned {
                    step: Step::Write(authority, obs),
                    scope,
                }
            }
            Op::Resolve(i) => {
                let Some((id, access)) = pick(*i) else {
                    continue;
                };
                Planned {
                    step: Step::Resolve(id, tenant_wide(&access)),
                    scope: Some(access),
                }
            }
            Op::Forget { what, pick: i, at } => {
                let Some((id, access)) = pick(*i) else {
                    continue;
                };
                let forget = match what {
                    0 => Forget::EvictFromHot(id),
                    1 => Forget::Deprioritize(id, 40),
                    2 => Forget::Expire(id, Timestamp(*at)),
                    _ => Forget::Delete(id),
                };
                Planned {
                    step: Step::Forget(forget, tenant_wide(&access)),
                    scope: Some(access),
                }
            }
            Op::ExpireDue(now) => Planned {
                step: Step::ExpireDue(Timestamp(*now)),
                scope: None,
            },
        };
        out.push(planned);
    }
    out
}

/// Runs the steps `keep` admits; refused steps change nothing. Returns the view and the
/// positions (in `steps`) of the steps that changed it.
fn run(steps: &[Planned], keep: impl Fn(&Planned) -> bool) -> (MemoryView, Vec<usize>) {
    let mut view = MemoryView::new();
    let mut changed = Vec::new();
    for (k, p) in steps.iter().enumerate().filter(|(_, p)| keep(p)) {
        let next = match &p.step {
            Step::Write(authority, obs) => write(&view, authority, obs).ok().map(|(v, _)| v),
            Step::Resolve(winner, authority) => view
                .open_needs()
                .find(|n| n.records.contains(winner))
                .map(|n| n.id)
                .and_then(|need| resolve(&view, authority, need, *winner, Timestamp(99)).ok())
                .map(|(v, _)| v),
            Step::Forget(op, authority) => op.apply(&view, authority).ok().map(|(v, _)| v),
            Step::ExpireDue(now) => Some(expire_due(&view, *now).0),
        };
        if let Some(next) = next {
            if next != view {
                changed.push(k);
            }
            view = next;
        }
    }
    (view, changed)
}

/// What the reader gets: a default query at `now` (version-based and decaying freshness), and
/// the whole history in every status.
fn seen(view: &MemoryView, reader: &Principal, now: u64, budget: u32) -> [Retrieval; 2] {
    let current = Query::new(&everything(), budget, Timestamp(now));
    let history = Query::new(&everything(), u32::MAX, Timestamp(now))
        .include_history()
        .statuses(&ALL_STATUSES)
        .redundancy(0.0)
        .expect("valid");
    [
        retrieve(view, reader, &current, &FreshnessPolicy::default()),
        retrieve(view, reader, &history, &timeless()),
    ]
}

proptest! {
    #![proptest_config(Config { cases: 128, ..Config::default() })]

    #[test]
    fn what_a_reader_cannot_see_changes_nothing_they_retrieve(
        ops in prop::collection::vec(arb_op(), 1..30),
        reader in arb_reader(),
        now in 0..45u64,
        budget in prop_oneof![Just(40u32), Just(u32::MAX)],
    ) {
        let steps = plan(&ops);
        let (all, _) = run(&steps, |_| true);
        let (own, _) = run(&steps, |p| p.scope.as_ref().is_none_or(|s| reader.can_read(s)));
        let [full_now, full_history] = seen(&all, &reader, now, budget);
        let [own_now, own_history] = seen(&own, &reader, now, budget);
        prop_assert_eq!(full_history, own_history);
        prop_assert_eq!(full_now, own_now);
    }
}

/// The property is only as good as the histories: over a fixed seed, most of them change records
/// the reader cannot see (so the two runs differ), and many of those changes are writes about an
/// object and kind the reader also has records of, where an unscoped relation would show.
#[test]
fn histories_act_outside_the_readers_scope() {
    let mut runner = TestRunner::deterministic();
    let strategy = (prop::collection::vec(arb_op(), 1..30), arb_reader());
    let (mut cases, mut differing, mut unseen, mut next_to_seen) = (0, 0, 0, 0);
    for _ in 0..100 {
        let (ops, reader) = strategy.new_tree(&mut runner).expect("generate").current();
        let steps = plan(&ops);
        let (all, changed) = run(&steps, |_| true);
        let (own, _) = run(&steps, |p| {
            p.scope.as_ref().is_none_or(|s| reader.can_read(s))
        });
        cases += 1;
        differing += usize::from(all != own);
        for k in changed {
            if steps[k].scope.as_ref().is_none_or(|s| reader.can_read(s)) {
                continue;
            }
            unseen += 1;
            if let Step::Write(_, obs) = &steps[k].step {
                let near = obs.claims.iter().any(|c| {
                    all.about(&c.object).any(|r| {
                        !r.is_event()
                            && r.record().kind == c.kind
                            && reader.can_read(&r.record().access)
                    })
                });
                next_to_seen += usize::from(near);
            }
        }
    }
    eprintln!(
        "{differing} of {cases} histories differ; {unseen} unseen changes, {next_to_seen} of them \
         writes next to records the reader sees"
    );
    assert!(differing * 2 > cases, "{differing} of {cases}");
    assert!(
        unseen > cases && next_to_seen * 4 > cases,
        "{unseen}, {next_to_seen}"
    );
}
