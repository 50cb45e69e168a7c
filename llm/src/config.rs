//! A model endpoint's settings: what a plan file's `[models.NAME]` section holds.

use std::time::Duration;

use quorate_protocols::{Budget, Capability, CapabilityError};
use serde::{Deserialize, Serialize};

use crate::chat::Usage;

/// One OpenAI-compatible chat-completions endpoint, as a `[models.NAME]` section gives it.
///
/// The key itself is never part of it: `api_key_env` names the environment variable the key is
/// read from when the tool is built (and the key is never logged or written to a trace).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The API's base URL, up to and including `/v1` (`http://127.0.0.1:8077/v1`); requests
    /// go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The server's model name (the request's `model`).
    pub model: String,
    /// The environment variable holding the API key, sent as `Authorization: Bearer ...`;
    /// none: no key is sent (local servers).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The most tokens one answer may have (an agent's calls ask for this, or less).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u64,
    /// How long one call may take, retries after 429/5xx included, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The prompt's context budget in tokens (estimated; see [`crate::estimate`]): inputs,
    /// evidence and tool outputs beyond it are cut, saying so.
    #[serde(default = "default_context_tokens")]
    pub context_tokens: u64,
    /// What a call costs in the budget's `cost` unit, if anything.
    #[serde(default)]
    pub price: Option<Price>,
    /// The sampling temperature sent with every call (none: the server's default); 0 makes a
    /// local model's answers repeatable.
    #[serde(default)]
    pub temperature: Option<f64>,
}

fn default_max_tokens() -> u64 {
    256
}
fn default_timeout_ms() -> u64 {
    60_000
}
fn default_context_tokens() -> u64 {
    1_536
}

impl ModelConfig {
    /// A local endpoint at `base_url` serving `model`, with the defaults: no key, 256 tokens per
    /// answer, 60 s per call, a 1536-token context budget, no price.
    #[must_use]
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            max_tokens: default_max_tokens(),
            timeout_ms: default_timeout_ms(),
            context_tokens: default_context_tokens(),
            price: None,
            temperature: None,
        }
    }

    /// The per-call timeout.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// What `usage` costs: `tokens` is the server's total, `cost` comes from the price (0
    /// without one).
    #[must_use]
    pub fn charge(&self, usage: &Usage) -> Budget {
        let cost = self.price.map_or(0, |p| p.cost(usage));
        Budget::new(0, 0, usage.total(), cost)
    }
}

/// The tool name (and capability) of model `name`: `model.<name>`.
pub fn model_tool_name(name: &str) -> Result<Capability, CapabilityError> {
    Capability::new(format!("model.{name}"))
}

/// A price in the budget's `cost` unit per 1000 tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per 1000 prompt tokens.
    #[serde(default)]
    pub prompt_per_1k: u64,
    /// Per 1000 completion tokens.
    #[serde(default)]
    pub completion_per_1k: u64,
}

impl Price {
    /// The cost of `usage`, rounded up.
    #[must_use]
    pub fn cost(&self, usage: &Usage) -> u64 {
        self.cost_of(usage.prompt_tokens, usage.completion_tokens)
    }

    /// The cost of `prompt` and `completion` tokens, rounded up (saturating).
    #[must_use]
    pub fn cost_of(&self, prompt: u64, completion: u64) -> u64 {
        let milli = u128::from(prompt) * u128::from(self.prompt_per_1k)
            + u128::from(completion) * u128::from(self.completion_per_1k);
        u64::try_from(milli.div_ceil(1000)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_the_reported_usage_at_the_price() {
        let mut config = ModelConfig::new("http://127.0.0.1:1/v1", "m");
        let usage = Usage {
            prompt_tokens: 1500,
            completion_tokens: 10,
            total_tokens: 1510,
        };
        assert_eq!(config.charge(&usage), Budget::new(0, 0, 1510, 0));
        config.price = Some(Price {
            prompt_per_1k: 2,
            completion_per_1k: 10,
        });
        // 1500 * 2 / 1000 = 3, 10 * 10 / 1000 = 0.1: 3.1 rounds up to 4.
        assert_eq!(config.charge(&usage).cost, 4);
        assert_eq!(model_tool_name("local").unwrap().as_str(), "model.local");
        assert!(model_tool_name("Big Model").is_err());
    }
}
