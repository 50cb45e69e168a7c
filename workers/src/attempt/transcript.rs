//! What an attempt remembers of its model calls so that the trace keeps each message once (see
//! [`quorate_protocols::wire::ModelRequest`]): the digests whose content it sent already, and
//! the messages of its last model call.

use std::collections::HashSet;

use quorate_protocols::wire::{Blob, ModelAnswer, ModelRequest};
use quorate_protocols::{ActionId, ParamDigest};
use serde_json::Value;

/// An attempt's model calls, as the trace sees them.
#[derive(Debug, Default)]
pub(super) struct Transcript {
    /// Digests whose content went out with an earlier call event of the attempt.
    sent: HashSet<ParamDigest>,
    /// The last model call: its action and its messages' digests.
    last: Option<(ActionId, Vec<ParamDigest>)>,
}

/// `true` if a call with `params` is a model call: its parameters hold a `"messages"` array.
pub(super) fn is_model_call(params: &Value) -> bool {
    params.get("messages").is_some_and(Value::is_array)
}

impl Transcript {
    /// The content of `value`, if it was not sent before (and now counts as sent).
    fn blob(&mut self, digest: ParamDigest, value: impl FnOnce() -> Value) -> Option<Blob> {
        self.sent.insert(digest).then(|| Blob {
            digest,
            content: value(),
        })
    }

    /// What the trace keeps of the call `action` with `params`: `None` if it is not a model
    /// call.
    pub(super) fn request(&mut self, action: ActionId, params: &Value) -> Option<ModelRequest> {
        let messages = params.get("messages")?.as_array()?;
        let digests: Vec<ParamDigest> = messages.iter().map(ParamDigest::of).collect();
        let options: serde_json::Map<String, Value> = params
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != "messages")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let options = Value::Object(options);
        let options_digest = ParamDigest::of(&options);
        let mut blobs = Vec::new();
        for (digest, message) in digests.iter().zip(messages) {
            blobs.extend(self.blob(*digest, || message.clone()));
        }
        blobs.extend(self.blob(options_digest, || options));
        let (extends, skip) = match &self.last {
            Some((earlier, prefix)) if !prefix.is_empty() && digests.starts_with(prefix) => {
                (Some(*earlier), prefix.len())
            }
            _ => (None, 0),
        };
        let new = digests[skip..].to_vec();
        self.last = Some((action, digests));
        Some(ModelRequest {
            extends,
            messages: new,
            options: options_digest,
            blobs,
        })
    }

    /// What the trace keeps of a model call's `output`, answered after `latency_ms`.
    pub(super) fn answer(&mut self, output: &Value, latency_ms: u64) -> ModelAnswer {
        let fresh = !self.sent.contains(&ParamDigest::of(output));
        let answer = ModelAnswer::of(output, latency_ms, fresh);
        self.sent.insert(answer.output);
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::TaskId;
    use serde_json::json;

    fn msg(n: u32) -> Value {
        json!({"role": "user", "content": format!("message {n}")})
    }

    #[test]
    fn a_growing_conversation_sends_each_message_once_and_only_its_new_digests() {
        let mut t = Transcript::default();
        let id = |step| ActionId::new(TaskId::from_u128(1), step, 0);
        let first = t
            .request(id(0), &json!({"messages": [msg(0)], "max_tokens": 8}))
            .unwrap();
        assert_eq!(first.extends, None);
        assert_eq!(first.messages, vec![ParamDigest::of(&msg(0))]);
        // The message and the options.
        assert_eq!(first.blobs.len(), 2);
        assert_eq!(first.options, ParamDigest::of(&json!({"max_tokens": 8})));
        let second = t
            .request(
                id(1),
                &json!({"messages": [msg(0), msg(1), msg(2)], "max_tokens": 8}),
            )
            .unwrap();
        assert_eq!(second.extends, Some(id(0)));
        assert_eq!(
            second.messages,
            vec![ParamDigest::of(&msg(1)), ParamDigest::of(&msg(2))]
        );
        assert_eq!(second.blobs, vec![Blob::of(msg(1)), Blob::of(msg(2))]);
        // A list that does not begin with the last one is written out whole.
        let third = t
            .request(id(2), &json!({"messages": [msg(2)], "max_tokens": 8}))
            .unwrap();
        assert_eq!(third.extends, None);
        assert_eq!(third.messages, vec![ParamDigest::of(&msg(2))]);
        assert!(third.blobs.is_empty());
        assert!(t.request(id(3), &json!({"path": "a"})).is_none());
        let out = json!({"message": {"role": "assistant", "content": "x"}});
        assert_eq!(t.answer(&out, 5).blobs.len(), 1);
        assert!(t.answer(&out, 5).blobs.is_empty());
    }
}
