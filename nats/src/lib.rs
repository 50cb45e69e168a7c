//! quorate's NATS JetStream transport: envelopes between processes.
//!
//! Envelopes keep every field on the way (the payload is their wire encoding) and reach a core
//! under the same duplicate, late, stale and unauthorized rules as in one process: a JetStream
//! redelivery (no ack within `ack_wait`) is just another copy with the same dedupe key, and the
//! receiving core refuses it as a duplicate. JetStream also dedupes on publish: the
//! `Nats-Msg-Id` header is the envelope's dedupe key.
//!
//! * [`subject`]: the subject, stream and consumer layout (and why: per-agent permissions);
//! * [`codec`]: an envelope to a message and back, with the subject's sender checked;
//! * `transport` (feature `nats`): streams, durable pull consumers with explicit ack, publishing
//!   in bounded windows of awaited acks, the counts a run's stream carried;
//! * [`access`]: who may do what (subject permissions per role, the server's `authorization`
//!   block, [`access::NatsOptions`] with TLS and credentials, passwords redacted in `Debug`);
//! * `secure` (feature `nats`): connecting with those options, plaintext refused unless allowed;
//! * `server` (feature `nats`): a `nats-server` on loopback for tests, stopped on drop.
//!
//! NATS only moves envelopes; no state lives in it (no KV: its compare-and-set loses updates on
//! nats-server 2.9).

pub mod access;
pub mod codec;
pub mod subject;

/// The NATS client the transport is built on (connect options, credentials, JetStream
/// contexts with other timeouts).
#[cfg(feature = "nats")]
pub use async_nats;
#[cfg(feature = "nats")]
pub mod secure;
#[cfg(feature = "nats")]
pub mod server;
#[cfg(feature = "nats")]
pub mod transport;
