//! The supervisor-core test harness shared by the core test files: a core driven directly,
//! with hand-made worker replies and every effect collected. The plan helpers ([`node`],
//! [`spec_of`]) serve the peer-core tests as well.
#![allow(dead_code)]

use std::collections::HashMap;

use quorate_coordinator::drive::{drive, Answer, Flow, SupervisorEnv};
use quorate_coordinator::{
    CheckTicket, CommitOutcome, CommitTicket, Event, EventKind, InputRefused, Record, StopReason,
    SupervisorConfig, SupervisorCore,
};
use quorate_protocols::wire::{ActionCounts, Assignment, Control, Outcome, Report};
use quorate_protocols::{
    AgentId, Budget, Envelope, NodeSpec, Payload, Plan, PlanSpec, Precondition, ResultKind, Role,
    RunId, Sender, TaskState, Version,
};
use quorate_state::PreconditionFailure;

/// A verified answer, as a real worker sends it: the reply's call events show the attempt's
/// first call answered, and the reply cites it (a verified conclusion must cite what the runtime
/// recorded). Nothing changes for another kind or outcome.
pub(crate) fn rests_on_a_call(reply: &mut Envelope<Report>) {
    let answers = matches!(reply.payload.outcome, Outcome::Answer { .. });
    if !answers || reply.result_kind != Some(ResultKind::VerifiedConclusion) {
        return;
    }
    let action = quorate_protocols::ActionId::new(reply.task, 0, 0);
    reply
        .payload
        .calls
        .push(quorate_protocols::wire::CallEvent::CallAnswered {
            action,
            changed: false,
            cost: Budget::ZERO,
            error: None,
            model: None,
        });
    reply
        .evidence
        .push(quorate_protocols::EvidenceRef::Action { action });
}

pub(crate) struct Harness {
    pub core: SupervisorCore,
    /// The plan the core was built with (version 1) and its settings, for [`Harness::rebuilt`].
    pub nodes: Vec<NodeSpec>,
    pub config: SupervisorConfig,
    pub workers: Vec<Sender>,
    /// What the core's effects did (the harness's drive environment; its fields read as the
    /// harness's own, through `Deref`).
    pub seen: Seen,
    /// What the core refused of the replies [`Harness::send`] fed it, in order.
    pub refusals: Vec<InputRefused>,
}

/// The harness's view of the core's effects: every effect collected, result commits made in a
/// create-only map, precondition checks left for the test to answer.
#[derive(Default)]
pub(crate) struct Seen {
    pub dispatched: Vec<(usize, Envelope<Assignment>)>,
    pub controls: Vec<(usize, Envelope<Control>)>,
    pub events: Vec<EventKind>,
    pub commits: Vec<String>,
    pub stops: Vec<StopReason>,
    pub checks: Vec<u32>,
    /// The tickets of the checks asked for, in order (what an answer hands back).
    pub tickets: Vec<quorate_coordinator::CheckTicket>,
    pub log: Vec<quorate_coordinator::Event>,
    pub results: HashMap<String, serde_json::Value>,
    /// The version each result was committed at (one counter for the store, from 1).
    pub versions: HashMap<String, u64>,
    /// Result commits are carried out but not answered: their answers wait in `held` (for
    /// [`Harness::answer_commits`]).
    pub hold_commits: bool,
    pub held: Vec<(CommitTicket, CommitOutcome)>,
}

impl std::ops::Deref for Harness {
    type Target = Seen;
    fn deref(&self) -> &Seen {
        &self.seen
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Seen {
        &mut self.seen
    }
}

impl Harness {
    pub(crate) fn new(nodes: Vec<NodeSpec>, config: SupervisorConfig) -> Self {
        Self::with_setup(nodes, config, |_| {})
    }

    /// [`Harness::new`], with `setup` applied to the core before it starts.
    pub(crate) fn with_setup(
        nodes: Vec<NodeSpec>,
        config: SupervisorConfig,
        setup: impl FnOnce(&mut SupervisorCore),
    ) -> Self {
        let plan = spec_of(nodes.clone()).validate().expect("valid plan");
        let workers: Vec<Sender> = (0..2)
            .map(|i| Sender {
                agent: AgentId::from_u128(100 + i),
                role: Role::Worker,
            })
            .collect();
        let mut core = core_for(plan, &config, workers.clone());
        setup(&mut core);
        let mut h = Self {
            core,
            nodes,
            config,
            workers,
            seen: Seen::default(),
            refusals: Vec::new(),
        };
        h.core.start(0);
        h.drain();
        h
    }

    /// A supervisor rebuilt from this run's log and results (a crash: only they and the workers
    /// survive), given `fallback` if any; [`SupervisorCore::start_resumed`] continues it.
    pub(crate) fn rebuilt(
        &self,
        fallback: Option<PlanSpec>,
    ) -> Result<SupervisorCore, quorate_coordinator::ResumeError> {
        self.rebuilt_from(&self.log, fallback)
    }

    /// [`rebuilt`](Self::rebuilt) from `log` instead of this run's whole log (e.g. a log cut
    /// short by the crash).
    pub(crate) fn rebuilt_from(
        &self,
        log: &[Event],
        fallback: Option<PlanSpec>,
    ) -> Result<SupervisorCore, quorate_coordinator::ResumeError> {
        let plan = spec_of(self.nodes.clone()).validate().expect("valid plan");
        let mut core = core_for(plan, &self.config, self.workers.clone());
        if let Some(f) = fallback {
            core.set_fallback_plan(f);
        }
        core.replay(log, |k| self.results.get(k).cloned().map(Into::into))?;
        Ok(core)
    }

    /// A crash and resume at `now`: the core is [`rebuilt`](Self::rebuilt) (given `fallback`)
    /// and continues.
    pub(crate) fn crash_and_resume(&mut self, fallback: Option<PlanSpec>, now: u64) {
        self.core = self.rebuilt(fallback).expect("the log replays");
        self.core.start_resumed(now);
        self.drain();
    }

    /// Answers the held result commits at `now`, in order.
    pub(crate) fn answer_commits(&mut self, now: u64) {
        for (ticket, outcome) in std::mem::take(&mut self.held) {
            let answered = self.core.handle_result_commit(now, ticket, outcome);
            self.refusals.extend(answered.err());
        }
        self.drain();
    }

    /// Time passes to `now`.
    pub(crate) fn tick(&mut self, now: u64) {
        self.core.handle_tick(now);
        self.drain();
    }

    /// `node`'s worker acknowledges a cancel (or a rejection): the attempt spent `spent`.
    pub(crate) fn cancel_ack(&self, node: &str, spent: Budget) -> Envelope<Report> {
        let mut ack = self.reply(node, ResultKind::Suggestion, Outcome::Cancelled);
        ack.payload.spent = spent;
        ack
    }

    /// The logged events named `kind`, with the task each names.
    pub(crate) fn logged(&self, kind: &str) -> Vec<(Option<String>, EventKind)> {
        self.log
            .iter()
            .filter(|e| e.kind.name() == kind)
            .map(|e| (e.task.as_deref().map(str::to_string), e.kind.clone()))
            .collect()
    }

    /// Carries out the core's effects ([`drive`] over the harness's [`Seen`] view).
    pub(crate) fn drain(&mut self) {
        let refused = drive(&mut self.core, &mut self.seen).refused;
        self.refusals.extend(refused);
    }

    /// Commits `value` under `key` at the store's next version (a result committed before the
    /// run, or by a run before a crash).
    pub(crate) fn store_result(&mut self, key: &str, value: serde_json::Value) {
        let seen = &mut self.seen;
        store(&mut seen.results, &mut seen.versions, key, value);
    }

    /// The latest assignment of `node`.
    pub(crate) fn assignment(&self, node: &str) -> (usize, Envelope<Assignment>) {
        self.dispatched
            .iter()
            .rev()
            .find(|(_, e)| e.payload.node.as_str() == node)
            .cloned()
            .expect("dispatched")
    }

    /// `node`'s worker replies `outcome`, claiming `kind`; an answer claiming a verified
    /// conclusion rests on a call of the attempt ([`rests_on_a_call`]).
    pub(crate) fn reply(&self, node: &str, kind: ResultKind, outcome: Outcome) -> Envelope<Report> {
        let (w, a) = self.assignment(node);
        let mut reply = a.reply(
            self.workers[w],
            kind,
            Report {
                outcome,
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                calls: vec![],
            },
            &mut ids(),
        );
        rests_on_a_call(&mut reply);
        reply
    }

    pub(crate) fn answer(&self, node: &str, value: serde_json::Value) -> Envelope<Report> {
        self.reply(
            node,
            ResultKind::VerifiedConclusion,
            Outcome::Answer {
                value: value.into(),
                receipts: vec![],
            },
        )
    }

    pub(crate) fn send(&mut self, now: u64, r: Envelope<Report>) {
        let handled = self.core.handle_report(now, r);
        self.refusals.extend(handled.err());
        self.drain();
    }

    pub(crate) fn state(&self, i: u32) -> TaskState {
        self.core.task_state(i)
    }
}

/// Commits `value` under `key` at the store's next version (one counter for the store, from 1).
fn store(
    results: &mut HashMap<String, serde_json::Value>,
    versions: &mut HashMap<String, u64>,
    key: &str,
    value: serde_json::Value,
) {
    let version = versions.len() as u64 + 1;
    versions.insert(key.to_string(), version);
    results.insert(key.to_string(), value);
}

/// The harness's fields the drive writes to: what the core sent, asked and logged.
impl SupervisorEnv for Seen {
    /// At the time of the input that completed the task.
    fn now(&self) -> u64 {
        self.log.last().map_or(0, |e| e.at_ms)
    }

    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
        self.dispatched.push((worker, *envelope));
    }

    fn control(&mut self, worker: usize, envelope: Box<Envelope<Control>>) {
        self.controls.push((worker, *envelope));
    }

    /// Create-only, like the store: a taken key keeps its value. With `hold_commits` the
    /// answer waits in `held` ([`Answer::Later`]).
    fn commit_result(
        &mut self,
        ticket: CommitTicket,
        key: String,
        value: Payload,
    ) -> Answer<CommitOutcome> {
        let outcome = match self.results.get(&key) {
            Some(stored) => CommitOutcome::Kept {
                value: stored.clone().into(),
                version: Version::new(self.versions[&key]),
            },
            None => {
                store(
                    &mut self.results,
                    &mut self.versions,
                    &key,
                    value.into_value(),
                );
                CommitOutcome::Committed
            }
        };
        self.commits.push(key);
        if self.hold_commits {
            self.held.push((ticket, outcome));
            Answer::Later
        } else {
            Answer::Now(outcome)
        }
    }

    /// Never answered here: a test answers with the ticket (`tickets`).
    fn check_preconditions(
        &mut self,
        ticket: CheckTicket,
        _checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        self.checks.push(ticket.node());
        self.tickets.push(ticket);
        Answer::Later
    }

    fn record(&mut self, core: &SupervisorCore, record: Record) {
        let ev = core.event(record);
        self.log.push(ev.clone());
        self.events.push(ev.kind);
    }

    fn stop(&mut self, _core: &SupervisorCore, reason: StopReason) -> Flow {
        self.stops.push(reason);
        Flow::Continue
    }
}

/// Node `id` after `deps`, with a slice of 10 steps, 2 tool calls, 100 tokens and 10 cost.
pub(crate) fn node(id: &str, deps: &[&str]) -> NodeSpec {
    NodeSpec::named(id)
        .after(deps)
        .with_budget(Budget::new(10, 2, 100, 10))
}

/// The test plan over `nodes`: a run budget of 100 steps, 20 tool calls, 1000 tokens and 100
/// cost, with a reserve of 4 steps.
pub(crate) fn spec_of(nodes: Vec<NodeSpec>) -> PlanSpec {
    PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        nodes,
        ..PlanSpec::default()
    }
}

/// `load`, then `publish`, which needs `config/channel` in the store.
pub(crate) fn replanning_nodes() -> Vec<NodeSpec> {
    vec![
        node("load", &[]),
        needs_key("publish", &["load"], "config/channel"),
    ]
}

/// The precondition-replan run after `load` answered: `publish` needs a key that is not there,
/// so the run will switch to the fallback (returned), where `draft` replaces it.
pub(crate) fn replanning_run() -> (Harness, PlanSpec) {
    let mut h = Harness::new(replanning_nodes(), SupervisorConfig::default());
    let fallback = spec_of(vec![node("load", &[]), node("draft", &["load"])]);
    h.core.set_fallback_plan(fallback.clone());
    h.send(1, h.answer("load", serde_json::json!("rows")));
    (h, fallback)
}

/// In a [`replanning_run`], publish's store precondition fails: the run switches to its
/// fallback plan.
pub(crate) fn fail_publish(h: &mut Harness) {
    h.core
        .handle_preconditions(
            2,
            h.tickets[0],
            Err(PreconditionFailure::Missing {
                key: "config/channel".into(),
            }),
        )
        .expect("publish's check is awaited");
    h.drain();
}

/// Node `id` after `deps`, needing `key` in the result store (a store precondition).
pub(crate) fn needs_key(id: &str, deps: &[&str], key: &str) -> NodeSpec {
    let mut n = node(id, deps);
    n.preconditions = vec![quorate_protocols::Precondition::KeyExists { key: key.into() }];
    n
}

/// A fresh seeded id source per call (seeds 1, 2, ...): distinct ids without a clock or the
/// operating system's randomness.
pub(crate) fn ids() -> quorate_protocols::IdSource {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    quorate_protocols::IdSource::seeded(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// The supervisor's identity in these tests.
pub(crate) fn supervisor() -> Sender {
    Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    }
}

/// A supervisor core of run 7 over `plan` and `workers`, as these tests build them.
pub(crate) fn core_for(
    plan: Plan,
    config: &SupervisorConfig,
    workers: Vec<Sender>,
) -> SupervisorCore {
    SupervisorCore::new(
        RunId::from_u128(7),
        plan,
        config.clone(),
        supervisor(),
        workers,
        ids(),
    )
}

/// An action of a sub-task that node "a" delegated (its task id is not a's).
pub(crate) fn sub_task_action() -> quorate_protocols::ActionId {
    quorate_protocols::ActionId::new(quorate_protocols::TaskId::from_u128(99), 0, 0)
}
