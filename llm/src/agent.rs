//! The model agent (documented on [`LlmAgent`]).

use std::collections::{BTreeMap, VecDeque};

use quorate_protocols::{ActionId, ResultKind};
use quorate_workers::{Agent, AgentContext, Observation, Proposal};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::chat::{ChatAnswer, ChatParams, Message, Role, ToolCall, ToolChoice, ToolSpec};
use crate::prompt::{fit, opening, Quoted};

/// The instruction of a task without a goal.
pub const DEFAULT_GOAL: &str = "Answer from the data below.";

/// What an [`LlmAgent`] is given.
#[derive(Clone, Debug, PartialEq)]
pub struct LlmAgentConfig {
    /// The model's name: its calls go to tool `model.<name>`.
    pub model: String,
    /// `max_tokens` of each call.
    pub max_tokens: u64,
    /// The context budget of the prompt, in estimated tokens.
    pub context_tokens: u64,
    /// The tools offered to the model (the gate, not this list, decides what may run).
    pub tools: Vec<ToolSpec>,
    /// `tool_choice` of the first model call that offers tools (later ones use `auto`). A
    /// small model rarely calls a tool unless told to.
    pub first_tool_choice: ToolChoice,
    /// How many model calls may offer tools; after them the model is asked for its answer
    /// without tools.
    pub tool_rounds: u32,
    /// Memory records retrieved for the task (quoted after the evidence).
    pub memory: Vec<Quoted>,
}

impl LlmAgentConfig {
    /// Model `model`, `max_tokens` per call, a 1536-token context, no tools, one tool round.
    #[must_use]
    pub fn new(model: impl Into<String>, max_tokens: u64) -> Self {
        Self {
            model: model.into(),
            max_tokens,
            context_tokens: 1_536,
            tools: Vec::new(),
            first_tool_choice: ToolChoice::Auto,
            tool_rounds: 1,
            memory: Vec::new(),
        }
    }

    /// Offers `tool` too.
    #[must_use]
    pub fn with_tool(mut self, tool: ToolSpec) -> Self {
        self.tools.push(tool);
        self
    }

    /// The name of the model's tool: `model.<name>`.
    #[must_use]
    pub fn model_tool(&self) -> String {
        format!("model.{}", self.model)
    }
}

enum Phase {
    Start,
    AwaitModel { tools_offered: bool },
    AwaitTool { call_id: String, tool: String },
    Done,
}

/// [`LlmAgent`]: an [`Agent`] whose policy is a language model, and which still never runs
/// anything itself.
///
/// `propose` stays synchronous and pure. The model call is a proposal like any other:
/// `CallTool { tool: "model.<name>", params: ChatParams }`, which the gate checks (capability
/// `model.<name>`, budget reserved before the call) and the runtime executes and records. The
/// answer comes back as the next [`Observation`]; the model's tool calls become `CallTool`
/// proposals of their own, through the same gate, and each observation (an output, a tool
/// error, or the gate's refusal with its reason) goes back to the model as a `tool` message.
///
/// The loop, one proposal per step:
///
/// 1. the opening prompt ([`crate::prompt::opening`]) → model call;
/// 2. the model asked for tools (and a tool round is left) → one `CallTool` per tool call, in
///    order, then the next model call with the results;
/// 3. the model answered text → `Finish`.
///
/// **The answer's kind.** The answer is `{ "answer", "model", "cites" }`, where `cites` lists
/// the tool outputs the runtime recorded in this attempt that the model saw before answering
/// (action id and tool). With at least one, it finishes as a `verified-conclusion` resting on
/// them; with none (the model answered from its prompt alone), as a `suggestion`, which a task
/// accepts only if its acceptance lists `suggestion`. The model's own output is not evidence.
pub struct LlmAgent {
    config: LlmAgentConfig,
    phase: Phase,
    conversation: Vec<Message>,
    queue: VecDeque<ToolCall>,
    rounds: u32,
    cites: Vec<(ActionId, String)>,
    last_text: Option<String>,
    by_wire: BTreeMap<String, String>,
}

impl LlmAgent {
    /// A fresh agent (one per task attempt).
    #[must_use]
    pub fn new(config: LlmAgentConfig) -> Self {
        let by_wire = config
            .tools
            .iter()
            .map(|t| (t.wire_name(), t.name.clone()))
            .collect();
        Self {
            config,
            phase: Phase::Start,
            conversation: Vec::new(),
            queue: VecDeque::new(),
            rounds: 0,
            cites: Vec::new(),
            last_text: None,
            by_wire,
        }
    }

    /// The conversation so far (the opening prompt, the model's turns, the tool messages).
    #[must_use]
    pub fn conversation(&self) -> &[Message] {
        &self.conversation
    }

    fn model_call(&mut self) -> Proposal {
        let offer = self.rounds < self.config.tool_rounds && !self.config.tools.is_empty();
        let tool_choice = match (&self.config.first_tool_choice, self.rounds) {
            (choice, 0) if offer => choice.clone(),
            _ => ToolChoice::Auto,
        };
        if offer {
            self.rounds += 1;
        }
        let params = ChatParams {
            messages: self.conversation.clone(),
            tools: if offer {
                self.config.tools.clone()
            } else {
                Vec::new()
            },
            tool_choice,
            max_tokens: self.config.max_tokens,
        };
        self.phase = Phase::AwaitModel {
            tools_offered: offer,
        };
        Proposal::CallTool {
            tool: self.config.model_tool(),
            params: serde_json::to_value(params)
                .expect("chat params serialize")
                .into(),
            intent_version: 0,
            needs_approval: false,
        }
    }

    /// The next queued tool call as a proposal, or the next model call once none is left.
    fn next_call(&mut self) -> Proposal {
        while let Some(call) = self.queue.pop_front() {
            let tool = self
                .by_wire
                .get(&call.function.name)
                .cloned()
                .unwrap_or_else(|| call.function.name.replace("__", "."));
            let params = match serde_json::from_str::<Value>(&call.function.arguments) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) | Err(_) if call.function.arguments.trim().is_empty() => json!({}),
                Ok(other) => {
                    self.conversation.push(Message::tool_result(
                        &call.id,
                        format!("not run: the arguments must be a JSON object, not {other}"),
                    ));
                    continue;
                }
                Err(e) => {
                    self.conversation.push(Message::tool_result(
                        &call.id,
                        format!("not run: the arguments are not JSON ({e})"),
                    ));
                    continue;
                }
            };
            let needs_approval = self
                .config
                .tools
                .iter()
                .any(|t| t.name == tool && t.needs_approval);
            self.phase = Phase::AwaitTool {
                call_id: call.id.clone(),
                tool: tool.clone(),
            };
            return Proposal::CallTool {
                tool,
                params: params.into(),
                intent_version: 0,
                needs_approval,
            };
        }
        self.model_call()
    }

    fn finish(&mut self, text: String) -> Proposal {
        self.phase = Phase::Done;
        let cites: Vec<Value> = self
            .cites
            .iter()
            .map(|(action, tool)| json!({ "action": action.to_string(), "tool": tool }))
            .collect();
        let kind = if cites.is_empty() {
            ResultKind::Suggestion
        } else {
            ResultKind::VerifiedConclusion
        };
        // The citations travel in the reply's `evidence`, where acceptance resolves them
        // against the calls the runtime recorded for this attempt; `cites` in the value is
        // for whoever reads the answer.
        let evidence = self
            .cites
            .iter()
            .map(|(action, _)| quorate_protocols::EvidenceRef::Action { action: *action })
            .collect();
        Proposal::Finish {
            kind,
            value: json!({ "answer": text, "model": self.config.model, "cites": cites }).into(),
            evidence,
        }
    }

    fn fail(&mut self, observation: String) -> Proposal {
        self.phase = Phase::Done;
        Proposal::Fail { observation }
    }

    fn on_model(&mut self, observation: Option<&Observation>, tools_offered: bool) -> Proposal {
        let answer = match observation {
            Some(Observation::Output { output, .. }) => {
                match ChatAnswer::deserialize(output.value()) {
                    Ok(a) => a,
                    Err(e) => return self.fail(format!("the model's answer is unreadable: {e}")),
                }
            }
            Some(other) => return self.fail(format!("the model call did not answer: {other}")),
            None => return self.fail("no observation of the model call".to_owned()),
        };
        if let Some(text) = answer.content.as_ref().filter(|t| !t.trim().is_empty()) {
            self.last_text = Some(text.clone());
        }
        if !answer.tool_calls.is_empty() && tools_offered {
            // Content "" rather than null: some servers (llama-cpp-python) refuse a null.
            let mut turn =
                Message::text(Role::Assistant, answer.content.clone().unwrap_or_default());
            turn.tool_calls.clone_from(&answer.tool_calls);
            self.conversation.push(turn);
            self.queue = answer.tool_calls.into_iter().collect();
            return self.next_call();
        }
        match self.last_text.clone() {
            Some(text) => self.finish(text),
            None => self.fail(format!(
                "the model gave no answer (finish reason {})",
                answer.finish_reason.as_deref().unwrap_or("none")
            )),
        }
    }

    fn on_tool(
        &mut self,
        observation: Option<&Observation>,
        call_id: &str,
        tool: &str,
    ) -> Proposal {
        let budget = self.config.context_tokens / 4;
        let text = match observation {
            Some(Observation::Output { action, output, .. }) => {
                self.cites.push((*action, tool.to_owned()));
                let data = match output.value() {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                // The source names the tool, not the action id: a prompt without run-specific
                // ids gets the same answer from a model at temperature 0 (the id is in `cites`).
                Quoted::new(format!("tool:{tool}"), fit(&data, budget)).block()
            }
            Some(Observation::ToolError { class, message, .. }) => {
                format!("the tool failed ({class}): {}", fit(message, budget))
            }
            Some(Observation::Rejected { reason, .. }) => {
                format!("refused by the runtime's gate, nothing ran: {reason}")
            }
            Some(other) => other.to_string(),
            None => "no answer".to_owned(),
        };
        self.conversation.push(Message::tool_result(call_id, text));
        self.next_call()
    }
}

impl Agent for LlmAgent {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        if ctx.remaining.steps == 0 && !matches!(self.phase, Phase::Done) {
            // No step is left to observe a call's outcome: answer with what there is.
            return match self.last_text.clone() {
                Some(text) => self.finish(text),
                None => self.fail("out of steps before the model answered".to_owned()),
            };
        }
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Start => {
                let mut data: Vec<Quoted> = ctx
                    .inputs
                    .iter()
                    .map(|i| {
                        let text = match &*i.value {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        Quoted::new(format!("input:{}", i.node), text)
                    })
                    .collect();
                data.extend(
                    ctx.evidence_text
                        .iter()
                        .enumerate()
                        .map(|(i, t)| Quoted::new(format!("evidence[{i}]"), t.clone())),
                );
                data.extend(self.config.memory.iter().cloned());
                let goal = ctx.goal.unwrap_or(DEFAULT_GOAL).to_owned();
                self.conversation = opening(&goal, &data, self.config.context_tokens);
                self.model_call()
            }
            Phase::AwaitModel { tools_offered } => {
                self.on_model(ctx.last_observation, tools_offered)
            }
            Phase::AwaitTool { call_id, tool } => {
                self.on_tool(ctx.last_observation, &call_id, &tool)
            }
            Phase::Done => self.fail("the agent already answered".to_owned()),
        }
    }
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
