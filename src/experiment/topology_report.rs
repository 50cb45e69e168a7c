//! What [`super::topology`] is asked to run and what it reports: the configuration, one row per
//! (topology, n), and the counts of the NATS server when the envelopes went through it.

use serde::Serialize;

use super::topology_model::{ReadPerRound, TokenMode, Topology};

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct TopologyConfig {
    /// Participant counts.
    pub agents: Vec<u64>,
    /// Rounds.
    pub rounds: u64,
    /// Tokens per message.
    pub msg_tokens: u64,
    /// Token model.
    pub mode: TokenMode,
    /// Seed of the message text.
    pub seed: u64,
    /// Times each exchange is run (wall time is given as median, min, max).
    pub repeats: u64,
    /// How the envelopes travel.
    pub transport: TopologyTransport,
}

/// How an exchange's envelopes travel between its participants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum TopologyTransport {
    /// Actor mailboxes in this process.
    #[default]
    InProcess,
    /// NATS JetStream (needs the cargo feature `nats`).
    Nats {
        /// `nats://HOST:PORT`; not written to the output (an address may carry credentials).
        #[serde(skip)]
        url: String,
        /// TLS and credentials; not written to the output.
        #[serde(skip)]
        security: crate::security::Security,
    },
}

/// What the NATS server says an exchange's stream carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NatsCarried {
    /// Messages the stream stored (its last sequence).
    pub stored: u64,
    /// Deliveries by the participants' consumers (redeliveries included).
    pub delivered: u64,
    /// Of those, redeliveries.
    pub redelivered: u64,
    /// Messages still held after the exchange (acked messages are deleted: 0).
    pub held: u64,
    /// Stored == delivered == the formula, nothing held.
    pub matches: bool,
}

/// One (topology, n) result.
#[derive(Clone, Debug, Serialize)]
pub struct TopologyRow {
    /// Topology.
    pub topology: Topology,
    /// Participants.
    pub n: u64,
    /// Rounds.
    pub rounds: u64,
    /// Envelopes counted by the transport.
    pub messages: u64,
    /// `2(n-1)R` or `n(n-1)R`.
    pub formula_messages: u64,
    /// Counted == formula.
    pub messages_match: bool,
    /// Encoded bytes counted by the transport.
    pub bytes: u64,
    /// Tokens read, counted by the participants.
    pub tokens: u64,
    /// The token model's closed form.
    pub closed_form_tokens: u64,
    /// Counted == closed form.
    pub tokens_match: bool,
    /// Largest context the hub reads in one round (star participant 0; all-to-all: a peer).
    pub hub_context: ReadPerRound,
    /// Largest context a worker (star) or peer (all-to-all) reads in one round.
    pub worker_context: ReadPerRound,
    /// The largest single-agent read in the configured mode (hub or worker).
    pub largest_context: u64,
    /// Both contexts equal their closed forms ([`closed_form_context`](super::topology_model::closed_form_context)).
    pub context_match: bool,
    /// Median wall time of the exchange over the repeats, milliseconds.
    pub wall_ms: f64,
    /// Fastest repeat.
    pub wall_ms_min: f64,
    /// Slowest repeat.
    pub wall_ms_max: f64,
    /// Every repeat's wall time.
    pub wall_ms_runs: Vec<f64>,
    /// Every repeat counted the same messages, bytes and tokens (and NATS counts).
    pub repeats_agree: bool,
    /// With `--transport nats`: what the server carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats: Option<NatsCarried>,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct TopologyReport {
    /// What was run.
    pub config: TopologyConfig,
    /// One per (topology, n).
    pub rows: Vec<TopologyRow>,
}
