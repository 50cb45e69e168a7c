//! Envelopes to and from NATS messages: the subject, the `Nats-Msg-Id` header and the payload
//! bytes of an outgoing envelope, and the checks an incoming one passes before a core sees it.
//!
//! The payload is the envelope's wire encoding ([`encode_envelope`]: JSON of every field, the
//! protocol payload included), so nothing is lost on the way; the `Nats-Msg-Id` header is the
//! envelope's dedupe key, so JetStream stores a repeated publish once (within the stream's
//! duplicate window). An incoming message is decoded with the caps of [`Limits`] and its claimed
//! sender compared with the one its subject names ([`crate::subject`]); what the cores then do
//! with a second copy (a redelivery after `ack_wait`, a publish repeated past the duplicate
//! window) is their own duplicate rule, on the same dedupe key.

use std::collections::HashMap;

use quorate_protocols::{
    decode_envelope, encode_envelope, AgentId, DecodeError, Envelope, Limits, RunId, Sender,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::subject::{self, BadSubject};

/// The header JetStream dedupes publishes by.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// An envelope ready to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// `quorate.<run>.<to>.<from>`.
    pub subject: String,
    /// The `Nats-Msg-Id` header: the envelope's dedupe key.
    pub msg_id: String,
    /// [`encode_envelope`] of the envelope.
    pub payload: Vec<u8>,
}

/// The message that carries `envelope` to agent `to` (the sender is the envelope's own).
pub fn outgoing<P: Serialize>(envelope: &Envelope<P>, to: AgentId) -> Outgoing {
    Outgoing {
        subject: subject::envelope_subject(envelope.run, to, envelope.sender.agent),
        msg_id: envelope.dedupe.to_string(),
        payload: encode_envelope(envelope),
    }
}

/// Who may send in a run: agent id -> the sender (agent and role) it speaks as.
#[derive(Clone, Debug, Default)]
pub struct Directory(HashMap<AgentId, Sender>);

impl Directory {
    /// A directory of `senders`.
    pub fn new(senders: impl IntoIterator<Item = Sender>) -> Self {
        Self(senders.into_iter().map(|s| (s.agent, s)).collect())
    }

    /// The sender `agent` speaks as, if it is one of the run's.
    #[must_use]
    pub fn get(&self, agent: AgentId) -> Option<Sender> {
        self.0.get(&agent).copied()
    }
}

/// Why an incoming message was not handed to a core. None is helped by delivering it again: the
/// transport terminates such a message instead of leaving it to be redelivered.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The subject is not an envelope subject.
    #[error(transparent)]
    Subject(#[from] BadSubject),
    /// The subject names another run than the inbox reads.
    #[error("message on run {found}'s subject reached run {expected}'s inbox")]
    WrongRun {
        /// The inbox's run.
        expected: RunId,
        /// The subject's.
        found: RunId,
    },
    /// The subject names another recipient than the inbox's owner.
    #[error("message for {found} reached {expected}'s inbox")]
    WrongRecipient {
        /// The inbox's owner.
        expected: AgentId,
        /// The subject's recipient.
        found: AgentId,
    },
    /// The subject's sender is not one of the run's agents.
    #[error("sender {agent} is not one of the run's agents")]
    UnknownSender {
        /// The subject's sender.
        agent: AgentId,
    },
    /// The payload is not an acceptable envelope from that sender (too large, malformed, or a
    /// claimed sender other than the subject's).
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl Refused {
    /// Whether the message claimed a sender the transport did not authenticate (the subject's
    /// sender is not one of the run's agents, or the envelope names another sender than the
    /// subject's): the receiving side counts it as `rejected_unauthorized`, never delivering it
    /// to a core as that sender.
    #[must_use]
    pub fn is_unauthorized(&self) -> bool {
        matches!(
            self,
            Refused::UnknownSender { .. } | Refused::Decode(DecodeError::ForgedSender { .. })
        )
    }
}

/// Checks a message that reached `me`'s inbox of run `run` and decodes its envelope: the subject
/// names this run and recipient and a sender of `directory`, and the payload decodes under
/// `limits` with exactly that sender.
pub fn accept<P: DeserializeOwned>(
    run: RunId,
    me: AgentId,
    directory: &Directory,
    subject: &str,
    payload: &[u8],
    limits: &Limits,
) -> Result<Envelope<P>, Refused> {
    let route = subject::parse(subject)?;
    if route.run != run {
        return Err(Refused::WrongRun {
            expected: run,
            found: route.run,
        });
    }
    if route.to != me {
        return Err(Refused::WrongRecipient {
            expected: me,
            found: route.to,
        });
    }
    let sender = directory
        .get(route.from)
        .ok_or(Refused::UnknownSender { agent: route.from })?;
    Ok(decode_envelope(payload, limits, sender)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::{EvidenceRef, IdSource, ResultKind, Role, Scope, TaskId, Version};

    fn senders() -> (Sender, Sender) {
        let sup = Sender {
            agent: AgentId::from_u128(1),
            role: Role::Supervisor,
        };
        let worker = Sender {
            agent: AgentId::from_u128(2),
            role: Role::Worker,
        };
        (sup, worker)
    }

    fn full_envelope(from: Sender) -> Envelope<serde_json::Value> {
        let mut ids = IdSource::seeded(5);
        let mut e = Envelope::new(
            RunId::from_u128(9),
            TaskId::from_u128(10),
            from,
            serde_json::json!({"x": [1, 2, "three"]}),
            &mut ids,
        );
        e.parent = Some(TaskId::from_u128(11));
        e.attempt = 3;
        e.state_version = Version::new(7);
        e.evidence = vec![
            EvidenceRef::Record {
                key: "k".into(),
                version: Version::new(2),
            },
            EvidenceRef::Action {
                action: quorate_protocols::ActionId::new(TaskId::from_u128(11), 1, 0),
            },
        ];
        e.result_kind = Some(ResultKind::VerifiedConclusion);
        e.scope = Scope {
            tenant: "t".into(),
            principal: "p".into(),
        };
        e
    }

    #[test]
    fn every_field_survives_and_the_msg_id_is_the_dedupe_key() {
        let (sup, worker) = senders();
        let e = full_envelope(worker);
        let out = outgoing(&e, sup.agent);
        assert_eq!(out.msg_id, e.dedupe.to_string());
        let dir = Directory::new([sup, worker]);
        let back: Envelope<serde_json::Value> = accept(
            e.run,
            sup.agent,
            &dir,
            &out.subject,
            &out.payload,
            &Limits::default(),
        )
        .expect("accepted");
        assert_eq!(back, e);
    }

    #[test]
    fn wrong_run_recipient_unknown_or_forged_sender_are_refused() {
        let (sup, worker) = senders();
        let dir = Directory::new([sup, worker]);
        let e = full_envelope(worker);
        let out = outgoing(&e, sup.agent);
        let limits = Limits::default();
        let take = |run, me, subject: &str, payload: &[u8]| {
            accept::<serde_json::Value>(run, me, &dir, subject, payload, &limits)
        };
        assert!(matches!(
            take(RunId::from_u128(8), sup.agent, &out.subject, &out.payload),
            Err(Refused::WrongRun { .. })
        ));
        assert!(matches!(
            take(e.run, worker.agent, &out.subject, &out.payload),
            Err(Refused::WrongRecipient { .. })
        ));
        let stranger = AgentId::from_u128(77);
        let subject = subject::envelope_subject(e.run, sup.agent, stranger);
        assert!(matches!(
            take(e.run, sup.agent, &subject, &out.payload),
            Err(Refused::UnknownSender { agent }) if agent == stranger
        ));
        // The worker's bytes on the supervisor's own subject: the claimed sender is not the
        // one the subject (the server's permissions) vouch for.
        let subject = subject::envelope_subject(e.run, sup.agent, sup.agent);
        let forged = take(e.run, sup.agent, &subject, &out.payload).expect_err("forged");
        assert!(
            matches!(forged, Refused::Decode(DecodeError::ForgedSender { .. })),
            "{forged:?}"
        );
        assert!(forged.is_unauthorized());
        let unknown = take(
            e.run,
            sup.agent,
            &subject::envelope_subject(e.run, sup.agent, stranger),
            &out.payload,
        )
        .expect_err("unknown");
        assert!(unknown.is_unauthorized());
        let wrong_run = take(RunId::from_u128(8), sup.agent, &out.subject, &out.payload);
        assert!(!wrong_run.expect_err("wrong run").is_unauthorized());
        assert!(matches!(
            take(e.run, sup.agent, "quorate.x", &out.payload),
            Err(Refused::Subject(_))
        ));
    }
}
