//! A conversation's trace grows with its messages, not with its history per call: a worker
//! core runs an agent that talks to a model tool for `n` calls (each call sends the whole
//! conversation so far), and the events that log its report are counted in bytes.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use quorate_protocols::wire::{Assignment, Report};
use quorate_protocols::{
    ActionId, AgentId, Budget, Capabilities, Capability, Envelope, IdSource, NodeId, Payload,
    ResultKind, Role, RunId, Sender, TaskId,
};
use quorate_workers::{
    Agent, AgentContext, AgentRegistry, Effect, Observation, Proposal, SideEffect, Tool,
    ToolAnswer, ToolFuture, ToolRegistry, WorkerConfig, WorkerCore,
};
use serde_json::{json, Value};

use super::BlobLog;

/// Answers every call at once with a 200-byte message.
struct Model;

impl Tool for Model {
    fn name(&self) -> &str {
        "model.small"
    }
    fn capability(&self) -> Capability {
        Capability::new("model.small").unwrap()
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }
    fn reservation(&self, _: &Value) -> Option<Budget> {
        Some(Budget::new(0, 0, 100, 0))
    }
    fn call(&self, _: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let turn = params["messages"].as_array().map_or(0, Vec::len);
        let text = format!("answer {turn:04} {}", "x".repeat(180));
        Box::pin(std::future::ready(ToolAnswer::Ok {
            output: json!({
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "usage": {"prompt_tokens": 50, "completion_tokens": 50},
            })
            .into(),
            cost: Budget::new(0, 0, 100, 0),
            changed: false,
        }))
    }
}

/// Talks for `calls` calls: each call sends the conversation so far plus a new question.
struct Talker {
    calls: usize,
    messages: Vec<Value>,
}

impl Agent for Talker {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        if let Some(Observation::Output { output, .. }) = ctx.last_observation {
            self.messages.push(output["message"].clone());
        }
        if self.messages.len() / 2 == self.calls {
            return Proposal::Finish {
                kind: ResultKind::Suggestion,
                value: json!(self.messages.len()).into(),
                evidence: Vec::new(),
            };
        }
        let n = self.messages.len();
        let text = format!("question {n:04} {}", "y".repeat(180));
        self.messages.push(json!({"role": "user", "content": text}));
        Proposal::CallTool {
            tool: "model.small".into(),
            params: json!({"messages": self.messages, "max_tokens": 50}).into(),
            intent_version: 0,
            needs_approval: false,
        }
    }
}

/// Runs a conversation of `calls` calls; the trace bytes its calls log, and the bytes the
/// calls' parameters would take if each were logged whole.
fn trace_bytes(calls: usize) -> (usize, usize) {
    let agents = AgentRegistry::new().with_fallback(move |_: &Assignment| {
        Box::new(Talker {
            calls,
            messages: Vec::new(),
        }) as Box<dyn Agent>
    });
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Model)).unwrap();
    let mut ids = IdSource::seeded(3);
    let me = AgentId::from_u128(2);
    let mut core = WorkerCore::new(me, WorkerConfig::default(), agents, tools, ids.fork());
    let assignment = Assignment {
        node: NodeId::new("talk").unwrap(),
        role: "talker".into(),
        goal: None,
        inputs: Default::default(),
        capabilities: Capabilities::parse(["model.small"]).unwrap(),
        budget: Budget::new(1000, 1000, 1_000_000, 0),
        evidence_text: vec![],
        preconditions: vec![],
    };
    let supervisor = Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    };
    let task = TaskId::from_u128(4);
    let envelope = Envelope::new(RunId::from_u128(5), task, supervisor, assignment, &mut ids);
    core.handle_assignment(0, envelope).unwrap();
    let mut whole = 0;
    let mut reports: Vec<Report> = Vec::new();
    while let Some(effect) = core.poll_effect() {
        match effect {
            Effect::CallTool(quorate_workers::ToolCall {
                action,
                handle,
                params,
                call,
                ..
            }) => {
                whole += params.to_string().len();
                let mut fut = handle.call(action, params);
                let Poll::Ready(answer) =
                    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
                else {
                    panic!("the model answers at once");
                };
                core.handle_tool_answer(1, action, call, answer).unwrap();
            }
            Effect::Reply(reply) => reports.push(reply.payload),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(reports.len(), 1);
    let mut log = BlobLog::default();
    let mut bytes = 0;
    for call in reports.remove(0).calls {
        for kind in log.events(call) {
            bytes += serde_json::to_string(&kind).unwrap().len();
        }
    }
    (bytes, whole)
}

#[test]
fn a_twenty_call_conversation_logs_each_message_once() {
    let (ten, ten_whole) = trace_bytes(10);
    let (twenty, twenty_whole) = trace_bytes(20);
    // Twice the calls, twice the messages: about twice the bytes (linear), where logging each
    // call's parameters whole would take about four times (quadratic).
    let ratio = twenty as f64 / ten as f64;
    let whole_ratio = twenty_whole as f64 / ten_whole as f64;
    assert!(
        ratio < 2.2,
        "trace grew {ratio:.2}x: {ten} -> {twenty} bytes"
    );
    assert!(
        whole_ratio > 3.5,
        "the whole parameters grow {whole_ratio:.2}x"
    );
    eprintln!("10 calls: {ten} bytes ({ten_whole} whole); 20 calls: {twenty} ({twenty_whole})");
    // Each 200-byte message is in the trace once (an answer twice: as the call's output and as
    // a message of the next call), with the events around it: below half the whole parameters.
    assert!(twenty < twenty_whole / 2, "{twenty} vs {twenty_whole}");
}
