//! The supervisor process: waits for its workers to register, creates the run's stream, then
//! runs the plan's supervisor core with its assignments and control messages going out over
//! NATS and its workers' replies coming back from its own consumer.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use quorate_coordinator::{run_star_linked_to, Participants, WorkerLink};
use quorate_nats::codec::{outgoing, Directory, Outgoing};
use quorate_nats::transport::{Inbox, Publisher, RunCounts, RunStream, Settings};
use quorate_protocols::wire::Report;
use quorate_protocols::{AgentId, Limits, Role, RunId, Sender};
use quorate_workers::{AssignBatch, ControlMsg, ReportBatch};
use tokio::sync::mpsc::UnboundedSender;

use super::{
    connect, end_subject, nats_runtime, own_id, registered_worker, registrations_subject,
    subject_err, welcome_subject, ProcessError, Registration, Welcome,
};
use crate::plan_file::PlanFile;
use crate::runner::{FileRun, RunArgs};
use crate::security::Security;

/// How the supervisor reaches its workers.
#[derive(Clone, Debug)]
pub struct RemoteArgs {
    /// `nats://HOST:PORT`.
    pub nats: String,
    /// Workers to wait for.
    pub workers: usize,
    /// The run's id (the workers are started with the same).
    pub run: RunId,
    /// How long to wait for them.
    pub wait: Duration,
    /// The store of record whose leases tell which workers are live (`--store etcd://...`);
    /// without one a lost worker is not noticed (its tasks wait for their timeouts).
    pub store: Option<quorate_state::EtcdUrl>,
    /// TLS and credentials (the supervisor's agent id is its NATS user's, when that is a
    /// uuid).
    pub security: Security,
}

/// A finished supervisor process's run.
#[derive(Debug)]
pub struct RemoteRun {
    /// The run (its world is the supervisor's: empty; the effects are in the workers').
    pub run: FileRun,
    /// What the run's stream carried.
    pub counts: RunCounts,
    /// The workers, in registration order.
    pub workers: Vec<AgentId>,
}

/// One remote worker as the supervisor actor sees it: assignments and control messages sent
/// to it are published on its subject.
struct NatsLink {
    to: AgentId,
    out: UnboundedSender<Outgoing>,
}

impl Actor for NatsLink {
    type Context = Context<Self>;
}

impl Handler<AssignBatch> for NatsLink {
    type Result = ();
    fn handle(&mut self, msg: AssignBatch, _: &mut Context<Self>) {
        for envelope in msg.0 {
            let _ = self.out.send(outgoing(&envelope, self.to));
        }
    }
}

impl Handler<ControlMsg> for NatsLink {
    type Result = ();
    fn handle(&mut self, msg: ControlMsg, _: &mut Context<Self>) {
        let _ = self.out.send(outgoing(&msg.0, self.to));
    }
}

/// Waits for `wanted` distinct workers on the registration subject.
async fn gather(
    client: &quorate_nats::async_nats::Client,
    run: RunId,
    wanted: usize,
    wait: Duration,
) -> Result<Vec<AgentId>, ProcessError> {
    let subject = registrations_subject(run);
    let mut registrations = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| subject_err(&subject)(e.to_string()))?;
    let deadline = Instant::now() + wait;
    let mut workers: Vec<AgentId> = Vec::with_capacity(wanted);
    while workers.len() < wanted {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, registrations.next()).await;
        let Ok(Some(message)) = next else {
            return Err(ProcessError::NotEnoughWorkers {
                registered: workers.len(),
                wanted,
                waited: wait,
            });
        };
        // The worker is the one the subject names (its permissions let it register only as
        // itself); a registration that claims another is ignored, as is anything that is not
        // one (a worker repeats its own).
        let Some(worker) = registered_worker(run, &message.subject) else {
            continue;
        };
        match serde_json::from_slice::<Registration>(&message.payload) {
            Ok(r) if r.worker != worker => eprintln!(
                "quorate: a registration on {worker}'s subject claims to be {}: ignored",
                r.worker
            ),
            Ok(_) if !workers.contains(&worker) => {
                eprintln!(
                    "quorate: worker {worker} registered ({}/{wanted})",
                    workers.len() + 1
                );
                workers.push(worker);
            }
            _ => {}
        }
    }
    let _ = registrations.unsubscribe().await;
    Ok(workers)
}

/// Runs plan file `file` (loaded from `path`) as the supervisor process of `remote.run`:
/// waits for `remote.workers` workers to register (else [`ProcessError::NotEnoughWorkers`]),
/// creates the run's stream and consumers, welcomes the workers, runs the supervisor core with
/// its envelopes over NATS, then announces the end of the run.
pub fn run_remote(
    path: &Path,
    file: &PlanFile,
    args: &RunArgs,
    remote: &RemoteArgs,
) -> Result<RemoteRun, ProcessError> {
    let (plan, book) = file
        .compile(path)
        .map_err(crate::runner::RunFileError::from)?;
    args.approve.check(&[(path, file)])?;
    let me = Sender {
        agent: own_id(None, &remote.security)?,
        role: Role::Supervisor,
    };
    let rt = nats_runtime()?;
    let client = rt.block_on(connect(&remote.nats, &remote.security, me.agent))?;
    let js = {
        let _in_runtime = rt.enter();
        quorate_nats::async_nats::jetstream::new(client.clone())
    };
    eprintln!(
        "quorate: run {}: waiting for {} workers on {}",
        remote.run, remote.workers, remote.nats
    );
    let workers = rt.block_on(gather(&client, remote.run, remote.workers, remote.wait))?;
    // Failover: the workers' leases, watched from here on (see `lease.rs`).
    let mut leases = super::lease::watch(
        &rt,
        remote.store.as_ref(),
        &remote.security,
        remote.run,
        &workers,
    )?;
    let senders: Vec<Sender> = workers
        .iter()
        .map(|&agent| Sender {
            agent,
            role: Role::Worker,
        })
        .collect();
    let mut recipients = vec![me.agent];
    recipients.extend(&workers);
    let (stream, inbox) = rt.block_on(async {
        let stream = RunStream::create(&js, remote.run, &recipients, Settings::default()).await?;
        let inbox: Inbox<Report> = Inbox::bind(
            &js,
            remote.run,
            me.agent,
            Directory::new(senders.iter().copied()),
            Limits::default(),
        )
        .await?;
        for &w in &workers {
            let subject = welcome_subject(remote.run, w);
            let welcome = serde_json::to_vec(&Welcome {
                supervisor: me.agent,
            })
            .expect("a welcome serializes");
            client
                .publish(subject.clone(), welcome.into())
                .await
                .map_err(|e| subject_err(&subject)(e.to_string()))?;
        }
        client
            .flush()
            .await
            .map_err(|e| subject_err("flush")(e.to_string()))?;
        Ok::<_, ProcessError>((stream, inbox))
    })?;
    let publisher = {
        let _in_runtime = rt.enter();
        Publisher::spawn(js.clone())
    };
    let out = publisher.sender();
    // The replies' reader: each reply goes to the supervisor actor, and is acked once the actor
    // handled it (accepted or refused).
    let (to_actor, actor) = tokio::sync::oneshot::channel::<Recipient<ReportBatch>>();
    let unauthorized = Arc::new(AtomicU64::new(0));
    let mut reader = rt.spawn(read_replies(inbox, actor, unauthorized.clone()));
    // The linked run uses the supervisor's side of these (chaos, worker threads and the
    // workers' settings belong to the worker processes; see `run_star_linked`).
    let options = crate::runner::run_options(file, args);
    let who = Participants {
        run: remote.run,
        me,
        workers: senders,
    };
    let output = run_star_linked_to(plan, options, who, |inputs| {
        let _ = to_actor.send(inputs.replies);
        leases.deliver_to(inputs.liveness);
        workers
            .iter()
            .map(|&to| {
                let link = NatsLink {
                    to,
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
    drop(out);
    leases.stop();
    let counts = rt.block_on(async {
        // The reader acks its last reply and ends once it sees the supervisor actor gone.
        if tokio::time::timeout(Duration::from_secs(2), &mut reader)
            .await
            .is_err()
        {
            reader.abort();
        }
        publisher.finish().await?;
        let subject = end_subject(remote.run);
        client
            .publish(subject.clone(), remote.run.to_string().into())
            .await
            .map_err(|e| subject_err(&subject)(e.to_string()))?;
        client
            .flush()
            .await
            .map_err(|e| subject_err("flush")(e.to_string()))?;
        // The server removes acked messages from a work-queue stream shortly after the ack:
        // with nothing pending, a message still held is read again, for up to half a second.
        let mut counts = stream.counts().await?;
        for _ in 0..10 {
            if counts.held == 0 || counts.ack_pending > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            counts = stream.counts().await?;
        }
        Ok::<_, ProcessError>(counts)
    })?;
    let mut output = output.map_err(crate::runner::RunFileError::from)?;
    // Replies the transport refused as unauthorized never reached the core: counted here.
    output.report.messages.rejected_unauthorized += unauthorized.load(Ordering::Relaxed);
    Ok(RemoteRun {
        run: FileRun {
            output,
            world: book.world().clone(),
        },
        counts,
        workers,
    })
}

/// Hands every reply of `inbox` to the supervisor actor; a reply whose claimed sender is not
/// the one its subject (fixed by the sender's NATS permissions) names, or from an agent not of
/// the run, is counted in `unauthorized` and never handed on.
async fn read_replies(
    mut inbox: Inbox<Report>,
    actor: tokio::sync::oneshot::Receiver<Recipient<ReportBatch>>,
    unauthorized: Arc<AtomicU64>,
) {
    let Ok(actor) = actor.await else { return };
    while actor.connected() {
        let delivery = match inbox.next(Duration::from_millis(100)).await {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("quorate: reading replies: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (envelope, acker) = delivery.split();
        match envelope {
            // Acked whether the actor took it or had stopped already (the run is over: nobody
            // would take it later either).
            Ok(envelope) => {
                let _ = actor.send(ReportBatch(vec![Box::new(envelope)])).await;
            }
            Err(refused) => {
                if refused.is_unauthorized() {
                    unauthorized.fetch_add(1, Ordering::Relaxed);
                }
                eprintln!("quorate: a message refused by the transport: {refused}");
            }
        }
        if let Err(e) = acker.ack().await {
            eprintln!("quorate: {e}");
        }
    }
}
