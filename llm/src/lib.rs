//! # quorate-llm
//!
//! Language models as quorate agents, without a side door: the model proposes, the runtime
//! decides, executes and records.
//!
//! A tour, in the order a task meets the types:
//!
//! * A plan names a model endpoint ([`ModelConfig`]: base URL, model, the environment variable
//!   holding the API key, `max_tokens`, timeout, context budget, price). With the cargo feature
//!   `http`, `ModelTool` makes it the read-only tool `model.<name>` (capability
//!   `model.<name>`), calling it with the OpenAI-compatible `Client` (reqwest).
//! * The task's agent is an [`LlmAgent`]. Its `propose` stays synchronous and pure: it proposes
//!   the model call as a tool call carrying [`ChatParams`] (messages, tools, `max_tokens`), so
//!   the gate checks the capability and reserves tokens before anything is sent, and reads the
//!   model's [`ChatAnswer`] from the next observation.
//! * The prompt ([`prompt`]) gives the goal as the task and quotes inputs, evidence, memory and
//!   tool outputs as data with their sources, under a context budget ([`estimate`] says how
//!   tokens are counted before a call).
//! * The model's tool calls become proposals through the same gate; a refusal goes back to the
//!   model as the tool message, with the gate's reason.
//! * [`FixedTool`]: a simulated tool with a fixed answer, for plan files (`[tools.NAME]`) and
//!   examples.
//!
//! Without the feature `http` this crate has no network code: the agent, the prompt and the
//! configuration are plain data and logic.

#![forbid(unsafe_code)]

mod agent;
pub mod chat;
#[cfg(feature = "http")]
mod client;
mod config;
pub mod estimate;
mod fixed;
pub mod prompt;
#[cfg(feature = "http")]
mod tool;

pub use agent::{LlmAgent, LlmAgentConfig, DEFAULT_GOAL};
pub use chat::{ChatAnswer, ChatParams, Message, Role, ToolCall, ToolChoice, ToolSpec, Usage};
#[cfg(feature = "http")]
pub use client::{ApiKey, Client, ClientError, FIRST_BACKOFF, MAX_BACKOFF, MAX_TRIES};
pub use config::{model_tool_name, ModelConfig, Price};
pub use fixed::{FixedTool, FixedToolConfig};
pub use prompt::Quoted;
#[cfg(feature = "http")]
pub use tool::{ModelTool, ModelToolError};
