//! The drive loop's answer paths: an answer given at once is fed back within the drive, one
//! given later waits for the driver; an environment's halt leaves the rest queued; refusals come
//! back typed.

use quorate_protocols::wire::{ActionCounts, Assignment, CallEvent, Outcome, Report};
use quorate_protocols::{
    ActionId, Budget, Envelope, EvidenceRef, IdSource, NodeSpec, Payload, PlanSpec, Precondition,
    ResultKind, TaskState,
};
use quorate_state::PreconditionFailure;

use super::{drive, Answer, Flow, SupervisorEnv};
use crate::core::test_core::{one_worker_core, WORKER};
use crate::event::Record;
use crate::{CheckTicket, CommitOutcome, CommitTicket, InputRefused, StopReason};
use crate::{SupervisorConfig, SupervisorCore};

/// How the test environment answers the store calls.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Now,
    Later,
}

struct Env {
    mode: Mode,
    /// Halt before the effect with this index (counted over the env's life).
    halt_at: Option<usize>,
    polled: usize,
    sent: Vec<Envelope<Assignment>>,
    commits: Vec<CommitTicket>,
    checks: Vec<CheckTicket>,
    kinds: Vec<&'static str>,
    stops: Vec<StopReason>,
}

impl Env {
    fn new(mode: Mode) -> Self {
        Self {
            mode,
            halt_at: None,
            polled: 0,
            sent: Vec::new(),
            commits: Vec::new(),
            checks: Vec::new(),
            kinds: Vec::new(),
            stops: Vec::new(),
        }
    }
}

impl SupervisorEnv for Env {
    fn now(&self) -> u64 {
        3
    }
    fn proceed(&mut self, _core: &SupervisorCore) -> Flow {
        if self.halt_at == Some(self.polled) {
            return Flow::Halt;
        }
        self.polled += 1;
        Flow::Continue
    }
    fn dispatch(&mut self, _worker: usize, envelope: Box<Envelope<Assignment>>) {
        self.sent.push(*envelope);
    }
    fn commit_result(
        &mut self,
        ticket: CommitTicket,
        _: String,
        _: Payload,
    ) -> Answer<CommitOutcome> {
        self.commits.push(ticket);
        match self.mode {
            Mode::Now => Answer::Now(CommitOutcome::Committed),
            Mode::Later => Answer::Later,
        }
    }
    fn check_preconditions(
        &mut self,
        ticket: CheckTicket,
        _checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        self.checks.push(ticket);
        match self.mode {
            Mode::Now => Answer::Now(Ok(())),
            Mode::Later => Answer::Later,
        }
    }
    fn record(&mut self, _core: &SupervisorCore, record: Record) {
        self.kinds.push(record.kind.name());
    }
    fn stop(&mut self, _core: &SupervisorCore, reason: StopReason) -> Flow {
        self.stops.push(reason);
        Flow::Continue
    }
}

/// `a`, then `b` after it; `b` needs `key` in the store if `guarded`.
fn core(guarded: bool) -> SupervisorCore {
    let mut b = NodeSpec::named("b")
        .after(&["a"])
        .with_budget(Budget::new(10, 2, 100, 10));
    if guarded {
        b.preconditions = vec![Precondition::KeyExists { key: "key".into() }];
    }
    let spec = PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        nodes: vec![
            NodeSpec::named("a").with_budget(Budget::new(10, 2, 100, 10)),
            b,
        ],
        ..PlanSpec::default()
    };
    let mut core = one_worker_core(spec, SupervisorConfig::default(), 4);
    core.start(0);
    core
}

/// A verified answer to `assignment`, resting on the attempt's one call.
fn answer(assignment: &Envelope<Assignment>) -> Envelope<quorate_protocols::wire::Report> {
    let action = ActionId::new(assignment.task, 0, 0);
    let report = Report {
        outcome: Outcome::Answer {
            value: serde_json::json!("ok").into(),
            receipts: vec![],
        },
        spent: Budget::steps(1),
        actions: ActionCounts::default(),
        calls: vec![CallEvent::CallAnswered {
            action,
            changed: false,
            cost: Budget::ZERO,
            error: None,
            model: None,
        }],
    };
    let mut reply = assignment.reply(
        WORKER,
        ResultKind::VerifiedConclusion,
        report,
        &mut IdSource::seeded(5),
    );
    reply.evidence.push(EvidenceRef::Action { action });
    reply
}

/// Drives `core` through a's accepted answer, returning the env.
fn answered_a(core: &mut SupervisorCore, mode: Mode) -> Env {
    let mut env = Env::new(mode);
    let first = drive(core, &mut env);
    assert_eq!(first.flow, Flow::Continue);
    assert_eq!(env.sent.len(), 1, "a dispatched");
    let reply = answer(&env.sent[0]);
    core.handle_report(2, reply).expect("a's answer accepted");
    let drained = drive(core, &mut env);
    assert_eq!(drained.refused, vec![]);
    assert_eq!(env.commits.len(), 1, "a's result commit asked for");
    env
}

#[test]
fn a_commit_answered_now_completes_the_task_within_the_drive() {
    let mut core = core(false);
    let env = answered_a(&mut core, Mode::Now);
    assert_eq!(core.task_state(0), TaskState::Completed);
    assert!(env.kinds.contains(&"result-committed"));
    assert_eq!(env.sent.len(), 2, "b released in the same drive");
    assert_eq!(core.pending_effects(), 0);
}

#[test]
fn a_commit_answered_later_waits_for_the_driver() {
    let mut core = core(false);
    let mut env = answered_a(&mut core, Mode::Later);
    assert_ne!(core.task_state(0), TaskState::Completed);
    assert!(!env.kinds.contains(&"result-committed"));
    assert_eq!(env.sent.len(), 1, "b waits for a's commit");
    core.handle_result_commit(4, env.commits[0], CommitOutcome::Committed)
        .expect("the commit is awaited");
    let drained = drive(&mut core, &mut env);
    assert_eq!(drained.refused, vec![]);
    assert_eq!(core.task_state(0), TaskState::Completed);
    assert_eq!(env.sent.len(), 2, "b released by the late answer's drive");
}

#[test]
fn a_precondition_check_answered_now_or_later() {
    let mut now = core(true);
    let env = answered_a(&mut now, Mode::Now);
    assert_eq!(env.checks.len(), 1, "b's check asked for");
    assert_eq!(env.sent.len(), 2, "b dispatched in the same drive");

    let mut later = core(true);
    let mut env = answered_a(&mut later, Mode::Later);
    later
        .handle_result_commit(4, env.commits[0], CommitOutcome::Committed)
        .expect("awaited");
    let _ = drive(&mut later, &mut env);
    assert_eq!(env.checks.len(), 1, "b's check asked for");
    assert_eq!(env.sent.len(), 1, "b waits for its check");
    later
        .handle_preconditions(5, env.checks[0], Ok(()))
        .expect("the check is awaited");
    let drained = drive(&mut later, &mut env);
    assert_eq!(drained.refused, vec![]);
    assert_eq!(env.sent.len(), 2, "b dispatched by the late answer's drive");
}

#[test]
fn a_halt_leaves_the_rest_queued_and_a_later_drive_carries_it_out() {
    let mut core = core(false);
    let queued = core.pending_effects();
    assert!(queued >= 2, "a start queues a dispatch and its records");
    let mut env = Env::new(Mode::Now);
    env.halt_at = Some(1);
    let drained = drive(&mut core, &mut env);
    assert_eq!(drained.flow, Flow::Halt);
    assert_eq!(core.pending_effects(), queued - 1);
    env.halt_at = None;
    assert_eq!(drive(&mut core, &mut env).flow, Flow::Continue);
    assert_eq!(core.pending_effects(), 0);
    assert_eq!(env.sent.len(), 1);
}

#[test]
fn an_answer_the_core_refuses_comes_back_typed() {
    let mut core = core(true);
    let mut env = answered_a(&mut core, Mode::Later);
    core.handle_result_commit(4, env.commits[0], CommitOutcome::Committed)
        .expect("the commit is awaited");
    // b's check is queued; the run is cancelled before the drive carries it out, so the answer
    // given at once comes too late.
    core.handle_cancel(4)
        .expect("a running run can be cancelled");
    env.mode = Mode::Now;
    let drained = drive(&mut core, &mut env);
    assert_eq!(env.checks.len(), 1, "b's check carried out");
    assert_eq!(
        drained.refused,
        vec![InputRefused::AfterTerminal {
            node: 1,
            state: TaskState::Cancelled
        }]
    );
    assert_eq!(env.stops.len(), 1);
}
