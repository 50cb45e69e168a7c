//! The hook through which a durable run keeps its supervisor's log and results past the process.

use crate::Event;

/// Keeps a star run's events and accepted results past the process (the CLI's `--store` file
/// implements it). Each call returns once what it was given is durable: the supervisor calls
/// [`events`](Self::events) before it sends anything the events led to (assignments, controls,
/// the report), and [`result`](Self::result) before it acts on an accepted result. An
/// implementation that cannot make a write durable must not return (it ends the process).
pub trait RunJournal: Send + Sync + std::fmt::Debug {
    /// Appends `events` (in order) to the run's log.
    fn events(&self, events: &[Event]);
    /// Keeps the accepted result `value` under `key`.
    fn result(&self, key: &str, value: &serde_json::Value);
}

/// What a durable run left to resume from: its log and its accepted results.
#[derive(Clone, Debug, Default)]
pub struct ResumeFrom {
    /// The run's log, in order.
    pub events: Vec<Event>,
    /// Accepted results (and the run's `[data]`) by key.
    pub results: Vec<(String, serde_json::Value)>,
}
