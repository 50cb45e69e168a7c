//! The supervisor process: waits for its workers to register, creates the run's stream, then
//! runs the plan's supervisor core with its assignments and control messages going out over
//! NATS and its workers' replies coming back from its own consumer.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use quorate_coordinator::{run_star_linked_to, Participants, UnauthorizedDelivery, WorkerLink};
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
    /// The supervisor's agent id.
    pub supervisor: AgentId,
    /// The workers, in registration order.
    pub workers: Vec<AgentId>,
    /// The plan roles each worker serves (`--roles`; empty: every role), in the same order.
    pub roles: Vec<Vec<String>>,
}

/// One remote worker as the supervisor actor sees it: assignments and control messages sent
/// to it are published on its subject.
struct NatsLink {
    to: AgentId,
    out: UnboundedSender<Outgoing>,
    /// Raised before each assignment of a later attempt is published (`fence.rs`).
    fences: super::fence::Fences,
}

impl Actor for NatsLink {
    type Context = Context<Self>;
}

impl Handler<AssignBatch> for NatsLink {
    type Result = ();
    fn handle(&mut self, msg: AssignBatch, _: &mut Context<Self>) {
        for envelope in msg.0 {
            self.fences.raise(envelope.task, envelope.attempt);
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

/// Waits for `wanted` distinct workers on the registration subject; their ids and the roles
/// each serves, in registration order.
async fn gather(
    client: &quorate_nats::async_nats::Client,
    run: RunId,
    wanted: usize,
    wait: Duration,
) -> Result<(Vec<AgentId>, Vec<Vec<String>>), ProcessError> {
    let subject = registrations_subject(run);
    let mut registrations = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| subject_err(&subject)(e.to_string()))?;
    let deadline = Instant::now() + wait;
    let mut workers: Vec<AgentId> = Vec::with_capacity(wanted);
    let mut roles: Vec<Vec<String>> = Vec::with_capacity(wanted);
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
            Ok(r) if !workers.contains(&worker) => {
                let serves = if r.roles.is_empty() {
                    "every role".to_string()
                } else {
                    format!("roles {}", r.roles.join(","))
                };
                eprintln!(
                    "quorate: worker {worker} registered ({}/{wanted}), serving {serves}",
                    workers.len() + 1
                );
                workers.push(worker);
                roles.push(r.roles);
            }
            _ => {}
        }
    }
    let _ = registrations.unsubscribe().await;
    Ok((workers, roles))
}

/// Runs plan file `file` (loaded from `path`) as the supervisor process of `remote.run`:
/// waits for `remote.workers` workers to register (else [`ProcessError::NotEnoughWorkers`]),
/// creates the run's stream and consumers, welcomes the workers, runs the supervisor core with
/// its envelopes over NATS, then announces the end of the run. A run kept in a store
/// (`args.durable`) is journaled there; [`run_remote_kept`](super::run_remote_kept) also keeps
/// the ids [`resume_remote`](super::resume_remote) needs to bring it back.
pub fn run_remote(
    path: &Path,
    file: &PlanFile,
    args: &RunArgs,
    remote: &RemoteArgs,
) -> Result<RemoteRun, ProcessError> {
    start(path, file, args, remote, None)
}

/// [`run_remote`]; with `record` (the kept run's, for `args.durable`), the supervisor's and the
/// workers' ids are set in it and it is written to the store before any worker is welcomed.
pub(super) fn start(
    path: &Path,
    file: &PlanFile,
    args: &RunArgs,
    remote: &RemoteArgs,
    record: Option<&mut crate::durable::RunRecord>,
) -> Result<RemoteRun, ProcessError> {
    let compiled = file
        .compile(path)
        .map_err(crate::runner::RunFileError::from)?;
    args.approve.check(&[(path, file)])?;
    let me = own_id(None, &remote.security)?;
    let nats = Nats::connect(&remote.nats, &remote.security, me)?;
    eprintln!(
        "quorate: run {}: waiting for {} workers on {}",
        remote.run, remote.workers, remote.nats
    );
    let (workers, roles) = nats.rt.block_on(gather(
        &nats.client,
        remote.run,
        remote.workers,
        remote.wait,
    ))?;
    // Before anything is kept or welcomed: a task nobody would ever run is refused.
    super::check_roles(&compiled.0, &roles)?;
    if let Some(record) = record {
        super::resume::keep_processes(args, record, me, &workers, &roles)?;
    }
    supervise(
        &nats,
        compiled,
        file,
        args,
        remote.run,
        me,
        workers,
        roles,
        Stream::Fresh,
        remote.store.as_ref(),
    )
}

/// A process's NATS client, its JetStream context and the runtime they live on, with the
/// security it connected with (its etcd connections use the same).
pub(super) struct Nats {
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) client: quorate_nats::async_nats::Client,
    pub(super) js: quorate_nats::async_nats::jetstream::Context,
    pub(super) security: Security,
}

impl Nats {
    /// Connects to `url` as agent `agent` with `security`, on a runtime of its own.
    pub(super) fn connect(
        url: &str,
        security: &Security,
        agent: AgentId,
    ) -> Result<Self, ProcessError> {
        let rt = nats_runtime()?;
        let client = rt.block_on(connect(url, security, agent))?;
        let js = {
            let _in_runtime = rt.enter();
            quorate_nats::async_nats::jetstream::new(client.clone())
        };
        Ok(Self {
            rt,
            client,
            js,
            security: security.clone(),
        })
    }
}

/// Whether the supervisor starts the run's stream afresh or comes back to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    /// A new run: a stream left over under its id is replaced.
    Fresh,
    /// A resumed run: the stream, its messages and its consumers stay as they are.
    Kept,
}

/// Runs the supervisor core of `run` as `me` with `workers` (in this order) over `nats`:
/// makes (or opens) the stream, welcomes the workers, moves the envelopes until the run stops,
/// then announces its end. A task goes only to a worker serving its role (`roles`, by worker;
/// empty: every role). With `store` (the etcd cluster the workers share), the workers'
/// leases are watched and their loss and return told to the core (worker failover).
#[allow(clippy::too_many_arguments)]
pub(super) fn supervise(
    nats: &Nats,
    (plan, book): (quorate_protocols::Plan, quorate_workers::ScriptBook),
    file: &PlanFile,
    args: &RunArgs,
    run: RunId,
    me: AgentId,
    workers: Vec<AgentId>,
    roles: Vec<Vec<String>>,
    stream: Stream,
    store: Option<&quorate_state::EtcdUrl>,
) -> Result<RemoteRun, ProcessError> {
    let Nats {
        rt,
        client,
        js,
        security,
    } = nats;
    // Failover: the workers' leases, watched from here on (see `lease.rs`).
    let mut leases =
        super::lease::watch(rt, store, security, run, &workers, stream == Stream::Fresh)?;
    let fences = super::fence::Fences::connect(rt, store, security, run)?;
    let me = Sender {
        agent: me,
        role: Role::Supervisor,
    };
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
        let settings = Settings::default();
        let stream = match stream {
            Stream::Fresh => RunStream::create(js, run, &recipients, settings).await?,
            Stream::Kept => {
                let stream = RunStream::open_or_create(js, run, &recipients, settings).await?;
                // What the lost supervisor read without acking comes again now, not after
                // `ack_wait`: late or duplicate replies to the resumed core.
                stream.renew_consumer(me.agent, settings).await?;
                stream
            }
        };
        let inbox: Inbox<Report> = Inbox::bind(
            js,
            run,
            me.agent,
            Directory::new(senders.iter().copied()),
            Limits::default(),
        )
        .await?;
        for &w in &workers {
            let subject = welcome_subject(run, w);
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
    let (to_actor, actor) = tokio::sync::oneshot::channel::<ReplyInputs>();
    let unauthorized = Arc::new(AtomicU64::new(0));
    let halt = super::resume::halt_at_reply();
    let mut reader = rt.spawn(read_replies(inbox, actor, unauthorized.clone(), halt));
    // The linked run uses the supervisor's side of these (chaos, worker threads and the
    // workers' settings belong to the worker processes; see `run_star_linked`).
    let mut options = crate::runner::run_options(file, args);
    let world = book.world().clone();
    // A kept run: the same journal as a run in one process (its action journal stays unused
    // here: the actions are the workers').
    options.durable = args.durable.as_ref().map(|d| d.journaled(&world));
    let who = Participants {
        run,
        me,
        workers: senders,
        roles: roles.clone(),
    };
    let output = run_star_linked_to(plan, options, who, |inputs| {
        let _ = to_actor.send((inputs.replies, inputs.refused));
        leases.deliver_to(inputs.liveness);
        workers
            .iter()
            .map(|&to| {
                let link = NatsLink {
                    to,
                    out: out.clone(),
                    fences: fences.clone(),
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
        let subject = end_subject(run);
        client
            .publish(subject.clone(), run.to_string().into())
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
    // Replies the transport refused as unauthorized after the supervisor stopped (the core
    // counted and logged those before): counted here.
    output.report.messages.rejected_unauthorized += unauthorized.load(Ordering::Relaxed);
    Ok(RemoteRun {
        run: FileRun { output, world },
        counts,
        supervisor: me.agent,
        workers,
        roles,
    })
}

/// Where the replies' reader hands what it reads: the replies, and word of the refused ones.
type ReplyInputs = (Recipient<ReportBatch>, Recipient<UnauthorizedDelivery>);

/// Hands every reply of `inbox` to the supervisor actor. A reply whose claimed sender is not
/// the one its subject (fixed by the sender's NATS permissions) names, or from an agent not of
/// the run, is never handed on: the actor is told of it ([`UnauthorizedDelivery`]: counted,
/// logged and traced), or, once the run has stopped, it is counted in `unauthorized`.
async fn read_replies(
    mut inbox: Inbox<Report>,
    actor: tokio::sync::oneshot::Receiver<ReplyInputs>,
    unauthorized: Arc<AtomicU64>,
    halt: Option<u64>,
) {
    let Ok((actor, refused_to)) = actor.await else {
        return;
    };
    let mut read = 0;
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
        read += 1;
        if halt == Some(read) {
            super::resume::halt(read).await;
        }
        let (envelope, acker) = delivery.split();
        match envelope {
            // Acked whether the actor took it or had stopped already (the run is over: nobody
            // would take it later either).
            Ok(envelope) => {
                let _ = actor.send(ReportBatch::new(vec![Box::new(envelope)])).await;
            }
            Err(refused) => {
                // Counted here if the actor could not take it (stopped, or its report taken).
                if refused.is_unauthorized()
                    && !matches!(refused_to.send(UnauthorizedDelivery).await, Ok(true))
                {
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
