//! A task's result is one value from the agent's answer to the result store and every
//! dependent's input, in both topologies (issue 14, item 8: payloads are shared, not copied).
//! The worker side of the same rule (a call's parameters and output) is
//! `quorate-workers`' `a_calls_parameters_and_output_are_shared_not_copied`.

use std::sync::{Arc, Mutex};

use quorate::coordinator::peer::run_peer;
use quorate::coordinator::run_star;
use quorate::protocols::wire::SharedEvidence;
use quorate::protocols::{Acceptance, EvidenceRef, NodeSpec, Payload, ResultKind};
use quorate::workers::{Agent, AgentContext, AgentRegistry, Proposal, ToolRegistry};
use serde_json::json;

mod support;

/// What the agents saw: the answer task `a` gave, and the input task `b` got from it.
#[derive(Default)]
struct Seen {
    answered: Option<Payload>,
    received: Option<Payload>,
}

/// Answers `a` with a fresh object (kept in `seen`), and `b` with what its input was.
struct Answering(Arc<Mutex<Seen>>);

impl Agent for Answering {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let mut seen = self.0.lock().expect("not poisoned");
        match ctx.inputs.first() {
            // A first-layer task's answer rests on nothing: a suggestion, which `a` accepts.
            None => {
                let value = Payload::from(json!({ "rows": ["a", "b", "c"] }));
                seen.answered = Some(value.clone());
                Proposal::Finish {
                    kind: ResultKind::Suggestion,
                    value,
                    evidence: Vec::new(),
                }
            }
            Some(input) => {
                seen.received = Some(input.value.clone());
                Proposal::Finish {
                    kind: ResultKind::VerifiedConclusion,
                    value: input.value.clone(),
                    evidence: vec![EvidenceRef::Input {
                        node: input.node.clone(),
                    }],
                }
            }
        }
    }
}

/// Runs `nodes` (the first accepts a suggestion; each has a budget of 2 steps) to completion in
/// `topology` on two workers, every task answered by `agent()`.
fn run_completed<A: Agent + 'static>(
    topology: &str,
    nodes: Vec<NodeSpec>,
    agent: impl Fn() -> A + Clone + Send + Sync + 'static,
) -> quorate::coordinator::RunOutput {
    let suggestion = Acceptance {
        kinds: vec![ResultKind::Suggestion],
        ..Acceptance::default()
    };
    let plan = support::two_step_plan(
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, n)| match i {
                0 => n.with_acceptance(suggestion.clone()),
                _ => n,
            })
            .collect(),
    );
    let options = support::two_workers(None);
    let parts = move || {
        let agent = agent.clone();
        (
            AgentRegistry::new().with_fallback(move |_: &quorate::workers::Assignment| {
                Box::new(agent()) as Box<dyn Agent>
            }),
            ToolRegistry::new(),
        )
    };
    let out = match topology {
        "star" => run_star(plan, options, parts),
        _ => run_peer(plan, options, parts),
    }
    .expect("the run runs");
    assert_eq!(
        out.report.stop_reason.as_deref(),
        Some("completed"),
        "{topology}: {:?}",
        out.report
    );
    out
}

#[test]
fn a_result_is_one_value_from_the_answer_to_the_store_and_the_dependent() {
    for topology in ["star", "peer"] {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let agents = seen.clone();
        let nodes = vec![NodeSpec::named("a"), NodeSpec::named("b").after(&["a"])];
        let out = run_completed(topology, nodes, move || Answering(agents.clone()));
        let seen = seen.lock().expect("not poisoned");
        let answered = seen.answered.as_ref().expect("a answered");
        let stored = out.result("a").expect("a's result is stored");
        assert_eq!(stored, json!({ "rows": ["a", "b", "c"] }), "{topology}");
        assert!(
            Payload::ptr_eq(answered, &stored),
            "{topology}: the store holds a's answer itself, not a copy"
        );
        let received = seen.received.as_ref().expect("b ran");
        assert!(
            Payload::ptr_eq(answered, received),
            "{topology}: b's input is a's answer itself"
        );
        let b = out.result("b").expect("b's result is stored");
        assert!(Payload::ptr_eq(answered, &b), "{topology}: forwarded as is");
    }
}

/// What the two dependents `c` and `d` of `b` got as `b`'s evidence, and what `b` got as `a`'s.
#[derive(Default)]
struct Cited {
    from_a: Option<SharedEvidence>,
    from_b: Vec<SharedEvidence>,
}

/// `a` answers citing nothing; `b` cites its input `a`; `c` and `d` keep the evidence of `b`.
struct Citing(Arc<Mutex<Cited>>);

impl Agent for Citing {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let mut cited = self.0.lock().expect("not poisoned");
        let Some(input) = ctx.inputs.first() else {
            return Proposal::Finish {
                kind: ResultKind::Suggestion,
                value: Payload::from(json!(1)),
                evidence: Vec::new(),
            };
        };
        if input.node.as_str() == "a" {
            cited.from_a = Some(input.evidence.clone());
        } else {
            cited.from_b.push(input.evidence.clone());
        }
        Proposal::Finish {
            kind: ResultKind::VerifiedConclusion,
            value: input.value.clone(),
            evidence: vec![EvidenceRef::Input {
                node: input.node.clone(),
            }],
        }
    }
}

#[test]
fn a_dependencys_evidence_is_one_list_for_its_dependents_and_none_when_it_cites_nothing() {
    for topology in ["star", "peer"] {
        let cited = Arc::new(Mutex::new(Cited::default()));
        let agents = cited.clone();
        let nodes = vec![
            NodeSpec::named("a"),
            NodeSpec::named("b").after(&["a"]),
            NodeSpec::named("c").after(&["b"]),
            NodeSpec::named("d").after(&["b"]),
        ];
        run_completed(topology, nodes, move || Citing(agents.clone()));
        let cited = cited.lock().expect("not poisoned");
        let from_a = cited.from_a.as_ref().expect("b ran");
        assert!(from_a.is_empty(), "{topology}: a cited nothing");
        assert_eq!(from_a, &SharedEvidence::default(), "{topology}");
        let [c, d] = cited.from_b.as_slice() else {
            panic!("{topology}: c and d each ran once: {:?}", cited.from_b);
        };
        let a = quorate::protocols::NodeId::new("a").expect("a valid id");
        assert_eq!(c.as_slice(), [EvidenceRef::Input { node: a }], "{topology}");
        assert_eq!(c, d, "{topology}");
        if topology == "star" {
            // One supervisor hands both dependents the list it kept for b.
            assert!(SharedEvidence::ptr_eq(c, d), "star: one list, not copies");
        }
    }
}
