//! The invariants every simulated run keeps (see the crate docs).

use std::collections::HashMap;

use quorate_coordinator::EventKind;

use super::{Outcome, Shared};

pub(super) fn check_invariants(s: &Shared, o: &Outcome) {
    let stops = o
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RunStopped { .. }))
        .count();
    assert_eq!(stops, 1, "exactly one stop event");
    assert!(o.report.stop.is_some(), "a stop reason");
    let mut accepted: HashMap<String, usize> = HashMap::new();
    for e in &o.events {
        match &e.kind {
            EventKind::Transition { from, to } => {
                assert!(
                    !from.is_terminal(),
                    "task {:?} left terminal state {from:?} for {to:?}",
                    e.task
                );
            }
            EventKind::ReplyAccepted => {
                *accepted
                    .entry(e.task.as_deref().unwrap_or("").to_string())
                    .or_default() += 1;
            }
            _ => {}
        }
    }
    for (task, n) in &accepted {
        assert!(*n <= 1, "task {task}: {n} replies accepted");
    }
    let mut per_action: HashMap<_, usize> = HashMap::new();
    for effect in s.world.effects() {
        *per_action.entry(effect.action).or_default() += 1;
    }
    assert!(
        per_action.values().all(|&n| n == 1),
        "one world effect per ActionId"
    );
    for row in &o.report.tasks {
        let key = quorate_coordinator::result_key(o.report.run_id, &row.id);
        let stored = s.results.get_now(&key);
        if row.state == quorate_protocols::TaskState::Completed {
            let stored = stored.expect("completed task has a result");
            assert_eq!(stored.value, serde_json::json!(row.id.to_uppercase()));
        }
    }
    let b = &o.report.budget;
    assert!(b.spent.fits_within(&b.limit), "spent <= limit");
    let outstanding = b.granted.saturating_sub(&b.returned);
    let held = b.reserve.checked_add(&outstanding).expect("no overflow");
    assert!(
        held.fits_within(&b.limit),
        "reserve + outstanding within the limit: {b:?}"
    );
}
