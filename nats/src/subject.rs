//! The subject layout: where an envelope goes on NATS, and which stream and consumer carry it.
//!
//! One JetStream stream per run, `quorate-<run>`, on the subjects `quorate.<run>.>`, with
//! work-queue retention (a message is deleted once its consumer acked it). An envelope from agent
//! `F` to agent `T` travels on
//!
//! ```text
//! quorate.<run>.<T>.<F>
//! ```
//!
//! (the recipient before the sender), and every recipient reads through one durable pull consumer
//! of its own, `to-<T>`, filtered to `quorate.<run>.<T>.*`. Ids are uuids in their hyphenated
//! form, so each is one subject token.
//!
//! The order is chosen so that NATS subject permissions can pin a process to its own traffic
//! (the credentials themselves are the next step; see `docs/distributed.md`):
//!
//! * **publish only its own envelopes**: agent `A` may publish to `quorate.<run>.*.A` (a star
//!   worker: `quorate.<run>.<supervisor>.A`), so the last token of a subject is the sender the
//!   server authenticated, and [`crate::codec::accept`] refuses an envelope whose claimed sender
//!   differs from it;
//! * **consume only its own assignments**: the supervisor creates the stream and every consumer;
//!   `A` may only pull from and ack on its own consumer (`$JS.API.CONSUMER.MSG.NEXT.<stream>.to-A`,
//!   `$JS.API.CONSUMER.INFO.<stream>.to-A`, `$JS.ACK.<stream>.to-A.>`) and may not create
//!   consumers, so it never sees a message addressed to another agent.

use std::fmt;

use quorate_protocols::{AgentId, RunId};
use uuid::Uuid;

/// The first token of every subject.
pub const PREFIX: &str = "quorate";

/// The stream that carries run `run`'s envelopes.
#[must_use]
pub fn stream_name(run: RunId) -> String {
    format!("{PREFIX}-{run}")
}

/// The subjects of run `run`'s stream: `quorate.<run>.>`.
#[must_use]
pub fn run_subjects(run: RunId) -> String {
    format!("{PREFIX}.{run}.>")
}

/// The subject of an envelope from `from` to `to` in run `run`.
#[must_use]
pub fn envelope_subject(run: RunId, to: AgentId, from: AgentId) -> String {
    format!("{PREFIX}.{run}.{to}.{from}")
}

/// Everything addressed to `to` in run `run`: the filter of its consumer.
#[must_use]
pub fn inbox_filter(run: RunId, to: AgentId) -> String {
    format!("{PREFIX}.{run}.{to}.*")
}

/// The durable name of `to`'s consumer.
#[must_use]
pub fn consumer_name(to: AgentId) -> String {
    format!("to-{to}")
}

/// The parts of an envelope subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The run.
    pub run: RunId,
    /// The recipient.
    pub to: AgentId,
    /// The sender (the one the server let publish there).
    pub from: AgentId,
}

/// A subject that is not `quorate.<run>.<to>.<from>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("subject {subject:?} is not quorate.<run>.<to>.<from>: {why}")]
pub struct BadSubject {
    /// The subject.
    pub subject: String,
    /// What is wrong with it.
    pub why: SubjectFault,
}

/// What is wrong with a subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectFault {
    /// Not four tokens, or another prefix.
    Shape,
    /// The run token is not a uuid.
    Run,
    /// The recipient token is not a uuid.
    To,
    /// The sender token is not a uuid.
    From,
}

impl fmt::Display for SubjectFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SubjectFault::Shape => "wrong shape",
            SubjectFault::Run => "the run is not a uuid",
            SubjectFault::To => "the recipient is not a uuid",
            SubjectFault::From => "the sender is not a uuid",
        })
    }
}

/// Splits an envelope subject into its run, recipient and sender.
pub fn parse(subject: &str) -> Result<Route, BadSubject> {
    let bad = |why| BadSubject {
        subject: subject.to_string(),
        why,
    };
    let mut parts = subject.split('.');
    let (Some(PREFIX), Some(run), Some(to), Some(from), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(bad(SubjectFault::Shape));
    };
    Ok(Route {
        run: RunId::from_uuid(uuid(run).ok_or_else(|| bad(SubjectFault::Run))?),
        to: AgentId::from_uuid(uuid(to).ok_or_else(|| bad(SubjectFault::To))?),
        from: AgentId::from_uuid(uuid(from).ok_or_else(|| bad(SubjectFault::From))?),
    })
}

/// A token in the hyphenated form the subjects are written in (no other uuid spelling, so one
/// id has one subject).
fn uuid(token: &str) -> Option<Uuid> {
    let id = Uuid::try_parse(token).ok()?;
    (id.hyphenated().to_string() == token).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_round_trips_and_its_filter_matches_it() {
        let (run, to, from) = (
            RunId::from_u128(1),
            AgentId::from_u128(2),
            AgentId::from_u128(3),
        );
        let subject = envelope_subject(run, to, from);
        assert_eq!(parse(&subject), Ok(Route { run, to, from }));
        let filter = inbox_filter(run, to);
        assert_eq!(
            filter.trim_end_matches('*'),
            subject.trim_end_matches(&from.to_string())
        );
        assert!(run_subjects(run).starts_with(&format!("{PREFIX}.{run}.")));
        assert!(!stream_name(run).contains('.'), "stream names take no dots");
        assert!(!consumer_name(to).contains('.'));
    }

    #[test]
    fn malformed_subjects_are_refused_by_what_is_wrong() {
        let run = RunId::from_u128(1).to_string();
        let id = AgentId::from_u128(2).to_string();
        for (subject, why) in [
            (format!("quorate.{run}.{id}"), SubjectFault::Shape),
            (format!("quorate.{run}.{id}.{id}.x"), SubjectFault::Shape),
            (format!("other.{run}.{id}.{id}"), SubjectFault::Shape),
            (format!("quorate.x.{id}.{id}"), SubjectFault::Run),
            (format!("quorate.{run}.x.{id}"), SubjectFault::To),
            (format!("quorate.{run}.{id}.x"), SubjectFault::From),
        ] {
            assert_eq!(parse(&subject).map_err(|e| e.why), Err(why), "{subject}");
        }
    }
}
