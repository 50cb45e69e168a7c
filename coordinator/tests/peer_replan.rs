//! `[fallback]` in peer mode: a failed store precondition switches every peer to the fallback
//! plan, the peers agreeing on the plan version by one CAS on `plan/<run>`; completed tasks
//! carry over, dropped ones are cancelled, and a peer whose own check passed follows the
//! stored version.

mod peer_net;
mod support;

use quorate_coordinator::{EventKind, StopReason};
use quorate_protocols::wire::Control;
use quorate_protocols::TaskState;
use quorate_state::MemoryStore;
use serde_json::json;

use peer_net::{replan_fallback as fallback, replan_first_plan as first_plan, Net, ROOT};

/// The names of the nodes peer `p`'s net executed, in order.
fn executed(net: &Net) -> Vec<&str> {
    net.executed.iter().map(|(_, n)| n.as_str()).collect()
}

/// Every peer ended completed on plan version 2 with `load` and `draft` completed.
#[track_caller]
fn all_switched_and_completed(net: &Net) {
    assert_eq!(net.done, vec![Some(StopReason::Completed); net.cores.len()]);
    for (p, core) in net.cores.iter().enumerate() {
        assert_eq!(core.plan_version(), 2, "peer {p}");
        let names: Vec<&str> = core
            .plan()
            .spec()
            .nodes
            .iter()
            .map(|n| n.id.as_str())
            .collect();
        assert_eq!(names, ["load", "draft"], "peer {p}");
        assert_eq!(core.task_state(0), TaskState::Completed, "peer {p}");
        assert_eq!(core.task_state(1), TaskState::Completed, "peer {p}");
        let replanned = net.events[p]
            .iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    EventKind::Replanned {
                        plan_version: 2,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(replanned, 1, "peer {p} switched once");
    }
    let root = net.budget.get_now(ROOT).unwrap().value;
    assert!(root.children.is_empty(), "every slice returned: {root:?}");
}

#[test]
fn a_failed_precondition_switches_every_peer_to_the_fallback_by_one_cas() {
    let net = peer_net::switch_to_fallback();
    assert_eq!(
        net.plans.get_now("plan").unwrap().version.raw(),
        1,
        "written once"
    );
    all_switched_and_completed(&net);
    assert_eq!(
        executed(&net),
        ["load", "draft"],
        "load carried over, not run again"
    );
    for (p, events) in net.events.iter().enumerate() {
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
        let failed = kinds.iter().position(|k| *k == "precondition-failed");
        let replanned = kinds.iter().position(|k| *k == "replanned");
        assert!(
            failed < replanned && failed.is_some(),
            "peer {p}: {kinds:?}"
        );
    }
}

#[test]
fn a_peer_whose_own_check_passed_follows_the_stored_plan_version() {
    let mut net = Net::with_fallback(2, first_plan(), fallback(), MemoryStore::new());
    net.ok("load");
    // The peer that ran load found publish's key missing and switched; draft runs there.
    let switched = net.executed[0].0;
    let other = 1 - switched;
    assert_eq!(net.cores[switched].plan_version(), 2);
    assert_eq!(net.running_nodes(), ["draft"]);
    // The key appears before the other peer checks: it claims and runs publish.
    assert!(net
        .results
        .cas_now("config/channel", None, json!("mail").into())
        .is_committed());
    net.deliver_all();
    assert_eq!(net.cores[other].plan_version(), 1);
    assert_eq!(net.running_nodes(), ["draft", "publish"]);
    // draft's record names a task the other peer does not know: it reads plan/<run>, switches
    // (publish is dropped: its worker is told to cancel) and then takes the record.
    net.ok("draft");
    net.deliver_all();
    all_switched_and_completed(&net);
    let publish = net.executed.iter().find(|(_, n)| n == "publish").unwrap();
    assert_eq!(publish.0, other);
    assert!(
        net.controls
            .iter()
            .any(|(p, _, c)| *p == other && *c == Control::Cancel),
        "{:?}",
        net.controls
    );
    let cancelled = net.events[other].iter().any(|e| {
        e.task.as_deref() == Some("publish")
            && matches!(
                e.kind,
                EventKind::Transition {
                    to: TaskState::Cancelled,
                    ..
                }
            )
    });
    assert!(cancelled, "publish cancelled in the other peer's view");
    // Its late answer is refused as late.
    net.ok("publish");
    assert_eq!(net.cores[other].messages().rejected_late, 1);
}

#[test]
fn a_fallback_that_widens_the_budget_is_refused_and_the_task_fails() {
    let mut wide = fallback();
    wide[1].budget = quorate_protocols::Budget::steps(10_000);
    let mut net = Net::with_fallback(2, first_plan(), wide, MemoryStore::new());
    net.ok("load");
    net.deliver_all();
    assert!(net.plans.get_now("plan").is_none(), "nothing proposed");
    for (p, done) in net.done.iter().enumerate() {
        match done {
            Some(StopReason::Failed { node, observation }) => {
                assert_eq!(node, "publish");
                assert!(observation.contains("replan refused"), "{observation}");
            }
            other => panic!("peer {p}: {other:?}"),
        }
        assert_eq!(net.cores[p].plan_version(), 1);
    }
}
