//! Voting through the runtime: voters are [`VoterAgent`]s run by [`WorkerActor`]s on an actix
//! system of their own thread, and a collector actor turns their `Report` envelopes into a
//! [`MajorityVote`](quorate_coordinator::vote::MajorityVote).

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix::prelude::*;
use quorate_protocols::{
    AgentId, Budget, Capabilities, Envelope, IdSource, NodeId, Payload, ResultKind, Role, RunId,
    Sender, TaskId,
};
use quorate_workers::{
    Agent, AgentContext, AgentRegistry, AssignMsg, Assignment, Outcome, Proposal, ReportMsg,
    ToolRegistry, WorkerActor, WorkerConfig,
};

use quorate_coordinator::vote::Ballot;

/// Prefix of the evidence line a voter reads.
const EVIDENCE: &str = "evidence says: ";

/// A voter: answers what its evidence says (an answer label, a whole number), abstains without
/// evidence. It spends one step of its budget slice per vote.
#[derive(Debug, Default)]
pub struct VoterAgent;

impl Agent for VoterAgent {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let said = ctx
            .evidence_text
            .iter()
            .find_map(|line| line.strip_prefix(EVIDENCE))
            .and_then(|v| v.trim().parse::<u32>().ok());
        Proposal::Finish {
            kind: ResultKind::Suggestion,
            value: said.map_or_else(Payload::default, Payload::from),
            evidence: Vec::new(),
        }
    }
}

/// The evidence text that makes a [`VoterAgent`] answer `answer`.
#[must_use]
fn evidence_for(answer: u32) -> String {
    format!("{EVIDENCE}{answer}")
}

/// The collector is told what to expect before the assignments go out.
#[derive(Message)]
#[rtype(result = "()")]
struct Expect {
    task: TaskId,
    voters: Vec<(AgentId, u64)>,
    tie: u64,
}

struct Pending {
    voters: Vec<(AgentId, u64)>,
    tie: u64,
    answers: HashMap<AgentId, Option<u32>>,
}

/// The winning answers of one question: (naive, one vote per source).
type Winners = (Option<u32>, Option<u32>);

/// One question's outcome: the winners and each voter's reported answer, in voter order.
type Outcomes = (TaskId, Winners, Vec<Option<u32>>);

struct Collector {
    pending: HashMap<TaskId, Pending>,
    done: mpsc::Sender<Outcomes>,
}

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<Expect> for Collector {
    type Result = ();
    fn handle(&mut self, msg: Expect, _: &mut Context<Self>) {
        self.pending.insert(
            msg.task,
            Pending {
                voters: msg.voters,
                tie: msg.tie,
                answers: HashMap::new(),
            },
        );
    }
}

impl Handler<ReportMsg> for Collector {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) {
        let envelope = msg.0;
        let Some(pending) = self.pending.get_mut(&envelope.task) else {
            return;
        };
        let answer = match envelope.payload.outcome {
            Outcome::Answer { value, .. } => value.as_u64().and_then(|v| u32::try_from(v).ok()),
            _ => None,
        };
        pending.answers.insert(envelope.sender.agent, answer);
        if pending.answers.len() < pending.voters.len() {
            return;
        }
        let Some(pending) = self.pending.remove(&envelope.task) else {
            return;
        };
        // In voter order, so a tie is broken exactly as the direct path breaks it.
        let ballots = pending.voters.iter().map(|(agent, source)| {
            let ballot = match pending.answers.get(agent).copied().flatten() {
                Some(a) => Ballot::Answer(a),
                None => Ballot::Abstain,
            };
            (*agent, *source, ballot)
        });
        let result = super::voting::decide_ballots(ballots, pending.tie);
        let reported = pending
            .voters
            .iter()
            .map(|(agent, _)| pending.answers.get(agent).copied().flatten())
            .collect();
        let _ = self.done.send((envelope.task, result, reported));
    }
}

/// A runtime vote did not come back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RuntimeVoteError {
    /// The actor system did not start.
    #[error("the voters' actor system did not start")]
    NoSystem,
    /// No decision within the timeout.
    #[error("no decision from the voter actors within {0:?}")]
    Timeout(Duration),
}

/// Worker actors on an actix system running on its own thread.
pub(crate) struct RuntimeVoters {
    system: System,
    arbiter: ArbiterHandle,
    thread: Option<JoinHandle<()>>,
    collector: Addr<Collector>,
    workers: Vec<(AgentId, Addr<WorkerActor>)>,
    done: mpsc::Receiver<Outcomes>,
    run: RunId,
    me: Sender,
    node: NodeId,
    /// The ids of the voters, questions and envelopes: random, as in a production run.
    ids: IdSource,
}

impl RuntimeVoters {
    /// Starts the system and the collector.
    pub(crate) fn start() -> Result<Self, RuntimeVoteError> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let system = System::new();
            let _ = tx.send((System::current(), Arbiter::current()));
            let _ = system.run();
        });
        let (system, arbiter) = rx.recv().map_err(|_| RuntimeVoteError::NoSystem)?;
        let (done_tx, done) = mpsc::channel();
        let mut ids = quorate_workers::edge::random_ids();
        let collector = Collector::start_in_arbiter(&arbiter, move |_| Collector {
            pending: HashMap::new(),
            done: done_tx,
        });
        Ok(Self {
            system,
            arbiter,
            thread: Some(thread),
            collector,
            workers: Vec::new(),
            done,
            run: ids.run_id(),
            me: Sender {
                agent: ids.agent_id(),
                role: Role::Supervisor,
            },
            node: NodeId::new("vote").map_err(|_| RuntimeVoteError::NoSystem)?,
            ids,
        })
    }

    /// One question through the actors: voter `i` (in bloc order) is told answer `labels[i]`
    /// as its evidence; returns the winning answers (naive, one vote per source).
    pub(crate) fn vote(
        &mut self,
        blocs: &[usize],
        labels: &[u32],
        tie: u64,
    ) -> Result<Winners, RuntimeVoteError> {
        self.ask(blocs, labels, tie).map(|(winners, _)| winners)
    }

    /// As [`RuntimeVoters::vote`], and also each voter's answer as its `Report` envelope
    /// carried it (`None`: the voter abstained).
    pub(crate) fn ask(
        &mut self,
        blocs: &[usize],
        labels: &[u32],
        tie: u64,
    ) -> Result<(Winners, Vec<Option<u32>>), RuntimeVoteError> {
        let correct = labels;
        while self.workers.len() < correct.len() {
            let agent = self.ids.agent_id();
            let reports = self.collector.clone().recipient();
            let addr = WorkerActor::start_in_arbiter(&self.arbiter, move |_| {
                WorkerActor::new(
                    agent,
                    WorkerConfig::default(),
                    AgentRegistry::new()
                        .with_fallback(|_: &Assignment| Box::new(VoterAgent) as Box<dyn Agent>),
                    ToolRegistry::default(),
                    reports,
                )
            });
            self.workers.push((agent, addr));
        }
        let task = self.ids.task_id();
        let voters: Vec<(AgentId, u64)> = self.workers[..correct.len()]
            .iter()
            .map(|(a, _)| *a)
            .zip(super::voting::sources(blocs))
            .collect();
        self.collector.do_send(Expect { task, voters, tie });
        for ((_, worker), label) in self.workers.iter().zip(labels) {
            let assignment = Assignment {
                node: self.node.clone(),
                role: "voter".into(),
                goal: None,
                inputs: Default::default(),
                capabilities: Capabilities::none(),
                budget: Budget::steps(1),
                evidence_text: vec![evidence_for(*label)],
                preconditions: vec![],
            };
            let envelope = Envelope::new(self.run, task, self.me, assignment, &mut self.ids);
            worker.do_send(AssignMsg(envelope));
        }
        let timeout = Duration::from_secs(10);
        loop {
            match self.done.recv_timeout(timeout) {
                Ok((t, result, reported)) if t == task => return Ok((result, reported)),
                Ok(_) => continue,
                Err(_) => return Err(RuntimeVoteError::Timeout(timeout)),
            }
        }
    }
}

impl Drop for RuntimeVoters {
    fn drop(&mut self) {
        self.system.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
