//! Model calls as actions: a tool named `model.<name>` that reserves its own tokens, has its
//! own timeout and may lose its answer goes through the gate, the book, outcome-unknown and
//! the trace like any other call (see docs/models.md, "Model calls as actions").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorate_protocols::{ActionId, Budget, Capability, Component, Payload, ResultKind};
use serde_json::{json, Value};

use crate::agent::{Agent, AgentContext, AgentRegistry, Observation, Proposal};
use crate::testing::Driver;
use crate::tool::{SideEffect, Tool, ToolAnswer, ToolFuture, ToolRegistry};
use crate::{Effect, GateRejection};
use quorate_protocols::wire::{Assignment, CallEvent, Control, Outcome};

/// A model behind a tool: it reserves `prompt estimate + max_tokens` (a token per 4 bytes of
/// the messages' JSON), takes 30 s before timing out, and answers from a script (an empty
/// script: a call that never answers).
struct ScriptedModel {
    answers: Mutex<VecDeque<ToolAnswer>>,
}

impl ScriptedModel {
    fn new(answers: impl IntoIterator<Item = ToolAnswer>) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(answers.into_iter().collect()),
        })
    }
}

/// The prompt estimate [`ScriptedModel`] reserves for `params`.
fn estimate(params: &Value) -> u64 {
    params["messages"].to_string().len() as u64 / 4
}

impl Tool for ScriptedModel {
    fn name(&self) -> &str {
        "model.small"
    }
    fn capability(&self) -> Capability {
        Capability::new("model.small").unwrap()
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }
    fn reservation(&self, params: &Value) -> Option<Budget> {
        let max_tokens = params["max_tokens"].as_u64().unwrap_or(0);
        Some(Budget::new(0, 0, estimate(params) + max_tokens, 0))
    }
    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(30))
    }
    fn call(&self, _: ActionId, _: Payload) -> ToolFuture<ToolAnswer> {
        match self.answers.lock().unwrap().pop_front() {
            Some(answer) => Box::pin(std::future::ready(answer)),
            None => Box::pin(std::future::pending()),
        }
    }
}

/// A completion as a model tool returns it: the server's usage and finish reason.
fn completion(text: &str, prompt: u64, completion: u64) -> ToolAnswer {
    ToolAnswer::Ok {
        output: json!({
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
        })
        .into(),
        cost: Budget::new(0, 0, prompt + completion, 0),
        changed: false,
    }
}

/// Asks the model once with `max_tokens`, then finishes with its answer; a refusal ends it
/// with the refusal as its failure.
struct AskOnce {
    max_tokens: u64,
}

impl Agent for AskOnce {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        match ctx.last_observation {
            None => Proposal::CallTool {
                tool: "model.small".into(),
                params: json!({
                    "messages": [{"role": "user", "content": "say hi"}],
                    "max_tokens": self.max_tokens,
                })
                .into(),
                intent_version: 0,
                needs_approval: false,
            },
            Some(Observation::Output { output, .. }) => Proposal::Finish {
                kind: ResultKind::Suggestion,
                value: output["message"]["content"].clone().into(),
                evidence: Vec::new(),
            },
            Some(other) => Proposal::Fail {
                observation: format!("{other:?}"),
            },
        }
    }
}

fn driver(model: Arc<ScriptedModel>, max_tokens: u64) -> Driver {
    let agents = AgentRegistry::new()
        .with_fallback(move |_: &Assignment| Box::new(AskOnce { max_tokens }) as Box<dyn Agent>);
    let mut tools = ToolRegistry::new();
    tools.register(model).unwrap();
    Driver::with(agents, tools, crate::World::new())
}

fn assign(d: &mut Driver, tokens: u64) {
    d.assign(
        0,
        Driver::assignment(&["model.small"], Budget::new(10, 5, tokens, 0)),
    );
}

const ASK: &str = r#"[{"content":"say hi","role":"user"}]"#;

#[test]
fn a_model_call_whose_reservation_does_not_fit_is_refused_before_it_is_sent() {
    let mut d = driver(ScriptedModel::new([completion("hi", 9, 2)]), 500);
    assign(&mut d, 100);
    d.drive();
    assert!(d.calls.is_empty(), "no Effect::CallTool: {:?}", d.calls);
    let reason = GateRejection::ReservationTooLarge {
        tool: "model.small".into(),
        component: Component::Tokens,
        requested: 500 + ASK.len() as u64 / 4,
        available: 100,
    };
    let report = d.last();
    assert_eq!(
        report.calls,
        [CallEvent::CallRejected {
            tool: "model.small".into(),
            reason: reason.to_string(),
            class: "rejected:reservation".into(),
        }]
    );
    // The agent saw why (and may ask for less); nothing but its two steps was spent.
    assert!(
        matches!(&report.outcome, Outcome::Failed { observation }
            if observation.contains("ReservationTooLarge") && observation.contains("100")),
        "{:?}",
        report.outcome
    );
    assert_eq!(report.spent, Budget::new(2, 0, 0, 0));
}

#[test]
fn a_model_call_reserves_its_own_tokens_and_is_settled_with_the_reported_usage() {
    let mut d = driver(ScriptedModel::new([completion("hi", 31, 9)]), 64);
    assign(&mut d, 1000);
    d.drive();
    let report = d.last();
    assert!(matches!(&report.outcome, Outcome::Answer { value, .. } if **value == "hi"));
    // Reserved: one tool call, the prompt estimate plus max_tokens (not the 1000 left).
    let reserved = Budget::new(0, 1, ASK.len() as u64 / 4 + 64, 0);
    let CallEvent::CallStarted {
        reserved: r,
        model: Some(request),
        ..
    } = &report.calls[0]
    else {
        panic!("call-started: {:?}", report.calls[0]);
    };
    assert_eq!(*r, reserved);
    assert_eq!(request.messages.len(), 1);
    let CallEvent::CallAnswered {
        cost,
        model: Some(answer),
        ..
    } = &report.calls[1]
    else {
        panic!("call-answered: {:?}", report.calls[1]);
    };
    // Settled with exactly the usage, plus the call; the rest of the reservation released.
    assert_eq!(*cost, Budget::new(0, 1, 40, 0));
    assert_eq!(report.spent, Budget::new(2, 1, 40, 0));
    assert_eq!(
        (answer.prompt_tokens, answer.completion_tokens),
        (Some(31), Some(9))
    );
    assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
}

/// Starts a model call that does not answer; the call's tag and deadline.
fn call_in_flight(d: &mut Driver) -> (ActionId, u64, u64) {
    assign(d, 1000);
    d.now = 5_000;
    let mut call = None;
    while let Some(effect) = d.core.poll_effect() {
        match effect {
            Effect::CallTool(crate::ToolCall {
                action,
                call: tag,
                deadline,
                ..
            }) => call = Some((action, tag, deadline)),
            other => panic!("only a call: {other:?}"),
        }
    }
    call.expect("a call")
}

#[test]
fn a_model_call_times_out_after_the_tools_own_timeout() {
    // The driver's worker times calls out after 1 s; the model's own timeout is 30 s.
    let mut d = driver(ScriptedModel::new([]), 8);
    let (_, _, deadline) = call_in_flight(&mut d);
    assert_eq!(deadline, 30_000, "started at 0, 30 s of the tool's own");
}

#[test]
fn a_lost_answer_makes_the_outcome_unknown_and_the_read_only_call_is_retried_and_charged_again() {
    let lost = ToolAnswer::Lost {
        message: "connection reset".into(),
    };
    let mut d = driver(ScriptedModel::new([lost, completion("hi", 31, 9)]), 64);
    assign(&mut d, 1000);
    d.drive();
    let report = d.last();
    let kinds: Vec<&str> = report
        .calls
        .iter()
        .map(|c| match c {
            CallEvent::CallStarted { .. } => "call-started",
            CallEvent::OutcomeUnknown { .. } => "outcome-unknown",
            CallEvent::Queried { found: false, .. } => "queried-absent",
            CallEvent::Retried { .. } => "retried",
            CallEvent::CallAnswered { .. } => "call-answered",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "call-started",
            "outcome-unknown",
            "queried-absent",
            "retried",
            "call-started",
            "call-answered"
        ]
    );
    assert_eq!(d.calls.len(), 2, "sent twice");
    assert_eq!(report.actions.unknown, 1);
    // Two tool calls charged; the tokens the server reported for the answer that came back.
    assert_eq!(report.spent, Budget::new(2, 2, 40, 0));
    assert!(matches!(&report.outcome, Outcome::Answer { value, .. } if **value == "hi"));
}

#[test]
fn a_cancel_mid_call_aborts_it_and_charges_its_whole_reservation() {
    let mut d = driver(ScriptedModel::new([]), 64);
    let (action, call, _) = call_in_flight(&mut d);
    d.control(Control::Cancel).unwrap();
    let mut aborted = Vec::new();
    while let Some(effect) = d.core.poll_effect() {
        match effect {
            Effect::AbortCall { action, call, .. } => aborted.push((action, call)),
            Effect::Reply(reply) => d.replies.push(*reply),
            other => panic!("no other effect: {other:?}"),
        }
    }
    assert_eq!(aborted, [(action, call)]);
    let report = d.last();
    assert_eq!(report.outcome, Outcome::Cancelled);
    let reserved = Budget::new(0, 1, ASK.len() as u64 / 4 + 64, 0);
    assert_eq!(report.calls.len(), 2, "call-started, call-aborted");
    assert_eq!(
        report.calls[1],
        CallEvent::CallAborted {
            action,
            charged: reserved
        }
    );
    assert_eq!(report.spent, reserved.saturating_add(&Budget::steps(1)));
    assert_eq!(
        d.core.action(&action).map(|r| r.state),
        Some(quorate_protocols::ActionState::OutcomeUnknown)
    );
    // The aborted call's answer, should it come, is late.
    let late = d
        .core
        .handle_tool_answer(d.now, action, call, completion("hi", 1, 1));
    assert!(late.is_err());
}
