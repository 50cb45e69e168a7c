//! The hook through which a durable run keeps its supervisor's log and results past the process.

use crate::Event;

/// Keeps a star run's events and accepted results past the process (the CLI's `--store` file
/// implements it). [`events`](Self::events) returns once the events, and every result given
/// before it, are durable: the supervisor calls it before it sends anything the events led to
/// (assignments, controls, the report). [`result`](Self::result) comes before the events of
/// the result's completion, and may keep the result until then (so that one durable commit
/// covers the results and events of one input). An implementation that cannot make a write
/// durable must not return (it ends the process).
pub trait RunJournal: Send + Sync + std::fmt::Debug {
    /// Appends `events` (in order) to the run's log.
    fn events(&self, events: &[Event]);
    /// Keeps the accepted result `value` under `key`: durable no later than when the next
    /// [`events`](Self::events) call returns.
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
