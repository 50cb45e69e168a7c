//! The receiving side: a process's [`Inbox`] on its own consumer of a run, the [`Delivery`] of
//! each message and the [`Acker`] that acks it once the core has handled it ([`ack_all`] for many).

use std::marker::PhantomData;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, Consumer};
use async_nats::jetstream::{AckKind, Message};
use futures_util::{FutureExt, StreamExt};
use quorate_protocols::{AgentId, Envelope, Limits, RunId};
use serde::de::DeserializeOwned;

use super::{Context, TransportError};
use crate::codec::{accept, Directory, Refused};
use crate::subject;

/// One message from an inbox: the envelope (or why it was refused before any core saw it) and
/// the handle to ack it.
#[derive(Debug)]
pub struct Delivery<P> {
    /// The envelope, or why the transport refused the message.
    pub envelope: Result<Envelope<P>, Refused>,
    /// How many times the server delivered this message (1 the first time).
    pub delivered: u64,
    /// Its sequence in the stream (the same on a redelivery).
    pub stream_sequence: u64,
    consumer: String,
    message: Message,
}

impl<P> Delivery<P> {
    /// Acks the message (the core accepted or refused the envelope) and waits until the server
    /// confirmed it: it will not be delivered again. A message the transport refused is
    /// terminated instead (the same bytes would be refused again).
    pub async fn ack(self) -> Result<(), TransportError> {
        self.split().1.ack().await
    }

    /// Leaves the message unacked: the server delivers it again after `ack_wait`.
    pub fn leave(self) {}

    /// The envelope (to hand to a core by value) and the handle that acks it afterwards.
    pub fn split(self) -> (Result<Envelope<P>, Refused>, Acker) {
        let kind = if self.envelope.is_ok() {
            AckKind::Ack
        } else {
            AckKind::Term
        };
        let acker = Acker {
            kind,
            consumer: self.consumer,
            message: self.message,
        };
        (self.envelope, acker)
    }
}

/// Acks one delivered message (see [`Delivery::split`]); dropping it leaves the message to be
/// redelivered.
#[derive(Debug)]
pub struct Acker {
    kind: AckKind,
    consumer: String,
    message: Message,
}

impl Acker {
    /// Acks the message (terminates it if the transport refused it) and waits until the server
    /// confirmed it.
    pub async fn ack(self) -> Result<(), TransportError> {
        self.message
            .double_ack_with(self.kind)
            .await
            .map_err(|e| TransportError::Ack {
                consumer: self.consumer,
                message: e.to_string(),
            })
    }
}

/// A process's own consumer of one run, handing out [`Delivery`]s of payload type `P`.
pub struct Inbox<P> {
    run: RunId,
    me: AgentId,
    directory: Directory,
    limits: Limits,
    consumer: String,
    messages: pull::Stream,
    _payload: PhantomData<fn() -> P>,
}

impl<P> std::fmt::Debug for Inbox<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("run", &self.run)
            .field("me", &self.me)
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

impl<P: DeserializeOwned> Inbox<P> {
    /// Binds to `me`'s consumer of run `run` (made by [`RunStream::create`](super::RunStream::create)); envelopes are
    /// accepted from the senders of `directory`, under `limits`.
    pub async fn bind(
        js: &Context,
        run: RunId,
        me: AgentId,
        directory: Directory,
        limits: Limits,
    ) -> Result<Self, TransportError> {
        let consumer = subject::consumer_name(me);
        let err = |message: String| TransportError::Consumer {
            consumer: consumer.clone(),
            message,
        };
        let handle: Consumer<pull::Config> = js
            .get_consumer_from_stream(&consumer, subject::stream_name(run))
            .await
            .map_err(|e| err(e.to_string()))?;
        let messages = handle.messages().await.map_err(|e| err(e.to_string()))?;
        Ok(Self {
            run,
            me,
            directory,
            limits,
            consumer,
            messages,
            _payload: PhantomData,
        })
    }

    /// The next message, or `None` if none arrives within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Result<Option<Delivery<P>>, TransportError> {
        match tokio::time::timeout(wait, self.messages.next()).await {
            Err(_) | Ok(None) => Ok(None),
            Ok(Some(next)) => self.delivery(next).map(Some),
        }
    }

    /// The message the consumer handed out, decoded and checked.
    fn delivery(
        &self,
        next: Result<Message, impl std::fmt::Display>,
    ) -> Result<Delivery<P>, TransportError> {
        let message = next.map_err(|e| TransportError::Consumer {
            consumer: self.consumer.clone(),
            message: e.to_string(),
        })?;
        let (delivered, stream_sequence) = message
            .info()
            .map(|i| (i.delivered.max(0) as u64, i.stream_sequence))
            .unwrap_or((1, 0));
        let envelope = accept(
            self.run,
            self.me,
            &self.directory,
            message.subject.as_str(),
            &message.payload,
            &self.limits,
        );
        Ok(Delivery {
            envelope,
            delivered,
            stream_sequence,
            consumer: self.consumer.clone(),
            message,
        })
    }

    /// The next message (waiting up to `wait` for it) and, behind it, those that have already
    /// arrived, at most `max` in all (at least one); empty if none arrives within `wait`. A
    /// caller that hands them to its core as one input and [acks them together](ack_all) makes
    /// one durable write and one round of acks for many envelopes where one each would queue.
    pub async fn next_batch(
        &mut self,
        wait: Duration,
        max: usize,
    ) -> Result<Vec<Delivery<P>>, TransportError> {
        let mut batch = Vec::new();
        let Some(first) = self.next(wait).await? else {
            return Ok(batch);
        };
        batch.push(first);
        while batch.len() < max.max(1) {
            // Only what is here already: the stream is polled once, never waited for.
            match self.messages.next().now_or_never() {
                Some(Some(next)) => batch.push(self.delivery(next)?),
                _ => break,
            }
        }
        Ok(batch)
    }
}

/// Acks every message of `ackers` (see [`Acker::ack`]) with their round trips to the server
/// overlapping, and waits until it confirmed all of them; the first error.
pub async fn ack_all(ackers: Vec<Acker>) -> Result<(), TransportError> {
    futures_util::future::try_join_all(ackers.into_iter().map(Acker::ack))
        .await
        .map(|_| ())
}
