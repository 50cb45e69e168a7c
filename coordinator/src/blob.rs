//! Model-call content, logged once per run: a call event that carries content (a model call's
//! new messages, options or answer; see [`quorate_protocols::wire::Blob`]) is logged as a `blob`
//! event per digest the run has not logged yet, then the call event itself, which names its
//! content by digest only. A conversation of `n` calls so logs each message once, not the whole
//! history with every call.

use std::collections::HashSet;

use quorate_protocols::ParamDigest;
use quorate_workers::CallEvent;

use crate::event::EventKind;

/// The digests a run logged the content of.
#[derive(Clone, Debug, Default)]
pub(crate) struct BlobLog {
    logged: HashSet<ParamDigest>,
}

impl BlobLog {
    /// Notes that `digest`'s content is in the log already (a `blob` event read back on resume).
    pub(crate) fn logged(&mut self, digest: ParamDigest) {
        self.logged.insert(digest);
    }

    /// The events that log `call`: a `blob` for each piece of content it carries that the run
    /// has not logged yet, then the call event without its content.
    pub(crate) fn events(&mut self, mut call: CallEvent) -> Vec<EventKind> {
        let blobs = call.take_blobs();
        let mut out = Vec::with_capacity(blobs.len() + 1);
        for blob in blobs {
            if self.logged.insert(blob.digest) {
                out.push(EventKind::Blob(Box::new(blob)));
            }
        }
        out.push(EventKind::of_call(call));
        out
    }
}

#[cfg(test)]
#[path = "blob_tests.rs"]
mod growth;

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::wire::{Blob, ModelRequest};
    use quorate_protocols::{ActionId, Budget, TaskId};
    use serde_json::json;

    fn started(step: u32, blobs: Vec<Blob>) -> CallEvent {
        CallEvent::CallStarted {
            action: ActionId::new(TaskId::from_u128(1), step, 0),
            tool: "model.small".into(),
            reserved: Budget::new(0, 1, 10, 0),
            model: Some(Box::new(ModelRequest {
                extends: None,
                messages: blobs.iter().map(|b| b.digest).collect(),
                options: ParamDigest::of(&json!({})),
                blobs,
            })),
        }
    }

    #[test]
    fn content_is_logged_once_and_the_call_event_keeps_digests_only() {
        let mut log = BlobLog::default();
        let a = Blob::of(json!({"role": "user", "content": "a"}));
        let b = Blob::of(json!({"role": "user", "content": "b"}));
        let first = log.events(started(0, vec![a.clone()]));
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].name(), "blob");
        // A second attempt sends `a` again (its own first call): the run logged it already.
        let second = log.events(started(1, vec![a, b.clone()]));
        assert_eq!(second.len(), 2);
        assert!(matches!(&second[0], EventKind::Blob(blob) if blob.digest == b.digest));
        let EventKind::Call(call) = &second[1] else {
            panic!("the call event comes last");
        };
        let CallEvent::CallStarted { model: Some(m), .. } = &**call else {
            panic!("a model call");
        };
        assert!(m.blobs.is_empty());
        assert_eq!(m.messages.len(), 2);
    }
}
