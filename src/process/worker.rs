//! The worker process: registers with its run's supervisor, then hands every assignment and
//! control message of its consumer to an unchanged worker core (the in-process [`WorkerActor`],
//! with the plan file's agents and tools) and publishes its replies, until the run ends.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures_util::StreamExt;
use quorate_nats::codec::{outgoing, Directory, Outgoing};
use quorate_nats::transport::{Inbox, Publisher};
use quorate_protocols::{AgentId, Limits, Role, RunId, Sender};
use quorate_workers::{AgentRegistry, AssignMsg, ControlMsg, Replies, ReportMsg, WorkerActor};
use tokio::sync::mpsc::UnboundedSender;

use super::{
    connect, end_subject, nats_runtime, own_id, register_subject, subject_err, welcome_subject,
    ProcessError, Registration, ToWorker, Welcome,
};
use crate::plan_file::PlanFile;
use crate::security::Security;

/// What `quorate worker` takes.
#[derive(Clone, Debug)]
pub struct WorkerArgs {
    /// `nats://HOST:PORT`.
    pub nats: String,
    /// The run to work for.
    pub run: RunId,
    /// This worker's id (random if not given).
    pub id: Option<AgentId>,
    /// The plan file whose agents and tools the worker registers.
    pub plan: PathBuf,
    /// How long to wait for the supervisor's welcome.
    pub wait: Duration,
    /// The store of record (`--store etcd://...`): the scripted world and the tasks' action
    /// books live there, and the worker holds a lease (failover; see `lease.rs`).
    pub store: Option<quorate_state::EtcdUrl>,
    /// The lease's time to live (`--lease-ms`).
    pub lease: Duration,
    /// TLS and credentials (without `id`, the worker is its NATS user's agent, when that is a
    /// uuid).
    pub security: Security,
    /// The plan roles this worker serves (`--roles`), announced in its registration: the
    /// supervisor sends it only tasks of these roles. Empty: every role.
    pub roles: Vec<String>,
}

/// What a worker process did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerExit {
    /// Its id.
    pub id: AgentId,
    /// Envelopes it handed to its core (assignments and control messages).
    pub received: u64,
    /// Effects its scripted tools committed (this process's world).
    pub effects: usize,
    /// Writes of its action books the store refused: a newer attempt had taken the task over.
    pub fenced: u64,
}

/// Publishes the worker core's replies to the supervisor.
struct NatsReplies {
    to: AgentId,
    out: UnboundedSender<Outgoing>,
}

impl Actor for NatsReplies {
    type Context = Context<Self>;
}

impl Handler<ReportMsg> for NatsReplies {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) {
        let _ = self.out.send(outgoing(&msg.0, self.to));
    }
}

/// Registers until welcomed; the supervisor's id.
async fn register(
    client: &quorate_nats::async_nats::Client,
    run: RunId,
    me: AgentId,
    roles: &[String],
    wait: Duration,
) -> Result<AgentId, ProcessError> {
    let subject = welcome_subject(run, me);
    let mut welcomes = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| subject_err(&subject)(e.to_string()))?;
    let register = register_subject(run, me);
    let announcement = serde_json::to_vec(&Registration {
        worker: me,
        roles: roles.to_vec(),
    })
    .expect("serializes");
    let deadline = Instant::now() + wait;
    loop {
        client
            .publish(register.clone(), announcement.clone().into())
            .await
            .map_err(|e| subject_err(&register)(e.to_string()))?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ProcessError::NotWelcomed { run, waited: wait });
        }
        let round = left.min(Duration::from_secs(1));
        if let Ok(Some(message)) = tokio::time::timeout(round, welcomes.next()).await {
            if let Ok(w) = serde_json::from_slice::<Welcome>(&message.payload) {
                return Ok(w.supervisor);
            }
        }
    }
}

/// Runs a worker process of `args.run` until its supervisor announces the end of the run.
pub fn run_worker(args: &WorkerArgs) -> Result<WorkerExit, ProcessError> {
    let file = PlanFile::load(&args.plan).map_err(crate::runner::RunFileError::from)?;
    let (_, book) = file
        .compile(&args.plan)
        .map_err(crate::runner::RunFileError::from)?;
    let tools = book.tools().expect("scripts were checked by compile");
    let agents = AgentRegistry::new().with_fallback(book.factory());
    let me = own_id(args.id, &args.security)?;
    let rt = nats_runtime()?;
    let client = rt.block_on(connect(&args.nats, &args.security, me))?;
    let js = {
        let _in_runtime = rt.enter();
        quorate_nats::async_nats::jetstream::new(client.clone())
    };
    let attached = super::lease::attach(
        &rt,
        args.store.as_ref(),
        &args.security,
        args.run,
        me,
        book.world(),
        args.lease,
    )?;
    let books = attached.books();
    eprintln!("quorate: worker {me}: registering for run {}", args.run);
    let (supervisor, inbox, mut end) = rt.block_on(async {
        let end_subject = end_subject(args.run);
        let end = client
            .subscribe(end_subject.clone())
            .await
            .map_err(|e| subject_err(&end_subject)(e.to_string()))?;
        let supervisor = register(&client, args.run, me, &args.roles, args.wait).await?;
        let directory = Directory::new([Sender {
            agent: supervisor,
            role: Role::Supervisor,
        }]);
        let inbox: Inbox<ToWorker> =
            Inbox::bind(&js, args.run, me, directory, Limits::default()).await?;
        Ok::<_, ProcessError>((supervisor, inbox, end))
    })?;
    eprintln!("quorate: worker {me}: welcomed by supervisor {supervisor}");
    let publisher = {
        let _in_runtime = rt.enter();
        Publisher::spawn(js.clone())
    };
    let out = publisher.sender();
    let (to_reader, worker) = tokio::sync::oneshot::channel::<Addr<WorkerActor>>();
    let reader = rt.spawn(async move {
        let worker = worker.await.ok()?;
        Some(read_inbox(inbox, &mut end, worker).await)
    });
    let config = file.worker_config();
    let system = System::new();
    let received = system.block_on(async move {
        let replies = NatsReplies {
            to: supervisor,
            out,
        }
        .start();
        let mut worker = WorkerActor::with_replies(
            me,
            config,
            agents,
            tools,
            Replies::Each(replies.recipient()),
        );
        if let Some(books) = books {
            worker = worker.with_books(books);
        }
        let worker = worker.start();
        let _ = to_reader.send(worker);
        // The reader runs on the NATS runtime; this only waits for it.
        reader.await.ok().flatten()
    });
    drop(system);
    let received = received.unwrap_or(Ok(0))?;
    rt.block_on(publisher.finish())?;
    let fenced = attached.fenced();
    attached.release(&rt);
    Ok(WorkerExit {
        id: me,
        received,
        effects: book.world().effects().len(),
        fenced,
    })
}

/// Hands every envelope of `inbox` to `worker` (acking each once the core handled it) until
/// the end of the run is announced; the number handed.
async fn read_inbox(
    mut inbox: Inbox<ToWorker>,
    end: &mut quorate_nats::async_nats::Subscriber,
    worker: Addr<WorkerActor>,
) -> Result<u64, ProcessError> {
    let mut received = 0;
    loop {
        let delivery = tokio::select! {
            _ = end.next() => return Ok(received),
            next = inbox.next(Duration::from_millis(500)) => match next? {
                Some(d) => d,
                None => continue,
            },
        };
        let (envelope, acker) = delivery.split();
        match envelope {
            Ok(envelope) => {
                received += 1;
                let handled = match envelope.payload {
                    ToWorker::Control(_) => {
                        let envelope = envelope.map(|p| match p {
                            ToWorker::Control(c) => c,
                            ToWorker::Assignment(_) => unreachable!("matched above"),
                        });
                        worker.send(ControlMsg(envelope)).await
                    }
                    ToWorker::Assignment(_) => {
                        let envelope = envelope.map(|p| match p {
                            ToWorker::Assignment(a) => *a,
                            ToWorker::Control(_) => unreachable!("matched above"),
                        });
                        worker.send(AssignMsg(envelope)).await
                    }
                };
                if handled.is_err() {
                    return Ok(received);
                }
            }
            Err(refused) => eprintln!("quorate: a message refused by the transport: {refused}"),
        }
        acker.ack().await?;
    }
}
