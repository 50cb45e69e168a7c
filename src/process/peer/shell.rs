//! The shell of one peer process: it drives an unchanged [`PeerCore`] with the peer core's one
//! drive loop ([`drive`]), carrying out its effects against etcd (claims under this peer's
//! lease, tasks' fences, terminal records, the root account, results) and NATS (broadcasts),
//! handing assignments to the process's own worker, and feeding back every outcome, reply,
//! broadcast and tick. It decides nothing: which claim to take over, when to raise a fence,
//! what a lost commit means, when the peer is done, is the core's.
//!
//! Every etcd request that fails (a member lost, a leader changing) is tried again after a
//! short pause, and a write whose answer was lost is resolved by what the store holds: a
//! create finds its own value, a fence raised finds the attempt it wrote
//! ([`fence_written`]), a ledger update is idempotent (allocating the same slice again or
//! closing a closed child changes nothing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorate_coordinator::peer::drive::{drive, feed, PeerAnswer};
use quorate_coordinator::peer::{fence_after, fence_written, RootUpdate, Terminal, TerminalCommit};
use quorate_coordinator::{Event, PeerCore, PeerMsg, StopReason};
use quorate_nats::codec::Outgoing;
use quorate_protocols::wire::Report;
use quorate_protocols::{AgentId, Envelope, Payload, Precondition, TaskId};
use quorate_state::{
    Account, AccountId, CasOutcome, Etcd, EtcdLease, EtcdStore, Guarded, LedgerError, PackedLog,
    PreconditionFailure, Store,
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use super::{retry, PeerProcessError};

mod env;

use env::{Request, ShellEnv};

/// The etcd stores the peers of a run share (keys as the in-process peers name them:
/// `claim/<run>/<node>`, `state/<run>/<node>`, `budget/<run>/root`, `result/<run>/<node>`).
#[derive(Clone, Debug)]
pub(super) struct SharedStores {
    /// `peer-claims`: the claiming peer's index, under its lease.
    pub(super) claims: EtcdStore<usize>,
    /// `peer-states`: terminal records, written once.
    pub(super) states: EtcdStore<Terminal>,
    /// `peer-budget`: the run's root account.
    pub(super) budget: EtcdStore<Account>,
    /// `results`: accepted results and the plan's data.
    pub(super) results: EtcdStore<Payload>,
    /// `peer-plans`: the plan version the peers switched to (`plan/<run>`, written once).
    pub(super) plans: EtcdStore<quorate_coordinator::peer::PlanVersion>,
    /// `fence`: each task's fence (`<run>/<task id>`, the attempt that owns the task's action
    /// book; raised by CAS, only up, only by the holder of the task's claim).
    pub(super) fences: EtcdStore<u32>,
}

/// What the broadcasts' reader hands the shell.
// Nearly every message is a broadcast: boxing it to shrink the rare variant would cost an
// allocation per broadcast.
#[allow(clippy::large_enum_variant)]
pub(super) enum Incoming {
    /// A broadcast, and where to say once the core has handled it.
    Broadcast(Envelope<PeerMsg>, oneshot::Sender<()>),
    /// A broadcast the transport refused as unauthorized, and where to say once the core has
    /// counted it.
    Unauthorized(oneshot::Sender<()>),
}

/// One peer's shell (see the module docs).
pub(super) struct Shell {
    pub(super) core: PeerCore,
    pub(super) stores: SharedStores,
    pub(super) lease: EtcdLease,
    /// The cluster (a new lease when this one expired).
    pub(super) etcd: Etcd,
    /// The other peers' agent ids (broadcast recipients).
    pub(super) others: Vec<AgentId>,
    pub(super) publish: UnboundedSender<Outgoing>,
    pub(super) worker: actix::Addr<quorate_workers::WorkerActor>,
    pub(super) log: Arc<PackedLog<Event>>,
    pub(super) started: Instant,
    /// How often the claims this peer waits on are checked.
    pub(super) watch_every: Duration,
    seq: u64,
    done: Option<StopReason>,
}

impl Shell {
    /// A shell over `core`, started at `started`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        core: PeerCore,
        stores: SharedStores,
        lease: EtcdLease,
        etcd: Etcd,
        others: Vec<AgentId>,
        publish: UnboundedSender<Outgoing>,
        worker: actix::Addr<quorate_workers::WorkerActor>,
        started: Instant,
    ) -> Self {
        let watch_every = (lease.ttl() / 2).max(Duration::from_millis(200));
        Self {
            core,
            stores,
            lease,
            etcd,
            others,
            publish,
            worker,
            log: Arc::new(PackedLog::new()),
            started,
            watch_every,
            seq: 0,
            done: None,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn node_id(&self, node: u32) -> String {
        self.core.plan().node(node).id.to_string()
    }

    /// Runs the peer until its core is done; its stop reason.
    ///
    /// # Errors
    /// [`PeerProcessError::LeaseLost`]: this peer's lease expired and the cluster granted no
    /// new one; a store error that outlasted its retries.
    pub(super) async fn run(
        &mut self,
        mut replies: UnboundedReceiver<Envelope<Report>>,
        mut broadcasts: UnboundedReceiver<Incoming>,
    ) -> Result<StopReason, PeerProcessError> {
        let now = self.now();
        self.core.start(now);
        let mut lost = self.lease.watch();
        let mut watch = tokio::time::interval(self.watch_every);
        loop {
            self.carry_out().await?;
            if let Some(reason) = self.done.clone() {
                return Ok(reason);
            }
            let wake = self
                .core
                .poll_timeout()
                .map(|ms| self.started + Duration::from_millis(ms));
            let timer = async move {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(reply) = replies.recv() => {
                    let now = self.now();
                    self.core.handle_worker_reply(now, reply);
                }
                Some(incoming) = broadcasts.recv() => {
                    let now = self.now();
                    match incoming {
                        Incoming::Broadcast(envelope, handled) => {
                            self.core.handle_broadcast(now, envelope);
                            let _ = handled.send(());
                        }
                        Incoming::Unauthorized(counted) => {
                            self.core.handle_unauthorized_delivery(now);
                            let _ = counted.send(());
                        }
                    }
                }
                () = timer => {
                    let now = self.now();
                    self.core.handle_tick(now);
                }
                _ = watch.tick() => self.check_claims().await,
                changed = lost.changed() => {
                    if changed.is_err() || *lost.borrow() {
                        lost = self.renew_lease().await?;
                    }
                }
            }
        }
    }

    /// This peer's lease expired (it was paused, or cut off from the cluster, for longer than
    /// its time to live): etcd deleted its claims. Takes a new lease, and tells the core, which
    /// gives up the tasks it had claimed ([`PeerCore::handle_lease_lost`]). The watch of the
    /// new lease.
    async fn renew_lease(
        &mut self,
    ) -> Result<tokio::sync::watch::Receiver<bool>, PeerProcessError> {
        let old = self.lease.id();
        let Ok(lease) = self.etcd.grant_lease(self.lease.ttl()).await else {
            return Err(PeerProcessError::LeaseLost { lease: old });
        };
        eprintln!(
            "quorate: peer {}: its etcd lease {old} expired, its claims are void; going on under lease {}",
            self.core.index(),
            lease.id()
        );
        self.lease = lease;
        let now = self.now();
        self.core.handle_lease_lost(now);
        Ok(self.lease.watch())
    }

    /// Reads the claims of the tasks this peer waits on another peer for, and reports each one
    /// that is gone (or is this peer's own, taken on a task that had ended), with the terminal
    /// record the store holds (if any). A read that fails is left to the next round.
    async fn check_claims(&mut self) {
        let run = self.core.run();
        for node in self.core.awaiting_others() {
            let id = self.node_id(node);
            let claim = quorate_coordinator::peer::PeerStores::claim_key(run, &id);
            // Gone, or this peer's own claim of a task that had ended (see `claim`).
            match self.stores.claims.get(&claim).await {
                Ok(None) => {}
                Ok(Some(c)) if c.value == self.core.index() => {}
                _ => continue,
            }
            let state = quorate_coordinator::peer::PeerStores::state_key(run, &id);
            let Ok(stored) = self.stores.states.get(&state).await else {
                continue;
            };
            eprintln!(
                "quorate: peer {}: the claim of {id} is gone with its peer's lease (or the task had ended)",
                self.core.index()
            );
            let now = self.now();
            let stored = stored.map(|v| (v.value, v.version.raw()));
            self.core.handle_claim_lost(now, node, stored);
        }
    }

    /// Carries out every effect the core has through the peer core's one drive loop
    /// ([`drive`]): each etcd call is answered later ([`ShellEnv`] halts the loop until it is),
    /// here, then fed back.
    async fn carry_out(&mut self) -> Result<(), PeerProcessError> {
        loop {
            let Shell {
                core,
                others,
                publish,
                worker,
                log,
                started,
                seq,
                done,
                ..
            } = self;
            let mut env = ShellEnv {
                run: core.run(),
                started: *started,
                others,
                publish,
                worker,
                log,
                seq,
                done,
                pending: None,
            };
            let _ = drive(core, &mut env);
            let Some(request) = env.pending else {
                return Ok(());
            };
            let answer = self.answer(request).await?;
            let now = self.now();
            feed(&mut self.core, now, answer);
        }
    }

    /// Makes the etcd call of `request`; the answer to feed to the core.
    async fn answer(&self, request: Request) -> Result<PeerAnswer, PeerProcessError> {
        let run = self.core.run();
        let budget_key = quorate_coordinator::peer::PeerStores::budget_key(run);
        Ok(match request {
            Request::Claim { node, key, state } => PeerAnswer::Claim {
                node,
                won: self.claim(&key, &state).await?,
            },
            Request::Allocate { node, task, slice } => PeerAnswer::Allocation {
                node,
                outcome: self
                    .update_root(&budget_key, |root| {
                        root.allocate(AccountId::Root, AccountId::Task(task), slice)
                            .map(drop)
                    })
                    .await?,
            },
            Request::Close { node, task, spent } => PeerAnswer::SliceClosed {
                node,
                outcome: self
                    .update_root(&budget_key, |root| {
                        root.child_closed(AccountId::Task(task), spent).map(drop)
                    })
                    .await?,
            },
            Request::Check { node, checks } => PeerAnswer::Preconditions {
                node,
                outcome: self.check(&checks).await?,
            },
            Request::Fence {
                node,
                claim,
                task,
                past,
            } => PeerAnswer::Fence {
                node,
                raised: self.raise_fence(&claim, task, past).await?,
            },
            Request::Commit { key, claim, record } => {
                PeerAnswer::Commit(self.commit_terminal(&key, claim.as_deref(), record).await?)
            }
            Request::Result { node, key, value } => {
                let stored = match retry("commit a result", || {
                    self.stores.results.cas(&key, None, value.clone())
                })
                .await?
                {
                    CasOutcome::Committed(_) => None,
                    CasOutcome::Conflict { current } => current,
                };
                PeerAnswer::Result { node, stored }
            }
            Request::Propose { key, record } => {
                let stored = match retry("propose a plan version", || {
                    self.stores.plans.cas(&key, None, record.clone())
                })
                .await?
                {
                    CasOutcome::Committed(_) => Some(record),
                    CasOutcome::Conflict { current } => current.map(|c| c.value),
                };
                PeerAnswer::Plan(stored)
            }
            Request::ReadPlan { key } => PeerAnswer::Plan(
                retry("read the plan version", || self.stores.plans.get(&key))
                    .await?
                    .map(|v| v.value),
            ),
        })
    }

    /// Creates claim `key` for this peer under its lease; `true` if this peer holds it (also
    /// when an earlier try whose answer was lost wrote it) and the task has no terminal record
    /// under `state`. A claim outlives its peer only by the peer's lease, so a task that ended
    /// long ago may have no claim left: its record is what says it must not run again. The
    /// record is read after the claim was created, so a record committed before that is seen;
    /// the claim then stays this peer's, and [`Self::check_claims`] reports it as lost to the
    /// core, which adopts the record.
    async fn claim(&self, key: &str, state: &str) -> Result<bool, PeerProcessError> {
        if self.ended(state).await? {
            return Ok(false);
        }
        let held = self.create_claim(key).await?;
        Ok(held && !self.ended(state).await?)
    }

    /// `true` if the store holds a terminal record under `state`.
    async fn ended(&self, state: &str) -> Result<bool, PeerProcessError> {
        let record = retry("read a terminal record", || self.stores.states.get(state)).await?;
        Ok(record.is_some())
    }

    async fn create_claim(&self, key: &str) -> Result<bool, PeerProcessError> {
        let me = self.core.index();
        loop {
            let outcome = retry("claim a task", || {
                self.stores.claims.create_leased(key, me, &self.lease)
            })
            .await?;
            match outcome {
                CasOutcome::Committed(_) => return Ok(true),
                CasOutcome::Conflict { current: Some(c) } => return Ok(c.value == me),
                // Taken when compared, gone when read (its lease just expired): try again.
                CasOutcome::Conflict { current: None } => {}
            }
        }
    }

    /// Raises `task`'s fence to the first attempt after both `past` and the attempt it names,
    /// in one etcd transaction that requires `claim` to hold this peer's index (a peer whose
    /// claim went with its lease raises nothing: `None`). The fence only goes up; a CAS that
    /// finds the fence at the attempt it writes found its own earlier try, whose answer was
    /// lost ([`fence_written`]): raised. One that another write came before is tried again
    /// from what the key then holds.
    async fn raise_fence(
        &self,
        claim: &str,
        task: TaskId,
        past: u32,
    ) -> Result<Option<u32>, PeerProcessError> {
        let me = self.core.index();
        let key = crate::process::failover::fence_key(self.core.run(), task);
        let guard = self
            .stores
            .claims
            .guard(claim, Some(&me))
            .map_err(|source| PeerProcessError::Store {
                what: "guard a fence by the claim",
                source,
            })?;
        loop {
            let current = retry("read a fence", || self.stores.fences.get(&key)).await?;
            let attempt = fence_after(current.as_ref().map(|f| f.value), past);
            let version = current.map(|f| f.version);
            let outcome = retry("raise a fence", || {
                self.stores
                    .fences
                    .cas_guarded(&key, version, attempt, &guard)
            })
            .await?;
            match outcome {
                Guarded::Held(CasOutcome::Committed(_)) => return Ok(Some(attempt)),
                Guarded::Held(CasOutcome::Conflict { current }) => {
                    // This peer's own write, by a try whose answer was lost (`retry` made the
                    // same CAS again): the task runs as that attempt. Else raised meanwhile:
                    // from the top.
                    if fence_written(attempt, current.map(|f| f.value)) {
                        return Ok(Some(attempt));
                    }
                }
                Guarded::Unmet => return Ok(None),
            }
        }
    }

    /// One read-change-CAS of the root account, as the in-process shell's `update_root_once`.
    async fn update_root(
        &self,
        key: &str,
        change: impl Fn(&mut Account) -> Result<(), LedgerError>,
    ) -> Result<RootUpdate, PeerProcessError> {
        let Some(current) = retry("read the root account", || self.stores.budget.get(key)).await?
        else {
            return Ok(RootUpdate::Missing);
        };
        let mut account = current.value;
        if let Err(e) = change(&mut account) {
            return Ok(RootUpdate::Refused(e));
        }
        let written = retry("update the root account", || {
            self.stores
                .budget
                .cas(key, Some(current.version), account.clone())
        })
        .await?;
        Ok(match written {
            CasOutcome::Committed(_) => RootUpdate::Done,
            // A lost answer to this peer's own write: the account holds it already.
            CasOutcome::Conflict { current: Some(c) } if c.value == account => RootUpdate::Done,
            CasOutcome::Conflict { .. } => RootUpdate::Contended,
        })
    }

    /// CASes `record` under `key` from absent, in a transaction that also requires `claim` (if
    /// any: the task's claim, when this peer claimed the task) to hold this peer's index; what
    /// the key holds afterwards, or [`TerminalCommit::Unclaimed`] when the claim is not this
    /// peer's any more and no record is there (its lease lapsed: the task is another peer's to
    /// end).
    async fn commit_terminal(
        &self,
        key: &str,
        claim: Option<&str>,
        record: Terminal,
    ) -> Result<TerminalCommit, PeerProcessError> {
        let outcome = match claim {
            None => {
                retry("commit a terminal record", || {
                    self.stores.states.cas(key, None, record.clone())
                })
                .await?
            }
            Some(claim) => {
                let me = self.core.index();
                let guard = self
                    .stores
                    .claims
                    .guard(claim, Some(&me))
                    .map_err(|source| PeerProcessError::Store {
                        what: "guard a terminal record by the claim",
                        source,
                    })?;
                let guarded = retry("commit a terminal record", || {
                    self.stores
                        .states
                        .cas_guarded(key, None, record.clone(), &guard)
                })
                .await?;
                match guarded {
                    Guarded::Held(outcome) => outcome,
                    Guarded::Unmet => {
                        let stored =
                            retry("read a terminal record", || self.stores.states.get(key)).await?;
                        return Ok(match stored {
                            Some(c) if c.value == record => TerminalCommit::Won {
                                record,
                                version: c.version.raw(),
                            },
                            Some(c) => TerminalCommit::Taken {
                                record: c.value,
                                version: c.version.raw(),
                            },
                            None => TerminalCommit::Unclaimed { record },
                        });
                    }
                }
            }
        };
        Ok(match outcome {
            CasOutcome::Committed(version) => TerminalCommit::Won {
                record,
                version: version.raw(),
            },
            // This peer's own record, written by a try whose answer was lost.
            CasOutcome::Conflict { current: Some(c) } if c.value == record => TerminalCommit::Won {
                record,
                version: c.version.raw(),
            },
            CasOutcome::Conflict { current: Some(c) } => TerminalCommit::Taken {
                record: c.value,
                version: c.version.raw(),
            },
            CasOutcome::Conflict { current: None } => TerminalCommit::Vanished { record },
        })
    }

    /// Checks store preconditions against the shared result store, as
    /// [`quorate_state::check_preconditions`] does against a store in memory.
    async fn check(
        &self,
        checks: &[Precondition],
    ) -> Result<Result<(), PreconditionFailure>, PeerProcessError> {
        for c in checks {
            let key = match c {
                Precondition::KeyExists { key }
                | Precondition::KeyAbsent { key }
                | Precondition::KeyAtVersion { key, .. } => key,
                Precondition::InputsNonEmpty => continue,
            };
            let found = retry("check a precondition", || self.stores.results.get(key)).await?;
            let failure = match (c, found) {
                (Precondition::KeyExists { .. }, None) => {
                    Some(PreconditionFailure::Missing { key: key.clone() })
                }
                (Precondition::KeyAbsent { .. }, Some(_)) => {
                    Some(PreconditionFailure::Present { key: key.clone() })
                }
                (Precondition::KeyAtVersion { version, .. }, Some(v)) if v.version != *version => {
                    Some(PreconditionFailure::WrongVersion {
                        key: key.clone(),
                        expected: *version,
                        found: v.version,
                    })
                }
                (Precondition::KeyAtVersion { version, .. }, None) => {
                    Some(PreconditionFailure::MissingAtVersion {
                        key: key.clone(),
                        expected: *version,
                    })
                }
                _ => None,
            };
            if let Some(failure) = failure {
                return Ok(Err(failure));
            }
        }
        Ok(Ok(()))
    }
}
