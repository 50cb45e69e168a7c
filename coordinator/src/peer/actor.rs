//! The actix shell around [`PeerCore`]: it carries out the core's effects on the shared stores,
//! its own worker and the links to the other peers through the one drive loop
//! ([`super::drive::drive`]), which feeds outcomes back. No domain decisions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Budget, Envelope, Payload, Precondition, RunId, TaskId};
use quorate_state::{Account, AccountId, MemoryStore, PackedLog, PreconditionFailure};
use quorate_workers::{AssignMsg, ControlMsg, ReportMsg};
use tokio::sync::oneshot;

use super::drive::{drive, PeerEnv, StoredResult};
use super::{
    commit_terminal, propose_plan, update_root_once, PeerCore, PeerMsg, PlanVersion, RootUpdate,
    Terminal, TerminalCommit,
};
use crate::shell::{commit_result, RunClock, Tick, Wakeup};
use crate::trace::TraceSink;
use crate::{Event, MessageCounts, StopReason};

/// Peer -> peer: a broadcast.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct PeerMsgEnvelope(pub Envelope<PeerMsg>);

impl quorate_workers::Envelopes for PeerMsgEnvelope {
    fn split(self) -> Vec<Self> {
        vec![self]
    }
}

/// The stores every peer of a run shares.
#[derive(Clone, Debug)]
pub struct PeerStores {
    /// `claim/<run>/<node>` -> index of the peer that claimed the task (written once).
    pub claims: Arc<MemoryStore<usize>>,
    /// `state/<run>/<node>` -> the task's terminal record (written once).
    pub states: Arc<MemoryStore<Terminal>>,
    /// `budget/<run>/root` -> the run's root account.
    pub budget: Arc<MemoryStore<Account>>,
    /// `plan/<run>` -> the plan version the run switched to (written once; absent: the run's
    /// first plan).
    pub plans: Arc<MemoryStore<PlanVersion>>,
    /// `result/<run>/<node>` -> accepted results.
    pub results: Arc<MemoryStore<quorate_protocols::Payload>>,
    /// The run log.
    pub log: Arc<PackedLog<Event>>,
    /// Run-wide event sequence (events of all peers are numbered in one sequence).
    pub seq: Arc<AtomicU64>,
}

impl PeerStores {
    /// Fresh, empty stores.
    pub fn new() -> Self {
        Self {
            claims: Arc::new(MemoryStore::new()),
            states: Arc::new(MemoryStore::new()),
            budget: Arc::new(MemoryStore::new()),
            plans: Arc::new(MemoryStore::new()),
            results: Arc::new(MemoryStore::new()),
            log: Arc::new(PackedLog::new()),
            seq: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Key of node `node`'s claim.
    pub fn claim_key(run: RunId, node: &str) -> String {
        format!("claim/{run}/{node}")
    }

    /// Key of node `node`'s terminal record.
    pub fn state_key(run: RunId, node: &str) -> String {
        format!("state/{run}/{node}")
    }

    /// Key of the run's plan version.
    pub fn plan_key(run: RunId) -> String {
        format!("plan/{run}")
    }

    /// Key of the run's root account.
    pub fn budget_key(run: RunId) -> String {
        format!("budget/{run}/root")
    }
}

impl Default for PeerStores {
    fn default() -> Self {
        Self::new()
    }
}

/// What a peer leaves when it is done.
#[derive(Clone, Debug)]
pub(crate) struct PeerSummary {
    pub(crate) reason: StopReason,
    pub(crate) messages: MessageCounts,
    pub(crate) actions: quorate_protocols::wire::ActionCounts,
    /// `(attempts, granted, spent)` per node of `plan` this peer ran.
    pub(crate) executions: Vec<Option<(u32, Budget, Budget)>>,
    /// The plan this peer ended on, and its version.
    pub(crate) plan: (quorate_protocols::Plan, u32),
}

/// One peer.
pub struct PeerActor {
    core: PeerCore,
    others: Vec<Recipient<PeerMsgEnvelope>>,
    assign: Recipient<AssignMsg>,
    control: Recipient<ControlMsg>,
    stores: PeerStores,
    trace: Option<TraceSink>,
    /// Events per kind and gate refusals per class, published to `metrics` when the peer is
    /// done (each peer publishes its own: counters add up).
    tally: crate::run_metrics::RunTally,
    clock: RunClock,
    timer: Wakeup,
    done: Option<oneshot::Sender<PeerSummary>>,
    /// A durable run's journal, the events not yet given to it, and whether a kept record
    /// (a result, a terminal record, the plan version) waits for them.
    journal: Option<(Arc<dyn crate::RunJournal>, Vec<Event>, bool)>,
}

impl std::fmt::Debug for PeerActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerActor")
            .field("run", &self.core.run())
            .field("index", &self.core.index())
            .finish_non_exhaustive()
    }
}

impl PeerActor {
    /// A peer driving `core`, broadcasting to `others`, running tasks on its own worker
    /// (`assign`/`control`), sharing `stores`; `started` is the run's common start instant.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        core: PeerCore,
        others: Vec<Recipient<PeerMsgEnvelope>>,
        assign: Recipient<AssignMsg>,
        control: Recipient<ControlMsg>,
        stores: PeerStores,
        trace: Option<TraceSink>,
        started: Instant,
        done: oneshot::Sender<PeerSummary>,
    ) -> Self {
        Self {
            core,
            others,
            assign,
            control,
            stores,
            trace,
            tally: crate::run_metrics::RunTally::default(),
            clock: RunClock::since(started),
            timer: Wakeup::default(),
            done: Some(done),
            journal: None,
        }
    }

    /// Keeps this peer's events, and the records it wins on the shared stores, in `journal`
    /// before it acts on them (a durable run: see [`crate::RunJournal`]).
    pub(crate) fn with_journal(mut self, journal: Arc<dyn crate::RunJournal>) -> Self {
        self.journal = Some((journal, Vec::new(), false));
        self
    }

    /// Writes the events collected since the last call, and the records waiting for them.
    fn sync_journal(&mut self) {
        sync_journal(&mut self.journal);
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Hands the core one input at the current run time, then carries out what it asks for.
    fn feed(&mut self, ctx: &mut Context<Self>, input: impl FnOnce(&mut PeerCore, u64)) {
        let now = self.now();
        input(&mut self.core, now);
        self.drive(ctx);
    }

    /// Carries out the core's effects through the one drive loop ([`super::drive::drive`]).
    fn drive(&mut self, ctx: &mut Context<Self>) {
        let PeerActor {
            core,
            others,
            assign,
            control,
            stores,
            trace,
            tally,
            clock,
            done,
            journal,
            ..
        } = self;
        let mut env = ActorEnv {
            run: core.run(),
            index: core.index(),
            others,
            assign,
            control,
            stores,
            trace,
            tally,
            clock: *clock,
            done,
            journal,
            stopped: false,
        };
        let _ = drive(core, &mut env);
        if env.stopped {
            ctx.stop();
            return;
        }
        self.sync_journal();
        self.timer.arm(ctx, self.clock, self.core.poll_timeout());
    }
}

/// A durable run's journal, the events not yet given to it, and whether a kept record waits
/// for them.
type Journal = Option<(Arc<dyn crate::RunJournal>, Vec<Event>, bool)>;

/// Writes the events collected since the last call, and the records waiting for them.
fn sync_journal(journal: &mut Journal) {
    if let Some((journal, pending, kept)) = journal {
        if !pending.is_empty() || *kept {
            journal.events(pending);
            pending.clear();
            *kept = false;
        }
    }
}

/// Keeps `value` under `key` with the next events (durable before this peer acts on it).
fn keep(journal: &mut Journal, key: &str, value: impl serde::Serialize) {
    if let Some((journal, _, kept)) = journal {
        let value = serde_json::to_value(value).expect("records serialize");
        journal.result(key, &value);
        *kept = true;
    }
}

/// The peer actor as its core's drive environment: every store call is answered at once
/// (in-memory stores); sends are actix messages.
struct ActorEnv<'a> {
    run: RunId,
    /// This peer's index (what its claims hold).
    index: usize,
    others: &'a [Recipient<PeerMsgEnvelope>],
    assign: &'a Recipient<AssignMsg>,
    control: &'a Recipient<ControlMsg>,
    stores: &'a PeerStores,
    trace: &'a mut Option<TraceSink>,
    tally: &'a mut crate::run_metrics::RunTally,
    clock: RunClock,
    done: &'a mut Option<oneshot::Sender<PeerSummary>>,
    journal: &'a mut Journal,
    /// The peer is done: the actor stops, nothing more is carried out.
    stopped: bool,
}

impl PeerEnv for ActorEnv<'_> {
    fn now(&mut self) -> u64 {
        self.clock.now()
    }

    fn go_on(&mut self) -> Flow {
        if self.stopped {
            Flow::Halt
        } else {
            Flow::Continue
        }
    }

    fn try_claim(&mut self, _: u32, name: &str) -> Answer<bool> {
        let key = PeerStores::claim_key(self.run, name);
        Answer::Now(
            self.stores
                .claims
                .cas_now(&key, None, self.index)
                .is_committed(),
        )
    }

    fn allocate(&mut self, _: u32, task: TaskId, slice: Budget) -> Answer<RootUpdate> {
        let key = PeerStores::budget_key(self.run);
        Answer::Now(update_root_once(&self.stores.budget, &key, |root| {
            root.allocate(AccountId::Root, AccountId::Task(task), slice)
        }))
    }

    fn close_slice(&mut self, _: u32, task: TaskId, spent: Budget) -> Answer<RootUpdate> {
        let key = PeerStores::budget_key(self.run);
        Answer::Now(update_root_once(&self.stores.budget, &key, |root| {
            root.child_closed(AccountId::Task(task), spent)
        }))
    }

    fn check_preconditions(
        &mut self,
        _: u32,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        Answer::Now(quorate_state::check_preconditions(
            &self.stores.results,
            &checks,
        ))
    }

    fn execute(&mut self, envelope: Box<Envelope<Assignment>>) {
        sync_journal(self.journal);
        self.assign.do_send(AssignMsg(*envelope));
    }

    fn control(&mut self, envelope: Envelope<Control>) {
        sync_journal(self.journal);
        self.control.do_send(ControlMsg(envelope));
    }

    fn commit_terminal(
        &mut self,
        name: &str,
        _claimed: bool,
        record: Terminal,
    ) -> Answer<TerminalCommit> {
        let key = PeerStores::state_key(self.run, name);
        let outcome = commit_terminal(&self.stores.states, &key, record);
        if let TerminalCommit::Won { record, version } = &outcome {
            keep(
                self.journal,
                &key,
                super::resume::KeptTerminal::of(record, *version),
            );
        }
        Answer::Now(outcome)
    }

    fn commit_result(&mut self, _: u32, key: &str, value: Payload) -> Answer<StoredResult> {
        let kept = self.journal.as_ref().map(|_| value.clone());
        let stored = commit_result(&self.stores.results, key.to_string(), value);
        if let (None, Some(value)) = (&stored, kept) {
            keep(self.journal, key, value.value());
        }
        Answer::Now(stored)
    }

    fn propose_plan(&mut self, record: PlanVersion) -> Answer<Option<PlanVersion>> {
        let key = PeerStores::plan_key(self.run);
        let stored = propose_plan(&self.stores.plans, &key, record.clone());
        if stored.as_ref() == Some(&record) {
            keep(self.journal, &key, &record);
        }
        Answer::Now(stored)
    }

    fn read_plan(&mut self) -> Answer<Option<PlanVersion>> {
        let key = PeerStores::plan_key(self.run);
        Answer::Now(self.stores.plans.get_now(&key).map(|v| v.value))
    }

    fn broadcast(&mut self, envelope: Box<Envelope<PeerMsg>>) {
        sync_journal(self.journal);
        for other in self.others {
            other.do_send(PeerMsgEnvelope((*envelope).clone()));
        }
    }

    fn record(&mut self, mut event: Event) {
        self.tally.observe(&event.kind);
        event.seq = self.stores.seq.fetch_add(1, Ordering::Relaxed);
        self.stores.log.append_now(event.run_id, &event);
        if let Some((_, pending, _)) = self.journal {
            pending.push(event.clone());
        }
        if let Some(trace) = self.trace {
            trace.send(event);
        }
    }

    fn done(&mut self, core: &PeerCore, reason: StopReason) {
        sync_journal(self.journal);
        tracing::info!(run = %self.run, peer = core.index(), %reason, "peer done");
        *self.trace = None;
        self.tally.publish();
        if let Some(done) = self.done.take() {
            let n = core.plan().len() as u32;
            let _ = done.send(PeerSummary {
                reason,
                messages: core.messages(),
                actions: core.actions(),
                executions: (0..n).map(|i| core.execution(i)).collect(),
                plan: (core.plan().clone(), core.plan_version()),
            });
        }
        self.stopped = true;
    }
}

impl Actor for PeerActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.feed(ctx, PeerCore::start);
    }
}

impl Handler<PeerMsgEnvelope> for PeerActor {
    type Result = ();
    fn handle(&mut self, msg: PeerMsgEnvelope, ctx: &mut Self::Context) {
        self.feed(ctx, |core, now| core.handle_broadcast(now, msg.0));
    }
}

impl Handler<ReportMsg> for PeerActor {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, ctx: &mut Self::Context) {
        self.feed(ctx, |core, now| core.handle_worker_reply(now, msg.0));
    }
}

impl Handler<Tick> for PeerActor {
    type Result = ();
    fn handle(&mut self, _: Tick, ctx: &mut Self::Context) {
        self.timer.fired();
        self.feed(ctx, PeerCore::handle_tick);
    }
}
