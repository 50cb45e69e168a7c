//! What the trace keeps of a model call: the request's messages by content digest, the answer's
//! usage, finish reason and latency, and the content itself once per digest ([`Blob`]).
//!
//! A model call is a tool call whose parameters hold a chat `"messages"` array (the
//! OpenAI-compatible shape). Its conversation grows by a message or two per call, and each call
//! sends the whole history again; were each call's parameters logged, a conversation of `n`
//! calls would log `n²/2` messages. So the worker logs, per call, only the digests of the
//! messages new since the attempt's previous model call ([`ModelRequest::extends`]), and the
//! content of a digest only the first time (a [`Blob`]): a conversation logs each message once.

use crate::{ActionId, ParamDigest};
use serde::{Deserialize, Serialize};

/// A piece of a model call's content (a message, the call's other parameters, an answer),
/// named by the sha256 digest of its canonical JSON ([`ParamDigest::of`]). The worker sends a
/// blob with the first call event of its attempt that refers to the digest; the supervisor
/// (or peer) logs it as a `blob` trace event the first time the run sees the digest, and
/// drops it from the call event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    /// `ParamDigest::of(&content)`.
    pub digest: ParamDigest,
    /// The content.
    pub content: serde_json::Value,
}

impl Blob {
    /// The blob of `content`.
    #[must_use]
    pub fn of(content: serde_json::Value) -> Self {
        Self {
            digest: ParamDigest::of(&content),
            content,
        }
    }
}

/// What a `call-started` event keeps of a model call's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The earlier model call of the same attempt whose messages this call's begin with (the
    /// most recent `call-started` of that action): this call's messages are that call's,
    /// followed by [`messages`](Self::messages). `None`: `messages` is the whole list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<ActionId>,
    /// The digests of the call's messages (after those of `extends`), in order.
    pub messages: Vec<ParamDigest>,
    /// The digest of the call's other parameters (`tools`, `max_tokens`, ...: the parameters
    /// without `messages`).
    pub options: ParamDigest,
    /// The content of the digests above that the attempt had not sent before (the trace logs
    /// them as `blob` events, and the logged `call-started` has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blobs: Vec<Blob>,
}

/// What a `call-answered` event keeps of a model call's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelAnswer {
    /// The digest of the tool's whole output.
    pub output: ParamDigest,
    /// The model the server says answered (its output's `"model"`), if it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Prompt tokens, as the server reported them (`usage.prompt_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens, as the server reported them (`usage.completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Why the model stopped (`finish_reason`: `stop`, `length`, `tool_calls`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// From the call's start to its answer, on the worker core's clock, in milliseconds.
    pub latency_ms: u64,
    /// The output's content, if the attempt had not sent it before (see
    /// [`ModelRequest::blobs`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blobs: Vec<Blob>,
}

impl ModelAnswer {
    /// What the trace keeps of `output` (a model tool's output: see the worker's `ToolAnswer`),
    /// answered `latency_ms` after the call started; `blob` says whether its content goes along.
    #[must_use]
    pub fn of(output: &serde_json::Value, latency_ms: u64, blob: bool) -> Self {
        let usage = |field: &str| output["usage"][field].as_u64();
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        let digest = ParamDigest::of(output);
        Self {
            output: digest,
            model: text(&output["model"]),
            prompt_tokens: usage("prompt_tokens"),
            completion_tokens: usage("completion_tokens"),
            finish_reason: text(&output["finish_reason"]),
            latency_ms,
            blobs: if blob {
                vec![Blob {
                    digest,
                    content: output.clone(),
                }]
            } else {
                Vec::new()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_keeps_the_usage_and_finish_reason_of_its_output() {
        let output = json!({
            "model": "smollm2", "finish_reason": "length",
            "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
            "message": {"role": "assistant", "content": "hi"},
        });
        let answer = ModelAnswer::of(&output, 120, true);
        assert_eq!(answer.prompt_tokens, Some(31));
        assert_eq!(answer.completion_tokens, Some(9));
        assert_eq!(answer.finish_reason.as_deref(), Some("length"));
        assert_eq!(answer.model.as_deref(), Some("smollm2"));
        assert_eq!(answer.latency_ms, 120);
        assert_eq!(answer.blobs, vec![Blob::of(output.clone())]);
        assert_eq!(answer.output, ParamDigest::of(&output));
        let bare = ModelAnswer::of(&json!("plain"), 0, false);
        assert_eq!((bare.prompt_tokens, bare.finish_reason), (None, None));
        assert!(bare.blobs.is_empty());
    }
}
