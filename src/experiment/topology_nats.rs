//! `quorate experiment topology --transport nats`: the exchange's envelopes through NATS
//! JetStream (cargo feature `nats`).
//!
//! Each exchange gets a stream of its own run ([`RunStream::create`]: work-queue retention, one
//! durable pull consumer per participant). A participant's counted envelope is published to the
//! recipient's subject ([`quorate_nats::subject`]) by one background [`Publisher`] (acks awaited
//! in bounded windows); one receive loop per participant pulls from its consumer, hands each
//! envelope to the participant's actor and acks it once the actor read it (or refused it as a
//! second copy: a redelivery is read once). When every participant has read what the exchange
//! owes it, the stream's own counts are read ([`NatsCarried`]) and the stream is deleted.

use std::time::Duration;

use actix::prelude::*;
use quorate_nats::codec::{outgoing, Directory, Outgoing};
use quorate_nats::transport::{Context, Inbox, Publisher, RunStream, Settings};
use quorate_protocols::{AgentId, Envelope, Limits, RunId, Sender};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::topology::{Deliver, NatsCarried, TopologyError, Turn};

/// How long a participant waits for its next envelope before the exchange counts as stalled.
const NEXT_TIMEOUT: Duration = Duration::from_secs(60);

/// The caps on an incoming envelope: as large as a NATS message may be by default (1 MiB), so
/// any `--msg-tokens` the server carries is read.
fn limits() -> Limits {
    Limits {
        max_bytes: 1 << 20,
        max_string: 1 << 20,
        ..Limits::default()
    }
}

/// Where a participant's counted envelopes go: the recipient's subject, through the publisher.
#[derive(Debug)]
pub(super) struct NatsRoute {
    agents: Vec<AgentId>,
    tx: UnboundedSender<Outgoing>,
}

impl NatsRoute {
    /// Queues `envelope` for participant `index`. A publisher that failed stops taking them; the
    /// exchange then stalls and [`NatsLink::explain`] names the failure.
    pub(super) fn publish(&self, index: usize, envelope: &Envelope<Turn>) {
        let _ = self.tx.send(outgoing(envelope, self.agents[index]));
    }
}

/// One exchange's stream, publisher and receive loops.
pub(super) struct NatsLink {
    js: Context,
    run: RunId,
    senders: Vec<Sender>,
    stream: RunStream,
    publisher: Publisher,
    loops: Vec<JoinHandle<Result<(), String>>>,
}

fn nats_err(e: impl std::fmt::Display) -> TopologyError {
    TopologyError::Nats(e.to_string())
}

impl NatsLink {
    /// Connects to `url` with `security` (through the processes' one NATS connect, as the
    /// NATS user's agent or else the first participant) and makes run `run`'s stream with a
    /// consumer for each of `senders`.
    pub(super) async fn open(
        url: &str,
        security: &crate::security::Security,
        run: RunId,
        senders: &[Sender],
    ) -> Result<(Self, NatsRoute), TopologyError> {
        let agent = security
            .agent()
            .or_else(|| senders.first().map(|s| s.agent))
            .ok_or_else(|| nats_err("an exchange without participants"))?;
        let client = crate::process::connect(url, security, agent)
            .await
            .map_err(nats_err)?;
        let js = quorate_nats::async_nats::jetstream::new(client);
        let agents: Vec<AgentId> = senders.iter().map(|s| s.agent).collect();
        let stream = RunStream::create(&js, run, &agents, Settings::default())
            .await
            .map_err(nats_err)?;
        let publisher = Publisher::spawn(js.clone());
        let route = NatsRoute {
            agents,
            tx: publisher.sender(),
        };
        let link = Self {
            js,
            run,
            senders: senders.to_vec(),
            stream,
            publisher,
            loops: Vec::new(),
        };
        Ok((link, route))
    }

    /// Starts a receive loop for each participant: `to[i]` reads `expect[i]` envelopes.
    pub(super) fn listen(&mut self, to: &[Recipient<Deliver>], expect: &[u64]) {
        let directory = Directory::new(self.senders.iter().copied());
        for ((sender, to), &expect) in self.senders.iter().zip(to).zip(expect) {
            self.loops.push(actix::spawn(receive(
                self.js.clone(),
                self.run,
                sender.agent,
                directory.clone(),
                to.clone(),
                expect,
            )));
        }
    }

    /// Why the exchange stalled in `round`: a receive loop's or the publisher's error if one
    /// ended with one, else [`TopologyError::Stalled`].
    pub(super) async fn explain(self, round: u64) -> TopologyError {
        for handle in self.loops {
            if handle.is_finished() {
                if let Ok(Err(e)) = handle.await {
                    return TopologyError::Nats(e);
                }
            }
        }
        drop(self.stream);
        match tokio::time::timeout(Duration::from_millis(100), self.publisher.finish()).await {
            Ok(Err(e)) => nats_err(e),
            _ => TopologyError::Stalled { round },
        }
    }

    /// Waits for the receive loops (every envelope read and acked), reads what the stream
    /// carried, and deletes it.
    pub(super) async fn finish(self, formula: u64) -> Result<NatsCarried, TopologyError> {
        for handle in self.loops {
            handle
                .await
                .map_err(nats_err)?
                .map_err(TopologyError::Nats)?;
        }
        let counts = self.stream.counts().await.map_err(nats_err)?;
        self.stream.delete().await.map_err(nats_err)?;
        Ok(NatsCarried {
            stored: counts.stored,
            delivered: counts.delivered,
            redelivered: counts.redelivered,
            held: counts.held,
            matches: counts.stored == formula && counts.delivered == formula && counts.held == 0,
        })
    }
}

/// Hands `expect` envelopes from `me`'s consumer to `to`, acking each after the actor read it.
async fn receive(
    js: Context,
    run: RunId,
    me: AgentId,
    directory: Directory,
    to: Recipient<Deliver>,
    expect: u64,
) -> Result<(), String> {
    let mut inbox: Inbox<Turn> = Inbox::bind(&js, run, me, directory, limits())
        .await
        .map_err(|e| e.to_string())?;
    let mut read = 0;
    while read < expect {
        let next = inbox.next(NEXT_TIMEOUT).await.map_err(|e| e.to_string())?;
        let Some(delivery) = next else {
            return Err(format!(
                "{me} read {read} of its {expect} envelopes; none came within {NEXT_TIMEOUT:?}"
            ));
        };
        let (envelope, acker) = delivery.split();
        match envelope {
            Ok(envelope) => {
                let first = to
                    .send(Deliver(envelope))
                    .await
                    .map_err(|e| e.to_string())?;
                read += u64::from(first);
            }
            Err(refused) => return Err(format!("{me} refused an envelope: {refused}")),
        }
        acker.ack().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}
