//! The JetStream side: a run's stream and its recipients' durable pull consumers, publishing in
//! bounded windows of awaited acks, inboxes that hand each envelope to its core before acking
//! it (module `inbox`, re-exported here), and the counts the stream carried.
//!
//! Who does what (see [`crate::subject`] for the permissions this allows): the process that owns
//! the run (the supervisor) [creates](RunStream::create) the stream and every consumer; every
//! process publishes its own envelopes ([`publish_all`], [`Publisher`]) and [binds](Inbox::bind)
//! to its own consumer, never creating one.
//!
//! Acks are explicit and come after the core: [`Delivery::ack`] once the core accepted *or
//! refused* the envelope (a refusal is final: the same bytes would be refused again), nothing
//! while it is being handled, so a process that dies mid-way has the envelope redelivered after
//! `ack_wait` (at most `max_deliver` times). A redelivered copy carries the same dedupe key, so
//! the receiving core's duplicate rule decides it, as for any other copy.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, Consumer};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::stream::{self, RetentionPolicy};
pub use async_nats::jetstream::Context;
use async_nats::HeaderMap;
use quorate_protocols::{AgentId, RunId};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::task::JoinHandle;

use crate::codec::{Outgoing, MSG_ID_HEADER};
use crate::subject;

mod inbox;
pub use inbox::{ack_all, Acker, Delivery, Inbox};

/// Publishes whose acks are awaited together: a publisher never holds more unawaited acks than
/// this (holding ~20k at once deadlocked the client).
pub const PUBLISH_WINDOW: usize = 256;

/// A failure of the NATS side, naming what it was doing and on what.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The server at `url` could not be reached.
    #[error("connecting to NATS at {url}: {message}")]
    Connect {
        /// The address given.
        url: String,
        /// The client's error.
        message: String,
    },
    /// Creating, reading or deleting stream `stream` failed.
    #[error("JetStream stream {stream}: {message}")]
    Stream {
        /// The stream.
        stream: String,
        /// The client's error.
        message: String,
    },
    /// Creating, binding to or reading consumer `consumer` failed.
    #[error("JetStream consumer {consumer}: {message}")]
    Consumer {
        /// The consumer.
        consumer: String,
        /// The client's error.
        message: String,
    },
    /// A publish to `subject` failed or was not acknowledged.
    #[error("publishing to {subject}: {message}")]
    Publish {
        /// The subject.
        subject: String,
        /// The client's error.
        message: String,
    },
    /// Acknowledging a message of consumer `consumer` failed.
    #[error("acking on {consumer}: {message}")]
    Ack {
        /// The consumer.
        consumer: String,
        /// The client's error.
        message: String,
    },
    /// The publisher task ended without reporting (it panicked or was cancelled).
    #[error("the publisher task ended: {0}")]
    Publisher(String),
}

/// Connects to `url` (`nats://HOST:PORT`) and opens its JetStream context.
pub async fn connect(url: &str) -> Result<Context, TransportError> {
    let client = async_nats::connect(url)
        .await
        .map_err(|e| TransportError::Connect {
            url: url.to_string(),
            message: e.to_string(),
        })?;
    Ok(async_nats::jetstream::new(client))
}

/// Delivery settings of a run's consumers and dedupe of its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// An unacked message is delivered again after this long.
    pub ack_wait: Duration,
    /// Most deliveries of one message (then the server stops redelivering it).
    pub max_deliver: i64,
    /// Publishes with the same `Nats-Msg-Id` within this window are stored once.
    pub duplicate_window: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            duplicate_window: Duration::from_secs(120),
        }
    }
}

/// What a run's stream carried, read from the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunCounts {
    /// Messages the stream stored (its last sequence; a deduped publish takes none).
    pub stored: u64,
    /// Messages it still holds (work-queue retention deletes a message once acked).
    pub held: u64,
    /// Deliveries by all consumers, redeliveries included.
    pub delivered: u64,
    /// Of those, redeliveries.
    pub redelivered: u64,
    /// Delivered, not acked yet.
    pub ack_pending: u64,
}

/// A run's stream on the server.
#[derive(Debug)]
pub struct RunStream {
    js: Context,
    name: String,
    run: RunId,
    recipients: Vec<AgentId>,
}

/// The durable pull consumer of `to` on run `run`'s stream, with explicit ack.
fn consumer_config(run: RunId, to: AgentId, settings: Settings) -> pull::Config {
    let consumer = subject::consumer_name(to);
    pull::Config {
        durable_name: Some(consumer),
        filter_subject: subject::inbox_filter(run, to),
        ack_policy: AckPolicy::Explicit,
        ack_wait: settings.ack_wait,
        max_deliver: settings.max_deliver,
        ..Default::default()
    }
}

fn stream_err(name: &str) -> impl Fn(String) -> TransportError + '_ {
    move |message| TransportError::Stream {
        stream: name.to_string(),
        message,
    }
}

impl RunStream {
    /// Creates run `run`'s stream (work-queue retention, file storage) and a durable pull
    /// consumer with explicit ack for each of `recipients`. A stream of the same name left over
    /// (an earlier run with the same seeded id) is deleted first, with its dedupe state.
    pub async fn create(
        js: &Context,
        run: RunId,
        recipients: &[AgentId],
        settings: Settings,
    ) -> Result<Self, TransportError> {
        let name = subject::stream_name(run);
        let err = stream_err(&name);
        if js.get_stream(&name).await.is_ok() {
            js.delete_stream(&name)
                .await
                .map_err(|e| err(e.to_string()))?;
        }
        drop(err);
        Self::open_or_create(js, run, recipients, settings).await
    }

    /// Opens run `run`'s stream as it is, with the messages it holds and its consumers' acks
    /// (a supervisor that comes back to a run its workers are still bound to); a stream or a
    /// consumer of `recipients` that does not exist yet is created as
    /// [`create`](Self::create) does.
    pub async fn open_or_create(
        js: &Context,
        run: RunId,
        recipients: &[AgentId],
        settings: Settings,
    ) -> Result<Self, TransportError> {
        let name = subject::stream_name(run);
        let err = stream_err(&name);
        let stream = js
            .get_or_create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject::run_subjects(run)],
                retention: RetentionPolicy::WorkQueue,
                duplicate_window: settings.duplicate_window,
                ..Default::default()
            })
            .await
            .map_err(|e| err(e.to_string()))?;
        drop(err);
        for &to in recipients {
            let consumer = subject::consumer_name(to);
            stream
                .get_or_create_consumer(&consumer, consumer_config(run, to, settings))
                .await
                .map(|_: Consumer<pull::Config>| ())
                .map_err(|e| TransportError::Consumer {
                    consumer,
                    message: e.to_string(),
                })?;
        }
        Ok(Self {
            js: js.clone(),
            name,
            run,
            recipients: recipients.to_vec(),
        })
    }

    /// Checks that run `run`'s stream and the consumers of `recipients` are laid out as
    /// [`create`](Self::create) makes them: the stream on the run's subjects only, with
    /// work-queue retention (the server then refuses two consumers on one subject), and each
    /// agent's consumer `to-<A>` filtered to `A`'s subjects. Whoever may create streams could
    /// have made them otherwise (any peer's user may open a run, `crate::access`): a consumer
    /// filtered to another agent's subjects would hand that agent's messages to the consumer's
    /// owner. A peer checks this before it sends anything.
    pub async fn check_layout(
        js: &Context,
        run: RunId,
        recipients: &[AgentId],
    ) -> Result<(), TransportError> {
        let name = subject::stream_name(run);
        let err = stream_err(&name);
        let stream = js.get_stream(&name).await.map_err(|e| err(e.to_string()))?;
        let config = &stream.cached_info().config;
        if config.subjects != [subject::run_subjects(run)]
            || config.retention != RetentionPolicy::WorkQueue
        {
            return Err(err(format!(
                "not laid out as a run's stream: subjects {:?}, retention {:?} (expected [{:?}], \
                 work queue)",
                config.subjects,
                config.retention,
                subject::run_subjects(run)
            )));
        }
        for &to in recipients {
            let consumer = subject::consumer_name(to);
            let info =
                stream
                    .consumer_info(&consumer)
                    .await
                    .map_err(|e| TransportError::Consumer {
                        consumer: consumer.clone(),
                        message: e.to_string(),
                    })?;
            let expected = subject::inbox_filter(run, to);
            let found = &info.config;
            // (A consumer with several filters has none here: refused as well.)
            if found.filter_subject != expected {
                return Err(TransportError::Consumer {
                    consumer,
                    message: format!(
                        "filtered to {:?}, not {expected:?}: it would read another agent's \
                         messages",
                        found.filter_subject
                    ),
                });
            }
        }
        Ok(())
    }

    /// Makes `to`'s consumer anew (its messages stay in the stream: work-queue retention drops
    /// a message when it is acked, not when a consumer goes). What the consumer delivered
    /// before without an ack is delivered again at once, instead of after `ack_wait`: for an
    /// agent that comes back after its process was lost (only it may be bound to the consumer).
    pub async fn renew_consumer(
        &self,
        to: AgentId,
        settings: Settings,
    ) -> Result<(), TransportError> {
        let consumer = subject::consumer_name(to);
        let err = |message: String| TransportError::Consumer {
            consumer: consumer.clone(),
            message,
        };
        let stream = self
            .js
            .get_stream(&self.name)
            .await
            .map_err(|e| stream_err(&self.name)(e.to_string()))?;
        if stream.get_consumer::<pull::Config>(&consumer).await.is_ok() {
            stream
                .delete_consumer(&consumer)
                .await
                .map_err(|e| err(e.to_string()))?;
        }
        stream
            .create_consumer(consumer_config(self.run, to, settings))
            .await
            .map(|_| ())
            .map_err(|e| err(e.to_string()))
    }

    /// The stream's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the stream and its consumers carried so far.
    pub async fn counts(&self) -> Result<RunCounts, TransportError> {
        let err = stream_err(&self.name);
        let mut stream = self
            .js
            .get_stream(&self.name)
            .await
            .map_err(|e| err(e.to_string()))?;
        let state = stream
            .info()
            .await
            .map_err(|e| err(e.to_string()))?
            .state
            .clone();
        let mut counts = RunCounts {
            stored: state.last_sequence,
            held: state.messages,
            ..RunCounts::default()
        };
        for &to in &self.recipients {
            let consumer = subject::consumer_name(to);
            let info =
                stream
                    .consumer_info(&consumer)
                    .await
                    .map_err(|e| TransportError::Consumer {
                        consumer,
                        message: e.to_string(),
                    })?;
            counts.delivered += info.delivered.consumer_sequence;
            counts.redelivered += info.num_redelivered as u64;
            counts.ack_pending += info.num_ack_pending as u64;
        }
        Ok(counts)
    }

    /// Deletes the stream, its consumers and its dedupe state.
    pub async fn delete(self) -> Result<(), TransportError> {
        self.js
            .delete_stream(&self.name)
            .await
            .map(|_| ())
            .map_err(|e| stream_err(&self.name)(e.to_string()))
    }
}

async fn send(js: &Context, out: Outgoing) -> Result<PublishAckFuture, TransportError> {
    let mut headers = HeaderMap::new();
    headers.insert(MSG_ID_HEADER, out.msg_id.as_str());
    js.publish_with_headers(out.subject.clone(), headers, out.payload.into())
        .await
        .map_err(|e| TransportError::Publish {
            subject: out.subject,
            message: e.to_string(),
        })
}

async fn await_acks(
    pending: Vec<(String, PublishAckFuture)>,
) -> Result<Vec<PublishAck>, TransportError> {
    let mut acks = Vec::with_capacity(pending.len());
    for (subject, ack) in pending {
        acks.push(ack.await.map_err(|e| TransportError::Publish {
            subject,
            message: e.to_string(),
        })?);
    }
    Ok(acks)
}

/// Publishes `batch` in order, awaiting the stream's acks every [`PUBLISH_WINDOW`] messages;
/// the acks in order (`duplicate` is set on one the stream deduped by its `Nats-Msg-Id`).
pub async fn publish_all(
    js: &Context,
    batch: Vec<Outgoing>,
) -> Result<Vec<PublishAck>, TransportError> {
    let mut acks = Vec::with_capacity(batch.len());
    let mut pending = Vec::with_capacity(PUBLISH_WINDOW);
    for out in batch {
        let subject = out.subject.clone();
        pending.push((subject, send(js, out).await?));
        if pending.len() == PUBLISH_WINDOW {
            acks.extend(await_acks(std::mem::take(&mut pending)).await?);
        }
    }
    acks.extend(await_acks(pending).await?);
    Ok(acks)
}

/// What a [`Publisher`] published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// Publishes the stream acknowledged.
    pub acked: u64,
    /// Of those, the ones it deduped (not stored again).
    pub duplicates: u64,
}

/// A background publisher for callers that cannot await (actor handlers): [`send`](Self::send)
/// queues, the task publishes what is queued in windows of at most [`PUBLISH_WINDOW`] and
/// awaits their acks before the next window.
#[derive(Debug)]
pub struct Publisher {
    tx: UnboundedSender<Outgoing>,
    task: JoinHandle<Result<Published, TransportError>>,
}

impl Publisher {
    /// Starts the task on the current tokio runtime.
    #[must_use]
    pub fn spawn(js: Context) -> Self {
        let (tx, mut rx) = unbounded_channel::<Outgoing>();
        let task = tokio::spawn(async move {
            let mut done = Published::default();
            let mut window = Vec::with_capacity(PUBLISH_WINDOW);
            while rx.recv_many(&mut window, PUBLISH_WINDOW).await > 0 {
                for ack in publish_all(&js, std::mem::take(&mut window)).await? {
                    done.acked += 1;
                    done.duplicates += u64::from(ack.duplicate);
                }
            }
            Ok(done)
        });
        Self { tx, task }
    }

    /// Queues `out`; `false` if the task has ended (on an error [`finish`](Self::finish)
    /// returns).
    pub fn send(&self, out: Outgoing) -> bool {
        self.tx.send(out).is_ok()
    }

    /// A handle that queues on the same task.
    #[must_use]
    pub fn sender(&self) -> UnboundedSender<Outgoing> {
        self.tx.clone()
    }

    /// Waits until everything queued was published and acked (every sender must be dropped),
    /// or the first error.
    pub async fn finish(self) -> Result<Published, TransportError> {
        drop(self.tx);
        self.task
            .await
            .map_err(|e| TransportError::Publisher(e.to_string()))?
    }
}
