//! A peer process (`quorate peer`, features `etcd` and `nats`): one peer of a peer-mode plan,
//! in a process of its own. Peers find each other on etcd ([`roster`]), claim tasks and commit
//! their terminal records, results and the root account by compare-and-swap on etcd (so the
//! claim rule is enforced across processes by etcd), and broadcast terminal records to each
//! other over the run's NATS JetStream stream, one consumer per peer. Each process runs the
//! unchanged [`PeerCore`] through its shell (`shell.rs`) with its own worker and prints its part
//! of the run's report (docs/distributed.md, "Peer processes").
//!
//! A claim is created under the claiming peer's etcd lease: a peer that dies loses its claims
//! when its lease expires, and the peers waiting on one of them adopt the task's terminal record
//! if it was committed, or claim the task again ([`PeerCore::handle_claim_lost`]).
//!
//! Exactly-once across peer processes: each peer's worker keeps its scripted world and its
//! action books on etcd as worker processes do ([`super::failover::Shared::for_peer`]: effects
//! under `kv/world/RUN/`, this peer's books under `kv/book/PEER/RUN/TASK`), and the holder of a
//! task's claim raises the task's fence (`kv/fence/RUN/TASK`, by CAS guarded by its claim, only
//! up) before each attempt it runs ([`PeerCore::set_fenced`]). A peer that takes a task over
//! runs a later attempt and imports the lost peer's book (its calls in flight are queried by
//! id, not made again); a peer paused past its lease is refused at its next book write, takes a
//! new lease, gives up its void claims ([`PeerCore::handle_lease_lost`]) and goes on.

pub mod roster;
mod shell;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use quorate_coordinator::peer::{PeerStores, Terminal};
use quorate_coordinator::{
    BudgetRow, MessageCounts, PeerCore, PeerMsg, RunOutput, RunReport, StopReason, TaskRow,
};
use quorate_nats::codec::Directory;
use quorate_nats::transport::{Inbox, Publisher, RunStream, Settings};
use quorate_protocols::wire::Report;
use quorate_protocols::{AgentId, Budget, Envelope, Limits, Role, RunId, Sender, TaskState};
use quorate_state::{Account, EtcdUrl, MemoryStore, Store, StoreError};
use quorate_workers::{AgentRegistry, Replies, ReportMsg, WorkerActor};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use self::roster::Roster;
use self::shell::{Incoming, SharedStores, Shell};
use super::{connect, nats_runtime, ProcessError};
use crate::plan_file::PlanFile;
use crate::runner::{FileRun, RunArgs};

/// What `quorate peer` takes.
#[derive(Clone, Debug)]
pub struct PeerArgs {
    /// `nats://HOST:PORT`.
    pub nats: String,
    /// The etcd cluster (`etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`).
    pub store: EtcdUrl,
    /// The run (every peer is given the same).
    pub run: RunId,
    /// The plan file (every peer is given the same; `topology = "peer"`).
    pub plan: PathBuf,
    /// How many peers run the plan.
    pub peers: usize,
    /// This peer's agent id (random if absent).
    pub id: Option<AgentId>,
    /// How long to wait for the other peers to join.
    pub wait: Duration,
    /// The time to live of this peer's etcd lease (whole seconds): how long a dead peer's
    /// claims block their tasks.
    pub lease: Duration,
    /// TLS and credentials (without `id`, the peer is its NATS user's agent, when that is a
    /// uuid).
    pub security: crate::security::Security,
}

/// A finished peer process: its part of the run.
#[derive(Debug)]
pub struct PeerRun {
    /// The report as this peer sees it (tasks' states, results and the budget from etcd;
    /// attempts, messages and actions its own) and its own world.
    pub run: FileRun,
    /// This peer's index.
    pub index: usize,
    /// Every peer of the run, by index.
    pub peers: Vec<AgentId>,
    /// Book writes of its worker the store refused (a newer attempt owned the task).
    pub fenced: u64,
}

/// A peer process could not go on.
#[derive(Debug, thiserror::Error)]
pub enum PeerProcessError {
    /// The plan file, NATS or the runtime (as for the star's processes).
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The plan file is not a peer-mode plan.
    #[error("{path}: `quorate peer` runs plans with topology = \"peer\"")]
    NotPeerPlan {
        /// The plan file.
        path: PathBuf,
    },
    /// The etcd cluster at `url` did not answer at the start.
    #[error("connecting to etcd at {url}: {message}")]
    Unreachable {
        /// The `--store` address.
        url: String,
        /// What failed.
        message: String,
    },
    /// etcd failed `what` (after the retries, or refused it).
    #[error("etcd: {what}: {source}")]
    Store {
        /// What the peer was doing.
        what: &'static str,
        /// The store's error.
        source: StoreError,
    },
    /// Fewer than `wanted` peers joined within `waited`.
    #[error("{joined} of {wanted} peers joined within {waited:?} (start each with `quorate peer --nats URL --store URL --run RUN --plan PLAN --peers N`)")]
    NotEnoughPeers {
        /// Peers in the roster.
        joined: usize,
        /// `--peers`.
        wanted: usize,
        /// `--wait-ms`.
        waited: Duration,
    },
    /// The roster of run `run` does not fit this peer.
    #[error("run {run}: {detail}")]
    PeersDisagree {
        /// The run.
        run: RunId,
        /// What differs.
        detail: String,
    },
    /// This peer's lease expired (etcd deleted its claims, which other peers may take over) and
    /// the cluster granted it no new one.
    #[error("this peer's etcd lease {lease} expired (it lost the cluster for longer than --lease-ms) and no new one was granted; its claims are void")]
    LeaseLost {
        /// The lease id.
        lease: i64,
    },
}

impl PeerProcessError {
    /// The exit code: 2 bad input or an unreachable server, 9 not enough peers in time, 8
    /// anything failing mid-run.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            PeerProcessError::Process(e) => e.exit_code(),
            PeerProcessError::NotPeerPlan { .. }
            | PeerProcessError::PeersDisagree { .. }
            | PeerProcessError::Unreachable { .. } => 2,
            PeerProcessError::NotEnoughPeers { .. } => super::EXIT_NO_COUNTERPART,
            PeerProcessError::Store { .. } | PeerProcessError::LeaseLost { .. } => {
                StopReason::EXIT_RUNTIME
            }
        }
    }
}

/// Tries of one etcd request before the peer gives up (about 10 s with the pauses).
const STORE_TRIES: u32 = 100;

/// Runs `request` until it answers, pausing 100 ms after each failure, at most
/// [`STORE_TRIES`] times. Requests are reads or writes whose lost answer the caller resolves
/// from what the store then holds.
async fn retry<T, F>(
    what: &'static str,
    mut request: impl FnMut() -> F,
) -> Result<T, PeerProcessError>
where
    F: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut tries = 0;
    loop {
        match request().await {
            Ok(v) => return Ok(v),
            Err(e @ StoreError::Unavailable { .. }) if tries + 1 < STORE_TRIES => {
                tries += 1;
                if tries == 1 {
                    eprintln!("quorate: etcd: {what}: {e}; trying again");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(source) => return Err(PeerProcessError::Store { what, source }),
        }
    }
}

/// Hands the worker core's replies to the shell's loop.
struct ToShell(UnboundedSender<Envelope<Report>>);

impl Actor for ToShell {
    type Context = Context<Self>;
}

impl Handler<ReportMsg> for ToShell {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) {
        let _ = self.0.send(msg.0);
    }
}

fn store_err(what: &'static str) -> impl Fn(StoreError) -> PeerProcessError {
    move |source| PeerProcessError::Store { what, source }
}

/// Runs one peer of `args.run` until its core is done (see the module docs).
///
/// # Errors
/// See [`PeerProcessError`].
pub fn run_peer_process(args: &PeerArgs, run_args: &RunArgs) -> Result<PeerRun, PeerProcessError> {
    let load = |e| ProcessError::Plan(crate::runner::RunFileError::from(e));
    let file = PlanFile::load(&args.plan).map_err(load)?;
    if file.run.topology != crate::plan_file::Topology::Peer {
        return Err(PeerProcessError::NotPeerPlan {
            path: args.plan.clone(),
        });
    }
    let (plan, book) = file.compile(&args.plan).map_err(load)?;
    run_args
        .approve
        .check(&[(args.plan.as_path(), &file)])
        .map_err(ProcessError::Plan)?;
    let nodes: Vec<String> = (0..plan.len() as u32)
        .map(|i| plan.node(i).id.to_string())
        .collect();
    let me = super::own_id(args.id, &args.security)?;
    let run = args.run;
    let kept = crate::durable::RunStore::connect(&args.store, &args.security).map_err(|e| {
        PeerProcessError::Unreachable {
            url: args.store.to_string(),
            message: e.to_string(),
        }
    })?;
    let etcd = kept.etcd().expect("an etcd store").clone();
    let rt = nats_runtime()?;
    let client = rt.block_on(connect(&args.nats, &args.security, me))?;
    let js = {
        let _in_runtime = rt.enter();
        quorate_nats::async_nats::jetstream::new(client.clone())
    };
    let stores = SharedStores {
        claims: etcd.store("peer-claims"),
        states: etcd.store("peer-states"),
        budget: etcd.store("peer-budget"),
        results: etcd.store("results"),
        plans: etcd.store("peer-plans"),
        fences: etcd.store("fence"),
    };
    let roster_store = etcd.store::<Roster>("peer-roster");
    eprintln!(
        "quorate: peer {me}: joining run {run} ({} peers)",
        args.peers
    );
    let (roster, lease, inbox) = rt.block_on(async {
        let lease = etcd
            .grant_lease(args.lease)
            .await
            .map_err(store_err("grant a lease"))?;
        let roster = roster::join(&roster_store, run, me, args.peers, &nodes, args.wait).await?;
        let index = roster.peers.iter().position(|&p| p == me).expect("joined");
        if index == 0 && !roster.stream {
            open_run(&stores, &plan, &file, run).await?;
            // Opened, never deleted and made anew: a stream of this run is there only if an
            // earlier first peer made it and stopped before marking the roster (and a peer's
            // NATS user may not delete streams, docs/distributed.md).
            RunStream::open_or_create(&js, run, &roster.peers, Settings::default())
                .await
                .map_err(ProcessError::from)?;
            roster::mark_stream(&roster_store, run).await?;
        } else {
            roster::wait_for_stream(&roster_store, run, args.wait).await?;
        }
        // Made by whichever peer joined first (any peer's user may open a run): laid out as a
        // run's stream must be, or a consumer could read another peer's messages.
        RunStream::check_layout(&js, run, &roster.peers)
            .await
            .map_err(ProcessError::from)?;
        let directory = Directory::new(roster.peers.iter().map(|&agent| Sender {
            agent,
            role: Role::Peer,
        }));
        let inbox: Inbox<PeerMsg> = Inbox::bind(&js, run, me, directory, Limits::default())
            .await
            .map_err(ProcessError::from)?;
        Ok::<_, PeerProcessError>((roster, lease, inbox))
    })?;
    let index = roster.peers.iter().position(|&p| p == me).expect("joined");
    eprintln!(
        "quorate: peer {me}: peer {index} of {} in run {run}",
        roster.peers.len()
    );
    let peers: Vec<Sender> = roster
        .peers
        .iter()
        .map(|&agent| Sender {
            agent,
            role: Role::Peer,
        })
        .collect();
    let others: Vec<AgentId> = roster.peers.iter().copied().filter(|&p| p != me).collect();
    let publisher = {
        let _in_runtime = rt.enter();
        Publisher::spawn(js.clone())
    };
    let (to_shell, broadcasts) = unbounded_channel::<Incoming>();
    let unauthorized = Arc::new(AtomicU64::new(0));
    let reader = rt.spawn(read_broadcasts(inbox, to_shell, unauthorized.clone()));
    let mut ids = quorate_workers::edge::random_ids();
    let worker_id = ids.agent_id();
    let worker_sender = Sender {
        agent: worker_id,
        role: Role::Worker,
    };
    let options = crate::runner::run_options(&file, run_args);
    let mut core = PeerCore::new(
        run,
        plan.clone(),
        options.supervisor.clone(),
        index,
        peers,
        worker_sender,
        roster.tasks.clone(),
        ids.fork(),
    );
    for (node, texts) in &options.evidence_text {
        core.set_evidence_text(*node, texts.clone());
    }
    // The worker's scripted world and action books live on etcd, under this peer's id.
    let shared = super::failover::Shared::for_peer(&etcd, run, me, rt.handle().clone());
    book.world().set_store(Arc::new(shared.clone()));
    core.set_fenced(true);
    let tools = book.tools().expect("scripts were checked by compile");
    let agents = AgentRegistry::new().with_fallback(book.factory());
    let publish = publisher.sender();
    let stores2 = stores.clone();
    let etcd2 = etcd.clone();
    let books: Arc<dyn quorate_workers::BookStore> = Arc::new(shared.clone());
    let system = System::new();
    let finished = system.block_on(async move {
        let (replies_tx, replies) = unbounded_channel();
        let replies_to = ToShell(replies_tx).start();
        let worker = WorkerActor::with_replies(
            worker_id,
            options.worker.clone(),
            agents,
            tools,
            Replies::Each(replies_to.recipient()),
        )
        .with_books(books)
        .start();
        let mut shell = Shell::new(
            core,
            stores2,
            lease,
            etcd2,
            others,
            publish,
            worker,
            Instant::now(),
        );
        let reason = shell.run(replies, broadcasts).await;
        let n = shell.core.plan().len() as u32;
        let executions: Vec<_> = (0..n).map(|i| shell.core.execution(i)).collect();
        (
            reason,
            shell.core.messages(),
            shell.core.actions(),
            executions,
            shell.log.clone(),
        )
    });
    drop(system);
    reader.abort();
    let (reason, mut messages, actions, executions, log) = finished;
    let fenced = shared.fenced();
    if fenced > 0 {
        eprintln!("quorate: peer {me}: its worker was fenced off {fenced} times");
    }
    // Broadcasts the transport refused as unauthorized after the shell stopped (the core
    // counted and logged those before): counted here.
    messages.rejected_unauthorized += unauthorized.load(Ordering::Relaxed);
    let reason = reason?;
    rt.block_on(publisher.finish())
        .map_err(ProcessError::from)?;
    let (report, results) = rt.block_on(report(
        &stores,
        &plan,
        run,
        Part {
            reason,
            messages,
            actions,
            executions,
        },
    ))?;
    Ok(PeerRun {
        run: FileRun {
            output: RunOutput {
                report,
                chaos: Default::default(),
                trace_lines: 0,
                log,
                results: Arc::new(results),
            },
            world: book.world().clone(),
        },
        index,
        peers: roster.peers,
        fenced,
    })
}

/// The first peer's setup of the run on etcd: the plan's data in the result store and the
/// run's root account (each created once: a second first peer changes nothing).
async fn open_run(
    stores: &SharedStores,
    plan: &quorate_protocols::Plan,
    file: &PlanFile,
    run: RunId,
) -> Result<(), PeerProcessError> {
    // A conflict means the key is there already: written before, never overwritten.
    for (key, value) in &file.data {
        let _ = retry("write the plan's data", || {
            stores.results.cas(key, None, value.clone().into())
        })
        .await?;
    }
    let key = PeerStores::budget_key(run);
    let opened = MemoryStore::<Account>::new();
    PeerCore::open_root(plan, &opened, &key);
    let root = opened.get_now(&key).expect("opened").value;
    let _ = retry("open the root account", || {
        stores.budget.cas(&key, None, root.clone())
    })
    .await?;
    Ok(())
}

/// Hands every broadcast of `inbox` to the shell, acking each once the core handled it, until
/// the shell is gone. A broadcast whose claimed sender is not the one its subject (fixed by the
/// sender's NATS permissions) names, or from an agent not of the run, is never handed on: the
/// shell is told of it (the core counts, logs and traces it), or, if the shell stopped before
/// its core took it, it is counted in `unauthorized`.
async fn read_broadcasts(
    mut inbox: Inbox<PeerMsg>,
    shell: UnboundedSender<Incoming>,
    unauthorized: Arc<AtomicU64>,
) {
    loop {
        let delivery = match inbox.next(Duration::from_millis(200)).await {
            Ok(Some(d)) => d,
            Ok(None) if shell.is_closed() => return,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("quorate: reading broadcasts: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (envelope, acker) = delivery.split();
        match envelope {
            Ok(envelope) => {
                let (handled, wait) = tokio::sync::oneshot::channel();
                if shell.send(Incoming::Broadcast(envelope, handled)).is_err()
                    || wait.await.is_err()
                {
                    // The shell is done: the message stays for nobody (left unacked).
                    return;
                }
            }
            Err(refused) => {
                if refused.is_unauthorized() {
                    // Counted here if the shell could not take it (it stopped, or stops with
                    // this still queued).
                    let (counted, wait) = tokio::sync::oneshot::channel();
                    if shell.send(Incoming::Unauthorized(counted)).is_err() || wait.await.is_err() {
                        unauthorized.fetch_add(1, Ordering::Relaxed);
                    }
                }
                eprintln!("quorate: a message refused by the transport: {refused}");
            }
        }
        if let Err(e) = acker.ack().await {
            eprintln!("quorate: {e}");
        }
    }
}

/// This peer's own part of the run, for its report.
struct Part {
    reason: StopReason,
    messages: MessageCounts,
    actions: quorate_protocols::wire::ActionCounts,
    executions: Vec<Option<(u32, Budget, Budget)>>,
}

/// The star's report shape, from what etcd holds (terminal records, results, the root
/// account) and this peer's own counters; the run's results as a store.
async fn report(
    stores: &SharedStores,
    plan: &quorate_protocols::Plan,
    run: RunId,
    part: Part,
) -> Result<(RunReport, MemoryStore<quorate_protocols::Payload>), PeerProcessError> {
    let results = MemoryStore::new();
    let mut granted_total = Budget::ZERO;
    let mut tasks = Vec::with_capacity(plan.len());
    for i in 0..plan.len() as u32 {
        let id = plan.node(i).id.clone();
        let state_key = PeerStores::state_key(run, id.as_str());
        let record: Option<Terminal> =
            retry("read a terminal record", || stores.states.get(&state_key))
                .await?
                .map(|v| v.value);
        let state = record.as_ref().map_or(TaskState::Pending, |r| r.state);
        let (attempts, granted, spent) =
            part.executions[i as usize].unwrap_or((0, Budget::ZERO, Budget::ZERO));
        granted_total = granted_total.saturating_add(&granted);
        let key = quorate_coordinator::result_key(run, id.as_str());
        let result = retry("read a result", || stores.results.get(&key)).await?;
        let result = result.filter(|_| state == TaskState::Completed).map(|v| {
            let _ = results.cas_now(&key, None, v.value.clone());
            v.value
        });
        tasks.push(TaskRow {
            id,
            state,
            attempts,
            granted,
            spent,
            result,
            top_up: None,
        });
    }
    let key = PeerStores::budget_key(run);
    let root = retry("read the root account", || stores.budget.get(&key))
        .await?
        .map(|v| v.value)
        .ok_or(PeerProcessError::Store {
            what: "read the root account",
            source: StoreError::Unavailable {
                reason: format!("{key} is missing"),
            },
        })?;
    let reason = part.reason;
    Ok((
        RunReport {
            run_id: run,
            stop_reason: Some(reason.name().to_string()),
            stop_detail: Some(reason.to_string()),
            plan_version: 1,
            tasks,
            budget: BudgetRow {
                limit: root.limit,
                reserve: root.reserve,
                granted: granted_total,
                spent: root.spent().unwrap_or(root.limit),
                returned: root.returned,
            },
            messages: part.messages,
            actions: part.actions,
            stop: Some(reason),
        },
        results,
    ))
}
