//! One distributed run of `bench dag --store etcd://... --nats nats://...` (cargo features
//! `etcd` and `nats`): the supervisor core (as `quorate run --nats` runs it) and `--workers`
//! worker cores (as `quorate worker` runs them) in this process, each with its own NATS
//! connection, its own durable consumer of the run's stream and its own publisher, so that
//! every envelope crosses the server; the run kept on etcd through the journal `quorate run
//! --store` uses.
//!
//! Batching, where it pays: each reader hands its core everything its consumer has delivered
//! already (up to [`BATCH_MAX`] envelopes, [`Inbox::next_batch`]) as one input, and acks them
//! together ([`ack_all`]), off the reader's path. The supervisor journals the events and
//! results of one input together, so while one journal write is with etcd the next replies
//! gather into the next input: a slower store makes larger batches instead of a queue of
//! single writes. The publishers await their acks in windows ([`Publisher`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use quorate_coordinator::{
    run_star_linked, ApprovalPolicy, Durable, Participants, RunOptions, SupervisorConfig,
    WorkerLink,
};
use quorate_nats::codec::{outgoing, Directory, Outgoing};
use quorate_nats::transport::{
    ack_all, Context, Inbox, Published, Publisher, RunCounts, RunStream, Settings,
};
use quorate_protocols::wire::{Assignment, Report};
use quorate_protocols::{AgentId, Envelope, Limits, Role, Sender};
use quorate_workers::{
    AgentRegistry, AssignBatch, ControlMsg, Replies, ReportBatch, ToolRegistry, WorkerActor,
    WorkerConfig,
};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::distributed::{Carried, DistributedRun};
use super::{answer_agent, DagArgs};
use crate::durable::RunStore;
use crate::process::{connect, nats_runtime, ToWorker};

/// Most envelopes a reader hands its core as one input.
pub(super) const BATCH_MAX: usize = 256;

/// How long a reader waits for its next envelope before it looks whether the run ended.
const POLL: Duration = Duration::from_millis(50);

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The supervisor's side of one worker: assignments and control messages sent to it are
/// published on its subject (as the supervisor process's link does).
struct Link {
    to: AgentId,
    out: UnboundedSender<Outgoing>,
}

impl Actor for Link {
    type Context = actix::Context<Self>;
}

impl Handler<AssignBatch> for Link {
    type Result = ();
    fn handle(&mut self, msg: AssignBatch, _: &mut Self::Context) {
        for envelope in msg.0 {
            let _ = self.out.send(outgoing(&envelope, self.to));
        }
    }
}

impl Handler<ControlMsg> for Link {
    type Result = ();
    fn handle(&mut self, msg: ControlMsg, _: &mut Self::Context) {
        let _ = self.out.send(outgoing(&msg.0, self.to));
    }
}

/// A worker's replies, published to the supervisor's subject.
struct Replying {
    to: AgentId,
    out: UnboundedSender<Outgoing>,
}

impl Actor for Replying {
    type Context = actix::Context<Self>;
}

impl Handler<ReportBatch> for Replying {
    type Result = ();
    fn handle(&mut self, msg: ReportBatch, _: &mut Self::Context) {
        for envelope in msg.0 {
            let _ = self.out.send(outgoing(&envelope, self.to));
        }
    }
}

/// One worker's connection: its inbox and its publisher.
struct WorkerSide {
    me: AgentId,
    inbox: Inbox<ToWorker>,
    publisher: Publisher,
}

/// One distributed run of `plan` kept on `kept`'s cluster, its envelopes over the NATS server
/// at `url`. A run that does not complete is an error.
pub(super) fn run_distributed(
    plan: quorate_protocols::Plan,
    args: DagArgs,
    kept: &RunStore,
    url: &str,
    security: &crate::security::Security,
) -> Result<DistributedRun, String> {
    let setup = Instant::now();
    let rt = nats_runtime().map_err(text)?;
    let mut ids = quorate_workers::edge::random_ids();
    let run = ids.run_id();
    let me = Sender {
        agent: ids.agent_id(),
        role: Role::Supervisor,
    };
    let workers: Vec<Sender> = (0..args.workers)
        .map(|_| Sender {
            agent: ids.agent_id(),
            role: Role::Worker,
        })
        .collect();
    let client = rt
        .block_on(connect(url, security, me.agent))
        .map_err(text)?;
    let js = {
        let _in_runtime = rt.enter();
        quorate_nats::async_nats::jetstream::new(client)
    };
    let mut recipients = vec![me.agent];
    recipients.extend(workers.iter().map(|w| w.agent));
    let (stream, inbox, sides) = rt
        .block_on(async {
            let stream = RunStream::create(&js, run, &recipients, Settings::default()).await?;
            let inbox: Inbox<Report> = Inbox::bind(
                &js,
                run,
                me.agent,
                Directory::new(workers.iter().copied()),
                Limits::default(),
            )
            .await?;
            let mut sides = Vec::with_capacity(workers.len());
            for w in &workers {
                let own: Context = quorate_nats::async_nats::jetstream::new(
                    connect(url, security, w.agent).await?,
                );
                let inbox =
                    Inbox::bind(&own, run, w.agent, Directory::new([me]), Limits::default())
                        .await?;
                sides.push(WorkerSide {
                    me: w.agent,
                    inbox,
                    publisher: Publisher::spawn(own),
                });
            }
            Ok::<_, crate::process::ProcessError>((stream, inbox, sides))
        })
        .map_err(text)?;
    let publisher = {
        let _in_runtime = rt.enter();
        Publisher::spawn(js.clone())
    };
    let journal = Arc::new(kept.journal(run));
    // The workers, as a worker process runs them: an actix system of their own.
    let (stop_readers, stopped) = watch::channel(false);
    let (pool, addrs) = WorkerPool::start(&sides, me.agent, args, &journal)?;
    let mut readers = Vec::with_capacity(sides.len());
    let mut worker_publishers = Vec::with_capacity(sides.len());
    for (side, addr) in sides.into_iter().zip(addrs) {
        readers.push(rt.spawn(feed_worker(side.inbox, addr, stopped.clone())));
        worker_publishers.push(side.publisher);
    }
    let setup_s = setup.elapsed().as_secs_f64();

    let out = publisher.sender();
    let (to_reader, actor) = oneshot::channel::<Recipient<ReportBatch>>();
    let mut reader = rt.spawn(feed_supervisor(inbox, actor));
    let options = RunOptions {
        supervisor: SupervisorConfig {
            attempt_timeout_ms: 600_000,
            approvals: ApprovalPolicy::None,
            ..SupervisorConfig::default()
        },
        worker: WorkerConfig::default(),
        durable: Some(Durable {
            run,
            journal: journal.clone(),
            actions: journal.clone(),
            restored_actions: Arc::new(Vec::new()),
            resume: None,
        }),
        ..RunOptions::default()
    };
    let who = Participants {
        run,
        me,
        workers: workers.clone(),
        roles: Vec::new(),
    };
    let start = Instant::now();
    let output = run_star_linked(plan, options, who, |replies| {
        let _ = to_reader.send(replies);
        workers
            .iter()
            .map(|w| {
                let link = Link {
                    to: w.agent,
                    out: out.clone(),
                }
                .start();
                WorkerLink {
                    assign: link.clone().recipient(),
                    control: link.recipient(),
                }
            })
            .collect()
    });
    let elapsed_s = start.elapsed().as_secs_f64();
    drop(out);
    let output = output.map_err(text)?;
    let report = &output.report;
    if report.stop_reason.as_deref() != Some("completed") {
        return Err(format!(
            "the distributed DAG run did not complete ({}); its throughput would mean nothing",
            report.stop_detail.clone().unwrap_or_default()
        ));
    }
    let _ = stop_readers.send(true);
    let (counts, published, workers_published, (inputs, replies)) = rt.block_on(async {
        // The supervisor's reader ends once it sees the supervisor gone.
        let read = match tokio::time::timeout(Duration::from_secs(5), &mut reader).await {
            Ok(done) => done.map_err(text)??,
            Err(_) => {
                reader.abort();
                return Err("the supervisor's reader did not end".to_string());
            }
        };
        for r in readers {
            r.await.map_err(text)??;
        }
        let published = publisher.finish().await.map_err(text)?;
        pool.stop();
        let mut workers_published = Published::default();
        for p in worker_publishers {
            let p = p.finish().await.map_err(text)?;
            workers_published.acked += p.acked;
            workers_published.duplicates += p.duplicates;
        }
        let counts = settled_counts(&stream).await?;
        stream.delete().await.map_err(text)?;
        Ok::<_, String>((counts, published, workers_published, read))
    })?;
    Ok(DistributedRun {
        run,
        elapsed_s,
        setup_s,
        writes: journal.writes(),
        commits: journal.commits(),
        inputs,
        replies,
        carried: Carried {
            supervisor_published: published.acked,
            workers_published: workers_published.acked,
            deduped: published.duplicates + workers_published.duplicates,
            report_sent: report.messages.sent,
            report_delivered: report.messages.delivered,
            stored: counts.stored,
            delivered: counts.delivered,
            redelivered: counts.redelivered,
            held: counts.held,
            ack_pending: counts.ack_pending,
        },
    })
}

/// The stream's counts once the server removed the acked messages (a work-queue stream does
/// so shortly after the ack: with nothing pending, a message still held is read again, for up
/// to half a second).
async fn settled_counts(stream: &RunStream) -> Result<RunCounts, String> {
    let mut counts = stream.counts().await.map_err(text)?;
    for _ in 0..10 {
        if counts.held == 0 || counts.ack_pending > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        counts = stream.counts().await.map_err(text)?;
    }
    Ok(counts)
}

/// The worker cores on an actix system of their own thread (as in a worker process), spread
/// over `threads` arbiters (0: all on that thread).
struct WorkerPool {
    stop: oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl WorkerPool {
    /// Starts a worker core for each of `sides`, replying to `supervisor` through its side's
    /// publisher, on `args.threads` threads, its agent answering `args.result_bytes` bytes; the
    /// pool and the cores' addresses, in order.
    fn start(
        sides: &[WorkerSide],
        supervisor: AgentId,
        args: DagArgs,
        journal: &Arc<crate::durable::Journal>,
    ) -> Result<(Self, Vec<Addr<WorkerActor>>), String> {
        let parts: Vec<(AgentId, UnboundedSender<Outgoing>)> =
            sides.iter().map(|s| (s.me, s.publisher.sender())).collect();
        let journal = journal.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let (started, addrs) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("bench-workers".into())
            .spawn(move || {
                let system = System::new();
                let arbiters = system.block_on(async move {
                    let arbiters: Vec<Arbiter> =
                        (0..args.threads).map(|_| Arbiter::new()).collect();
                    let addrs: Vec<Addr<WorkerActor>> = parts
                        .into_iter()
                        .enumerate()
                        .map(|(i, (me, out))| {
                            let replies = Replying {
                                to: supervisor,
                                out,
                            }
                            .start();
                            let agents = AgentRegistry::new().with_fallback(
                                move |_: &quorate_workers::Assignment| {
                                    answer_agent(args.result_bytes, args.cites)
                                },
                            );
                            let worker = WorkerActor::with_replies(
                                me,
                                WorkerConfig::default(),
                                agents,
                                ToolRegistry::new(),
                                Replies::Batched(replies.recipient()),
                            )
                            .with_journal(journal.clone(), &[]);
                            match arbiters.get(i % arbiters.len().max(1)) {
                                Some(a) => WorkerActor::start_in_arbiter(&a.handle(), |_| worker),
                                None => worker.start(),
                            }
                        })
                        .collect();
                    let _ = started.send(addrs);
                    let _ = stopped.await;
                    for a in &arbiters {
                        a.stop();
                    }
                    arbiters
                });
                for a in arbiters {
                    let _ = a.join();
                }
            })
            .map_err(text)?;
        let addrs = addrs
            .recv()
            .map_err(|_| "the workers' thread ended before they started".to_string())?;
        Ok((Self { stop, thread }, addrs))
    }

    /// Stops the cores and waits for their thread (their reply senders go with them).
    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// Hands what reaches a worker's consumer to its core, a batch at a time, until `stopped`; the
/// acks of a batch go out together behind it.
async fn feed_worker(
    mut inbox: Inbox<ToWorker>,
    worker: Addr<WorkerActor>,
    mut stopped: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut acking: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    loop {
        let batch = tokio::select! {
            _ = stopped.changed() => break,
            batch = inbox.next_batch(POLL, BATCH_MAX) => batch.map_err(text)?,
        };
        let mut assignments: Vec<Box<Envelope<Assignment>>> = Vec::with_capacity(batch.len());
        let mut ackers = Vec::with_capacity(batch.len());
        for delivery in batch {
            let (envelope, acker) = delivery.split();
            ackers.push(acker);
            let envelope = envelope.map_err(|e| format!("a worker refused a message: {e}"))?;
            if let ToWorker::Assignment(_) = &envelope.payload {
                assignments.push(Box::new(envelope.map(|p| match p {
                    ToWorker::Assignment(a) => *a,
                    ToWorker::Control(_) => unreachable!("matched above"),
                })));
                continue;
            }
            let control = envelope.map(|p| match p {
                ToWorker::Control(c) => c,
                ToWorker::Assignment(_) => unreachable!("matched above"),
            });
            // After the assignments before it: a cancel never overtakes its task.
            if !assignments.is_empty() {
                let batch = AssignBatch::new(std::mem::take(&mut assignments));
                worker.send(batch).await.map_err(text)?;
            }
            worker.send(ControlMsg(control)).await.map_err(text)?;
        }
        if !assignments.is_empty() {
            worker
                .send(AssignBatch::new(assignments))
                .await
                .map_err(text)?;
        }
        acking.push(tokio::spawn(
            async move { ack_all(ackers).await.map_err(text) },
        ));
    }
    for a in acking {
        a.await.map_err(text)??;
    }
    Ok(())
}

/// Hands the workers' replies to the supervisor core, a batch at a time, until the supervisor
/// is gone; the acks of a batch go out together behind it. `(inputs, replies)` handed.
async fn feed_supervisor(
    mut inbox: Inbox<Report>,
    actor: oneshot::Receiver<Recipient<ReportBatch>>,
) -> Result<(u64, u64), String> {
    let Ok(actor) = actor.await else {
        return Ok((0, 0));
    };
    let (mut inputs, mut replies) = (0, 0);
    let mut acking: Vec<JoinHandle<Result<(), String>>> = Vec::new();
    while actor.connected() {
        let batch = inbox.next_batch(POLL, BATCH_MAX).await.map_err(text)?;
        if batch.is_empty() {
            continue;
        }
        let mut envelopes = Vec::with_capacity(batch.len());
        let mut ackers = Vec::with_capacity(batch.len());
        for delivery in batch {
            let (envelope, acker) = delivery.split();
            ackers.push(acker);
            let envelope =
                envelope.map_err(|e| format!("the supervisor refused a message: {e}"))?;
            envelopes.push(Box::new(envelope));
        }
        inputs += 1;
        replies += envelopes.len() as u64;
        // Handled (journaled) before its acks: a crash in between redelivers, never loses.
        // Acked even if the supervisor stopped meanwhile (nobody would take it later).
        let _ = actor.send(ReportBatch::new(envelopes)).await;
        acking.push(tokio::spawn(
            async move { ack_all(ackers).await.map_err(text) },
        ));
    }
    for a in acking {
        a.await.map_err(text)??;
    }
    Ok((inputs, replies))
}
