//! The chat-completions data: what a `model.<name>` tool call carries ([`ChatParams`]) and
//! answers ([`ChatAnswer`]), in the OpenAI-compatible shape every such server speaks.
//!
//! Pure data. The HTTP client (feature `http`) sends a [`ChatParams`] with the configured model
//! name and reads the server's JSON back into a [`ChatAnswer`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The runtime's framing (what the model is for, how to read quoted data).
    System,
    /// The task: goal, inputs, evidence (as quoted data).
    User,
    /// The model's own earlier turns.
    Assistant,
    /// A tool's answer (or the gate's refusal) to one of the model's tool calls.
    Tool,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text (`None` for an assistant turn that only calls tools).
    #[serde(default)]
    pub content: Option<String>,
    /// The tool calls of an assistant turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message of `role` saying `text`.
    #[must_use]
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// The answer to tool call `id`.
    #[must_use]
    pub fn tool_result(id: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: Some(text.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(id.into()),
        }
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The server's id for it (a `tool` message names it).
    #[serde(default)]
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// What to call.
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

/// The function part of a [`ToolCall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name, as the model was offered it (see [`ToolSpec::wire_name`]).
    pub name: String,
    /// Its arguments: a JSON document, as text (the model may write anything here).
    #[serde(default)]
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The runtime's tool name (`docs.read`).
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// A JSON schema of its parameters.
    #[serde(default = "object_schema")]
    pub parameters: Value,
    /// Propose its calls with `needs_approval` (a person approves before it runs).
    #[serde(default)]
    pub needs_approval: bool,
}

fn object_schema() -> Value {
    serde_json::json!({ "type": "object" })
}

impl ToolSpec {
    /// A tool named `name`, described as `description`, taking any object.
    #[must_use]
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters: object_schema(),
            needs_approval: false,
        }
    }

    /// The name the model sees: OpenAI-compatible servers take function names of
    /// `a-z A-Z 0-9 _ -` only, so every other character becomes `__` (`docs.read` is offered
    /// as `docs__read`); [`LlmAgent`](crate::LlmAgent) maps the model's call back.
    #[must_use]
    pub fn wire_name(&self) -> String {
        wire_name(&self.name)
    }

    /// The `tools` entry of a request.
    #[must_use]
    pub fn to_wire(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.wire_name(),
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// `name` with every character outside `a-z A-Z 0-9 _ -` replaced by `__`.
#[must_use]
pub fn wire_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else {
            out.push_str("__");
        }
    }
    out
}

/// What the model may do about tools in one call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolChoice {
    /// The model decides (`"auto"`).
    #[default]
    Auto,
    /// No tool call (`"none"`).
    None,
    /// It must call this tool (the runtime's name; sent as its wire name).
    Tool(String),
}

impl ToolChoice {
    /// The request's `tool_choice` value.
    #[must_use]
    pub fn to_wire(&self) -> Value {
        match self {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Tool(name) => serde_json::json!({
                "type": "function",
                "function": { "name": wire_name(name) }
            }),
        }
    }
}

/// The parameters of a `model.<name>` call: what the agent proposes. The model's name, base URL
/// and key are the tool's, never the agent's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatParams {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools offered (empty: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// What the model may do about them.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// The most tokens the answer may have (reserved before the call).
    pub max_tokens: u64,
}

impl ChatParams {
    /// The request body for `model` (the server's model name).
    #[must_use]
    pub fn to_request(&self, model: &str) -> Value {
        let mut body = serde_json::json!({
            "model": model,
            "messages": self.messages,
            "max_tokens": self.max_tokens,
        });
        if !self.tools.is_empty() {
            body["tools"] = self.tools.iter().map(ToolSpec::to_wire).collect();
            body["tool_choice"] = self.tool_choice.to_wire();
        }
        body
    }
}

/// Tokens a call used, as the server reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub completion_tokens: u64,
    /// Both (the server's figure; a server that leaves it out gets the sum).
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    /// `total_tokens`, or the sum of the two parts when the server gave 0.
    #[must_use]
    pub fn total(&self) -> u64 {
        if self.total_tokens == 0 {
            self.prompt_tokens.saturating_add(self.completion_tokens)
        } else {
            self.total_tokens
        }
    }
}

/// The answer of a `model.<name>` call: the tool's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatAnswer {
    /// The model's text, if any.
    pub content: Option<String>,
    /// The tool calls it asked for.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped (`stop`, `length`, `tool_calls`...), as the server said.
    pub finish_reason: Option<String>,
    /// What it used.
    pub usage: Usage,
}

/// The server's reply body, as far as it is read.
#[derive(Debug, Deserialize)]
pub(crate) struct Completion {
    pub(crate) choices: Vec<Choice>,
    pub(crate) usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Choice {
    pub(crate) message: Message,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

/// Why a reply body could not be read as a completion.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// Not a JSON completion object.
    #[error("the reply is not a chat completion: {0}")]
    Json(#[from] serde_json::Error),
    /// No choice in it.
    #[error("the reply has no choices")]
    NoChoice,
    /// No `usage` in it: the tokens spent cannot be settled.
    #[error("the reply has no usage")]
    NoUsage,
}

/// Reads a reply body.
pub fn parse_reply(body: &[u8]) -> Result<ChatAnswer, ReplyError> {
    let completion: Completion = serde_json::from_slice(body)?;
    let usage = completion.usage.ok_or(ReplyError::NoUsage)?;
    let choice = completion
        .choices
        .into_iter()
        .next()
        .ok_or(ReplyError::NoChoice)?;
    Ok(ChatAnswer {
        content: choice.message.content,
        tool_calls: choice.message.tool_calls,
        finish_reason: choice.finish_reason,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_reply_with_tool_calls_and_usage() {
        let body = br#"{"id":"c","object":"chat.completion","choices":[{"index":0,
            "message":{"content":null,"role":"assistant","tool_calls":[{"id":"call_0",
            "type":"function","function":{"name":"fs__read","arguments":"{\"path\": \"a\"}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":36,"completion_tokens":9,
            "total_tokens":45}}"#;
        let answer = parse_reply(body).unwrap();
        assert_eq!(answer.usage.total(), 45);
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(answer.tool_calls[0].function.name, "fs__read");
        assert_eq!(answer.content, None);
    }

    #[test]
    fn refuses_replies_it_cannot_settle() {
        assert!(matches!(parse_reply(b"<html>"), Err(ReplyError::Json(_))));
        let no_usage = br#"{"choices":[{"message":{"role":"assistant","content":"x"}}]}"#;
        assert!(matches!(parse_reply(no_usage), Err(ReplyError::NoUsage)));
        let no_choice = br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}"#;
        assert!(matches!(parse_reply(no_choice), Err(ReplyError::NoChoice)));
    }

    #[test]
    fn wire_names_keep_only_what_servers_take() {
        assert_eq!(wire_name("docs.read"), "docs__read");
        assert_eq!(wire_name("a-b_c9"), "a-b_c9");
        let params = ChatParams {
            messages: vec![Message::text(Role::User, "hi")],
            tools: vec![ToolSpec::new("docs.read", "reads")],
            tool_choice: ToolChoice::Tool("docs.read".into()),
            max_tokens: 8,
        };
        let body = params.to_request("m");
        assert_eq!(body["tools"][0]["function"]["name"], "docs__read");
        assert_eq!(body["tool_choice"]["function"]["name"], "docs__read");
        assert_eq!(body["model"], "m");
    }
}
