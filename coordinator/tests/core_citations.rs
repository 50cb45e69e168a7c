//! A verified conclusion completes a task only when its citations resolve to what the runtime
//! recorded for the attempt, in both topologies (docs/reliability.md, "A verified conclusion
//! cites the record").

mod peer_net;
mod support;

use quorate_coordinator::{ApprovalPolicy, EventKind, StopReason, SupervisorConfig};
use quorate_protocols::wire::{ActionCounts, CallEvent, Outcome, Report};
use quorate_protocols::{
    Acceptance, ActionId, Budget, Envelope, EvidenceRef, NodeSpec, ResultKind, TaskState,
};
use serde_json::json;

use support::{node, Harness};

/// An answer "done" claiming a verified conclusion, with the given call events and citations.
fn claimed(
    h: &Harness,
    node: &str,
    calls: Vec<CallEvent>,
    evidence: Vec<EvidenceRef>,
) -> Envelope<Report> {
    let (w, a) = h.assignment(node);
    let mut reply = a.reply(
        h.workers[w],
        ResultKind::VerifiedConclusion,
        Report {
            outcome: Outcome::Answer {
                value: json!("done").into(),
                receipts: vec![],
            },
            spent: Budget::steps(1),
            actions: ActionCounts::default(),
            calls,
        },
        &mut support::ids(),
    );
    reply.evidence = evidence;
    reply
}

fn answered(action: ActionId) -> CallEvent {
    CallEvent::CallAnswered {
        action,
        changed: false,
        cost: Budget::ZERO,
        error: None,
        model: None,
    }
}

fn downgrades(events: &[EventKind]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::ConclusionDowngraded { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_uncited_conclusion_fails_its_task_and_says_why() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let reply = claimed(&h, "a", vec![], vec![]);
    h.send(1, reply);
    assert_eq!(h.state(0), TaskState::Failed);
    assert_eq!(
        downgrades(&h.events),
        ["it cites nothing the runtime recorded"]
    );
    assert!(matches!(
        h.stops.as_slice(),
        [StopReason::Failed { observation, .. }]
            if observation.contains("verified-conclusion taken as a suggestion")
    ));
    assert!(h.commits.is_empty(), "nothing is committed");
}

#[test]
fn a_citation_of_a_call_the_reply_does_not_show_is_refused() {
    // A worker that claims a call it did not report: the supervisor goes by the call events.
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let made_up = ActionId::new(h.core.task_id(0), 3, 0);
    let reply = claimed(
        &h,
        "a",
        vec![answered(ActionId::new(h.core.task_id(0), 0, 0))],
        vec![EvidenceRef::Action { action: made_up }],
    );
    h.send(1, reply);
    assert_eq!(h.state(0), TaskState::Failed);
    assert_eq!(
        downgrades(&h.events),
        [format!(
            "it cites action {made_up}, which the runtime did not record for this attempt"
        )]
    );
}

#[test]
fn a_task_that_accepts_suggestions_completes_with_the_downgraded_answer() {
    let lenient = node("a", &[]).with_acceptance(Acceptance {
        kinds: vec![ResultKind::Suggestion],
        ..Acceptance::default()
    });
    let mut h = Harness::new(vec![lenient], SupervisorConfig::default());
    let reply = claimed(&h, "a", vec![], vec![]);
    h.send(1, reply);
    assert_eq!(h.state(0), TaskState::Completed);
    assert_eq!(
        downgrades(&h.events).len(),
        1,
        "the downgrade stays visible"
    );
}

#[test]
fn calls_reported_before_an_approval_request_and_inputs_can_be_cited() {
    let config = SupervisorConfig {
        approvals: ApprovalPolicy::All,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[]), node("b", &["a"])], config);
    let read = ActionId::new(h.core.task_id(0), 0, 0);
    let write = ActionId::new(h.core.task_id(0), 1, 0);
    // The read's answer travels with the approval request of the write; the answer cites it.
    let mut ask = h.reply(
        "a",
        ResultKind::Suggestion,
        Outcome::ApprovalRequested {
            action: write,
            reason: "writes".into(),
        },
    );
    ask.payload.calls = vec![answered(read)];
    h.send(1, ask);
    let reply = claimed(&h, "a", vec![], vec![EvidenceRef::Action { action: read }]);
    h.send(2, reply);
    assert_eq!(h.state(0), TaskState::Completed);
    // b rests on its input.
    let input = EvidenceRef::Input {
        node: quorate_protocols::NodeId::new("a").unwrap(),
    };
    let reply = claimed(&h, "b", vec![], vec![input]);
    h.send(3, reply);
    assert_eq!(h.state(1), TaskState::Completed);
    assert!(downgrades(&h.events).is_empty());
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn a_peer_refuses_an_uncited_conclusion_as_the_star_does() {
    let nodes: Vec<NodeSpec> = vec![node("a", &[])];
    let mut net = peer_net::Net::new(2, nodes, None);
    let (p, env) = net.running.remove(0);
    let mut reply = env.reply(
        net.workers[p],
        ResultKind::VerifiedConclusion,
        Report {
            outcome: Outcome::Answer {
                value: json!("done").into(),
                receipts: vec![],
            },
            spent: Budget::steps(1),
            actions: ActionCounts::default(),
            calls: vec![],
        },
        &mut support::ids(),
    );
    reply.evidence = vec![];
    net.cores[p].handle_worker_reply(0, reply);
    net.drain(p);
    net.deliver_all();
    assert_eq!(net.cores[p].task_state(0), TaskState::Failed);
    let reasons: Vec<&EventKind> = net.events[p]
        .iter()
        .map(|e| &e.kind)
        .filter(|k| matches!(k, EventKind::ConclusionDowngraded { .. }))
        .collect();
    assert_eq!(reasons.len(), 1, "{:?}", net.events[p]);
}
