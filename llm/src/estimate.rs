//! Token estimates, made before a model call to reserve budget and to fit a prompt to a context
//! budget.
//!
//! No tokenizer is loaded: the estimate is **one token per 2 bytes of text, rounded up, plus
//! [`MESSAGE_OVERHEAD`] tokens per message** (role and framing tokens of the chat template), and
//! for each offered tool its JSON (name, description, schema) counted the same way. English
//! prose runs at about 4 bytes per token in the common BPE vocabularies; the prompts here are
//! full of tags, JSON and ids, which tokenize worse. With 4 bytes and 4 tokens a message, a
//! second call of SmolLM2-135M (its tool message and the model's own tool call in the history)
//! was estimated at 175 tokens and used 195, and a reported cost above the reservation ends
//! the attempt over its limit; 3 bytes and 8 tokens a message stayed above what it reported
//! for that call, but a merge task's second call (its inputs are the gatherers' JSON answers,
//! code-like text) was estimated at 387 prompt tokens and used 406; at 2 bytes a token the
//! estimates run 1.6 to 2.2 times what SmolLM2 reports (tests/model_tier.rs runs it). Too
//! high costs nothing but headroom while the call runs: the
//! reservation is settled with the `usage` the server reports, and the rest goes back to the
//! task's slice.

use crate::chat::{ChatParams, Message, ToolSpec};

/// Tokens counted per message on top of its text.
pub const MESSAGE_OVERHEAD: u64 = 8;

/// Bytes per token.
pub const BYTES_PER_TOKEN: u64 = 2;

/// Tokens in `text`: `ceil(bytes / 2)`.
#[must_use]
pub fn text_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(BYTES_PER_TOKEN)
}

/// Tokens of one message: its text, its tool calls' names and arguments, and the overhead.
#[must_use]
pub fn message_tokens(message: &Message) -> u64 {
    let calls: u64 = message
        .tool_calls
        .iter()
        .map(|c| text_tokens(&c.function.name) + text_tokens(&c.function.arguments))
        .sum();
    MESSAGE_OVERHEAD + message.content.as_deref().map_or(0, text_tokens) + calls
}

/// Tokens of one offered tool (its wire JSON).
#[must_use]
pub fn tool_tokens(tool: &ToolSpec) -> u64 {
    text_tokens(&tool.to_wire().to_string())
}

/// The prompt estimate of a call: every message and every offered tool.
#[must_use]
pub fn prompt_tokens(params: &ChatParams) -> u64 {
    params.messages.iter().map(message_tokens).sum::<u64>()
        + params.tools.iter().map(tool_tokens).sum::<u64>()
}

/// What a call may use at most, as estimated before sending: the prompt estimate plus
/// `max_tokens`.
#[must_use]
pub fn call_tokens(params: &ChatParams) -> u64 {
    prompt_tokens(params).saturating_add(params.max_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Role;

    #[test]
    fn two_bytes_a_token_rounded_up_plus_overhead() {
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("ab"), 1);
        assert_eq!(text_tokens("abc"), 2);
        let params = ChatParams {
            messages: vec![
                Message::text(Role::System, "abcdefgh"),
                Message::text(Role::User, "a"),
            ],
            tools: vec![],
            tool_choice: Default::default(),
            max_tokens: 10,
        };
        assert_eq!(prompt_tokens(&params), (8 + 4) + (8 + 1));
        assert_eq!(call_tokens(&params), 21 + 10);
    }
}
