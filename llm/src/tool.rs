//! [`ModelTool`] (feature `http`): a model endpoint as the tool `model.<name>`, so a model call
//! is gated, budgeted, timed out, recorded and retried like any other read-only call.

use std::sync::Arc;

use quorate_protocols::{ActionId, Budget, Capability, Payload};
use quorate_workers::{SideEffect, Tool, ToolAnswer, ToolFuture};
use serde::Deserialize;
use serde_json::Value;

use crate::chat::ChatParams;
use crate::client::{Client, ClientError};
use crate::config::{model_tool_name, ModelConfig};
use crate::estimate;

/// Model `name` behind `config`, as the read-only tool (and capability) `model.<name>`.
///
/// * [`Tool::validate`]: the parameters are a [`ChatParams`] with `1 <= max_tokens <=`
///   the model's `max_tokens`.
/// * The reservation the gate makes before sending: the prompt estimate ([`crate::estimate`])
///   plus `max_tokens` tokens, and their cost at the model's price.
/// * The answer: `{content, tool_calls, finish_reason, usage}` ([`crate::ChatAnswer`]),
///   costing `usage.total_tokens` tokens and their cost at the price; `changed: false`.
/// * Errors: a 4xx (or a 429/5xx still failing when the call's time is up), no connection, or
///   an unreadable reply is an error answer (class `model:http-NNN`, `model:connect`,
///   `model:bad-reply`): nothing to settle; a connection lost after sending is
///   [`ToolAnswer::Lost`]: the outcome is unknown, and the runtime retries the read-only call
///   (charging the retry).
/// * [`Tool::timeout`]: the model's `timeout_ms` (instead of the worker's call timeout).
#[derive(Clone, Debug)]
pub struct ModelTool {
    name: Capability,
    config: Arc<ModelConfig>,
    client: Client,
}

/// The tool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ModelToolError {
    /// `model.<name>` is not a valid capability name.
    #[error("model name {name:?}: {source}")]
    Name {
        /// The name.
        name: String,
        /// Why not.
        source: quorate_protocols::CapabilityError,
    },
    /// The client could not be built (a missing API key variable...).
    #[error("model {name:?}: {source}")]
    Client {
        /// The name.
        name: String,
        /// Why not.
        source: ClientError,
    },
}

impl ModelTool {
    /// The tool `model.<name>` over `config` (the API key is read now).
    pub fn new(name: &str, config: ModelConfig) -> Result<Self, ModelToolError> {
        let tool = model_tool_name(name).map_err(|source| ModelToolError::Name {
            name: name.to_owned(),
            source,
        })?;
        let client = Client::new(&config).map_err(|source| ModelToolError::Client {
            name: name.to_owned(),
            source,
        })?;
        Ok(Self {
            name: tool,
            config: Arc::new(config),
            client,
        })
    }

    /// The endpoint's settings.
    #[must_use]
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// What a call with `params` reserves before it is sent: the prompt estimate plus
    /// `max_tokens` tokens, and their cost at the price (`None` if the parameters are not a
    /// chat call).
    #[must_use]
    pub fn reserve_for(&self, params: &Value) -> Option<Budget> {
        let params = ChatParams::deserialize(params).ok()?;
        let prompt = estimate::prompt_tokens(&params);
        let cost = self
            .config
            .price
            .map_or(0, |p| p.cost_of(prompt, params.max_tokens));
        Some(Budget::new(
            0,
            0,
            prompt.saturating_add(params.max_tokens),
            cost,
        ))
    }
}

impl Tool for ModelTool {
    fn name(&self) -> &str {
        self.name.as_str()
    }

    fn capability(&self) -> Capability {
        self.name.clone()
    }

    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }

    fn reservation(&self, params: &Value) -> Option<Budget> {
        self.reserve_for(params)
    }

    fn timeout(&self) -> Option<std::time::Duration> {
        Some(self.config.timeout())
    }

    fn validate(&self, params: &Value) -> Result<(), String> {
        let params =
            ChatParams::deserialize(params).map_err(|e| format!("not a chat call: {e}"))?;
        if params.messages.is_empty() {
            return Err("no messages".to_owned());
        }
        let max = self.config.max_tokens;
        if params.max_tokens == 0 || params.max_tokens > max {
            return Err(format!(
                "max_tokens is {}; this model takes 1 to {max}",
                params.max_tokens
            ));
        }
        Ok(())
    }

    fn call(&self, _action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let client = self.client.clone();
        let config = self.config.clone();
        Box::pin(async move {
            // Read from the shared parameters, not from a copy of them.
            let params = match ChatParams::deserialize(params.value()) {
                Ok(p) => p,
                Err(e) => {
                    return ToolAnswer::Err {
                        class: "model:params".into(),
                        message: e.to_string(),
                    }
                }
            };
            match client.chat(&params).await {
                Ok(answer) => ToolAnswer::Ok {
                    cost: config.charge(&answer.usage),
                    output: serde_json::to_value(&answer)
                        .expect("an answer serializes")
                        .into(),
                    changed: false,
                },
                Err(e) if e.outcome_unknown() => ToolAnswer::Lost {
                    message: e.to_string(),
                },
                Err(e) => ToolAnswer::Err {
                    class: e.class(),
                    message: e.to_string(),
                },
            }
        })
    }
}
