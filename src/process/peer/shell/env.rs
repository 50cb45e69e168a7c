//! The shell as its core's drive environment ([`PeerEnv`]): the effects the drive loop hands
//! over, each etcd call as a [`Request`] that [`Shell::carry_out`](super::Shell::carry_out) makes.

use std::time::Instant;

use quorate_coordinator::peer::drive::{PeerEnv, StoredResult};
use quorate_coordinator::peer::{PeerStores, PlanVersion, RootUpdate, Terminal, TerminalCommit};
use quorate_coordinator::{Event, PeerCore, PeerMsg, StopReason};
use quorate_nats::codec::{outgoing, Outgoing};
use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{AgentId, Budget, Envelope, Payload, Precondition, RunId, TaskId};
use quorate_state::{PackedLog, PreconditionFailure};
use quorate_workers::{AssignMsg, ControlMsg};
use tokio::sync::mpsc::UnboundedSender;

/// An etcd call the drive loop handed over, made by [`Shell::answer`](super::Shell::answer).
#[derive(Debug)]
pub(super) enum Request {
    Claim {
        node: u32,
        key: String,
        state: String,
    },
    Allocate {
        node: u32,
        task: TaskId,
        slice: Budget,
    },
    Close {
        node: u32,
        task: TaskId,
        spent: Budget,
    },
    Check {
        node: u32,
        checks: Vec<Precondition>,
    },
    Fence {
        node: u32,
        claim: String,
        task: TaskId,
        past: u32,
    },
    Commit {
        key: String,
        /// The claim the record is guarded by (a task this peer claimed).
        claim: Option<String>,
        record: Terminal,
    },
    Result {
        node: u32,
        key: String,
        value: Payload,
    },
    Propose {
        key: String,
        record: PlanVersion,
    },
    ReadPlan {
        key: String,
    },
}

/// The shell as its core's drive environment: every etcd call is answered later (the loop
/// halts until [`Shell::carry_out`](super::Shell::carry_out) has made it and fed its answer, so effects are carried
/// out in order, one store call at a time); sends, the worker and the log answer nothing.
pub(super) struct ShellEnv<'a> {
    pub(super) run: RunId,
    pub(super) started: Instant,
    pub(super) others: &'a [AgentId],
    pub(super) publish: &'a UnboundedSender<Outgoing>,
    pub(super) worker: &'a actix::Addr<quorate_workers::WorkerActor>,
    pub(super) log: &'a PackedLog<Event>,
    pub(super) seq: &'a mut u64,
    pub(super) done: &'a mut Option<StopReason>,
    /// The etcd call out, if any.
    pub(super) pending: Option<Request>,
}

impl ShellEnv<'_> {
    fn later<T>(&mut self, request: Request) -> Answer<T> {
        self.pending = Some(request);
        Answer::Later
    }
}

impl PeerEnv for ShellEnv<'_> {
    fn now(&mut self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn go_on(&mut self) -> Flow {
        if self.pending.is_some() || self.done.is_some() {
            Flow::Halt
        } else {
            Flow::Continue
        }
    }

    fn try_claim(&mut self, node: u32, name: &str) -> Answer<bool> {
        let key = PeerStores::claim_key(self.run, name);
        let state = PeerStores::state_key(self.run, name);
        self.later(Request::Claim { node, key, state })
    }

    fn allocate(&mut self, node: u32, task: TaskId, slice: Budget) -> Answer<RootUpdate> {
        self.later(Request::Allocate { node, task, slice })
    }

    fn close_slice(&mut self, node: u32, task: TaskId, spent: Budget) -> Answer<RootUpdate> {
        self.later(Request::Close { node, task, spent })
    }

    fn check_preconditions(
        &mut self,
        node: u32,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        self.later(Request::Check { node, checks })
    }

    fn execute(&mut self, envelope: Box<Envelope<Assignment>>) {
        self.worker.do_send(AssignMsg(*envelope));
    }

    fn control(&mut self, envelope: Envelope<Control>) {
        self.worker.do_send(ControlMsg(envelope));
    }

    fn raise_fence(
        &mut self,
        node: u32,
        name: &str,
        task: TaskId,
        past: u32,
    ) -> Answer<Option<u32>> {
        let claim = PeerStores::claim_key(self.run, name);
        self.later(Request::Fence {
            node,
            claim,
            task,
            past,
        })
    }

    fn commit_terminal(
        &mut self,
        name: &str,
        claimed: bool,
        record: Terminal,
    ) -> Answer<TerminalCommit> {
        let key = PeerStores::state_key(self.run, name);
        // A task this peer claimed is committed only while it holds the claim.
        let claim = claimed.then(|| PeerStores::claim_key(self.run, name));
        self.later(Request::Commit { key, claim, record })
    }

    fn commit_result(&mut self, node: u32, key: &str, value: Payload) -> Answer<StoredResult> {
        let key = key.to_string();
        self.later(Request::Result { node, key, value })
    }

    fn propose_plan(&mut self, record: PlanVersion) -> Answer<Option<PlanVersion>> {
        let key = PeerStores::plan_key(self.run);
        self.later(Request::Propose { key, record })
    }

    fn read_plan(&mut self) -> Answer<Option<PlanVersion>> {
        let key = PeerStores::plan_key(self.run);
        self.later(Request::ReadPlan { key })
    }

    fn broadcast(&mut self, envelope: Box<Envelope<PeerMsg>>) {
        // One envelope to every other peer: JetStream dedupes publishes by `Nats-Msg-Id`, so
        // each copy's id names its recipient too (the cores' duplicate rule still goes by the
        // envelope's own dedupe key).
        for &to in self.others {
            let mut copy = outgoing(&envelope, to);
            copy.msg_id = format!("{}.{to}", copy.msg_id);
            let _ = self.publish.send(copy);
        }
    }

    fn record(&mut self, mut event: Event) {
        event.seq = *self.seq;
        *self.seq += 1;
        self.log.append_now(event.run_id, &event);
    }

    fn done(&mut self, _: &PeerCore, reason: StopReason) {
        *self.done = Some(reason);
    }
}
