//! Bad inputs not covered by `tests/bad_inputs.rs` and `tests/scenarios.rs`: each gets a typed
//! rejection and changes no state.
//!
//! * forged sender (on the wire and at the supervisor), unknown task ids, stale versions and
//!   old attempts at the supervisor core;
//! * delegation that tries to widen capabilities or budget (capabilities and ledger level);
//! * every decode cap at the cap (accepted) and one past it (refused);
//! * budgets near `u64::MAX`;
//! * self-loops, unknown dependencies and capability widening in plans.

use quorate_coordinator::drive::{drive, Answer, SupervisorEnv};
use quorate_coordinator::{
    CommitOutcome, CommitOutcome::Committed, CommitTicket, EventKind, InputRefused, Record,
    Rejection, SupervisorConfig, SupervisorCore,
};
use quorate_protocols::wire::{ActionCounts, Assignment, Outcome, Report};
use quorate_protocols::{
    decode_envelope, encode_envelope, AgentId, Budget, Capabilities, Component, DecodeError,
    Envelope, EvidenceRef, Limits, NodeSpec, PlanError, PlanSpec, ResultKind, Role, RunId, Sender,
    TaskId, TaskState, Version,
};
use quorate_state::{Account, AccountId, LedgerError};
use serde_json::json;

/// What [`Core::drain`] writes to.
struct Seen<'a> {
    dispatched: &'a mut Vec<Envelope<Assignment>>,
    events: &'a mut Vec<EventKind>,
}

impl SupervisorEnv for Seen<'_> {
    fn now(&self) -> u64 {
        5
    }
    fn dispatch(&mut self, _: usize, envelope: Box<Envelope<Assignment>>) {
        self.dispatched.push(*envelope);
    }
    fn commit_result(
        &mut self,
        _: CommitTicket,
        _: String,
        _: quorate_protocols::Payload,
    ) -> Answer<CommitOutcome> {
        Answer::Now(Committed)
    }
    fn record(&mut self, _: &SupervisorCore, record: Record) {
        self.events.push(record.kind);
    }
}

/// A fresh seeded id source per call (seeds 1, 2, ...): distinct ids, deterministically.
fn ids() -> quorate_protocols::IdSource {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    quorate_protocols::IdSource::seeded(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

fn worker(i: u128) -> Sender {
    Sender {
        agent: AgentId::from_u128(100 + i),
        role: Role::Worker,
    }
}

struct Core {
    core: SupervisorCore,
    dispatched: Vec<Envelope<Assignment>>,
    events: Vec<EventKind>,
}

impl Core {
    fn new() -> Self {
        let spec = PlanSpec {
            budget: Budget::new(100, 10, 100, 10),
            reserve: Budget::steps(2),
            nodes: vec![
                NodeSpec::named("a").with_budget(Budget::new(10, 2, 10, 1)),
                NodeSpec::named("b")
                    .after(&["a"])
                    .with_budget(Budget::new(10, 2, 10, 1)),
            ],
            ..PlanSpec::default()
        };
        let me = Sender {
            agent: AgentId::from_u128(1),
            role: Role::Supervisor,
        };
        let core = SupervisorCore::new(
            RunId::from_u128(9),
            spec.validate().unwrap(),
            SupervisorConfig::default(),
            me,
            vec![worker(0)],
            ids(),
        );
        let mut c = Self {
            core,
            dispatched: Vec::new(),
            events: Vec::new(),
        };
        c.core.start(0);
        c.drain();
        c
    }

    /// Carries out the core's effects: every result commit succeeds, answered at once.
    fn drain(&mut self) {
        let mut seen = Seen {
            dispatched: &mut self.dispatched,
            events: &mut self.events,
        };
        let drained = drive(&mut self.core, &mut seen);
        assert_eq!(drained.refused, vec![], "a commit the core asked for");
    }

    /// A verified answer resting on the attempt's one call: the call's answer is in the reply's
    /// events, and the reply cites it.
    fn answer(&self) -> Envelope<Report> {
        let action = quorate_protocols::ActionId::new(self.dispatched[0].task, 0, 0);
        let mut reply = self.dispatched[0].reply(
            worker(0),
            ResultKind::VerifiedConclusion,
            Report {
                outcome: Outcome::Answer {
                    value: json!("ok").into(),
                    receipts: vec![],
                },
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                calls: vec![quorate_protocols::wire::CallEvent::CallAnswered {
                    action,
                    changed: false,
                    cost: Budget::ZERO,
                    error: None,
                    model: None,
                }],
            },
            &mut ids(),
        );
        reply.evidence = vec![EvidenceRef::Action { action }];
        reply
    }

    /// Delivers `reply`, asserts it was rejected for `reason` and that nothing else changed.
    fn refused(&mut self, reply: Envelope<Report>, reason: Rejection) {
        let before = (self.core.task_state(0), self.core.task_state(1));
        let sent = self.dispatched.len();
        let seen = self.events.len();
        let refused = self.core.handle_report(5, reply);
        assert!(
            matches!(&refused, Err(InputRefused::Reply { why, .. }) if why.rejection() == reason),
            "{refused:?}"
        );
        self.drain();
        assert_eq!(
            self.events[seen..],
            [EventKind::rejected(reason)],
            "exactly one typed rejection"
        );
        assert_eq!((self.core.task_state(0), self.core.task_state(1)), before);
        assert_eq!(self.dispatched.len(), sent, "nothing dispatched");
        assert!(self.core.stop_reason().is_none());
    }
}

#[test]
fn forged_role_unknown_task_stale_version_and_old_attempt_are_refused() {
    let mut c = Core::new();
    let mut forged = c.answer();
    forged.sender.role = Role::Supervisor;
    c.refused(forged, Rejection::Unauthorized);
    let mut other_worker = c.answer();
    other_worker.sender = worker(7);
    c.refused(other_worker, Rejection::Unauthorized);
    let mut unknown = c.answer();
    unknown.task = TaskId::from_u128(424_242);
    c.refused(unknown, Rejection::Unauthorized);
    let mut other_run = c.answer();
    other_run.run = RunId::from_u128(10);
    c.refused(other_run, Rejection::Stale);
    let mut stale = c.answer();
    stale.state_version = Version::new(stale.state_version.raw() - 1);
    c.refused(stale, Rejection::Stale);
    let mut future = c.answer();
    future.state_version = Version::new(future.state_version.raw() + 1);
    c.refused(future, Rejection::Stale);
    let mut old = c.answer();
    old.attempt = 0;
    c.refused(old, Rejection::Late);
    // The genuine reply still completes the task afterwards.
    let ok = c.answer();
    c.core
        .handle_report(6, ok.clone())
        .expect("the genuine reply");
    c.drain();
    assert_eq!(c.core.task_state(0), TaskState::Completed);
    // And a copy of it is a duplicate, which changes nothing.
    c.refused(ok, Rejection::Duplicate);
}

#[test]
fn a_forged_sender_on_the_wire_is_refused() {
    let mut env = Envelope::new(
        RunId::from_u128(1),
        TaskId::from_u128(2),
        worker(0),
        1u32,
        &mut ids(),
    );
    env.sender.role = Role::Supervisor;
    let err =
        decode_envelope::<u32>(&encode_envelope(&env), &Limits::default(), worker(0)).unwrap_err();
    assert!(
        matches!(err, DecodeError::ForgedSender { claimed, actual }
            if claimed.role == Role::Supervisor && actual == worker(0)),
        "{err}"
    );
}

#[test]
fn delegation_cannot_widen_capabilities() {
    let parent = Capabilities::parse(["db.read", "web.fetch"]).unwrap();
    let asked = Capabilities::parse(["db.read", "db.delete", "shell.exec"]).unwrap();
    let child = parent.delegate(&asked);
    assert_eq!(child, Capabilities::parse(["db.read"]).unwrap());
    // A grandchild asking again for everything gets no more than the child.
    let grandchild =
        child.delegate(&Capabilities::parse(["db.read", "web.fetch", "db.delete"]).unwrap());
    assert!(grandchild.is_subset(&child) && grandchild.is_subset(&parent));
    assert_eq!(
        parent.missing(&asked),
        Capabilities::parse(["db.delete", "shell.exec"]).unwrap()
    );
}

/// Asserts that `err` refuses `requested` steps because only `available` are free.
#[track_caller]
fn assert_short_of_steps(err: &LedgerError, requested: u64, available: u64) {
    assert!(
        matches!(
            err,
            LedgerError::Insufficient {
                component: Component::Steps,
                requested: r,
                available: a,
                ..
            } if (*r, *a) == (requested, available)
        ),
        "{err} (expected {requested} steps requested, {available} available)"
    );
}

#[test]
fn delegation_cannot_widen_budget_along_a_chain() {
    let mut root = Account::open(None, Budget::new(10, 4, 100, 10), Budget::steps(2)).unwrap();
    let task = AccountId::Task(TaskId::from_u128(1));
    assert!(root
        .allocate(AccountId::Root, task, Budget::new(8, 4, 100, 10))
        .unwrap());
    let before = root.clone();
    // The reserve is never delegated: one more step does not fit.
    let err = root
        .allocate(
            AccountId::Root,
            AccountId::Task(TaskId::from_u128(2)),
            Budget::steps(1),
        )
        .unwrap_err();
    assert_short_of_steps(&err, 1, 0);
    // Re-granting the same child a bigger slice is refused.
    let err = root
        .allocate(AccountId::Root, task, Budget::new(9, 4, 100, 10))
        .unwrap_err();
    assert!(matches!(err, LedgerError::SliceMismatch { .. }), "{err}");
    assert_eq!(root, before, "refusals change nothing");
    // The child's own account cannot grant a grandchild more than it holds.
    let mut child = Account::open(
        Some(AccountId::Root),
        Budget::new(8, 4, 100, 10),
        Budget::ZERO,
    )
    .unwrap();
    let err = child
        .allocate(
            task,
            AccountId::Task(TaskId::from_u128(3)),
            Budget::new(9, 0, 0, 0),
        )
        .unwrap_err();
    assert_short_of_steps(&err, 9, 8);
    // A reserve larger than the limit is refused at open.
    let err = Account::open(None, Budget::steps(1), Budget::steps(2)).unwrap_err();
    assert!(
        matches!(err, LedgerError::ReserveExceedsLimit { .. }),
        "{err}"
    );
}

#[test]
fn budgets_near_u64_max_never_wrap() {
    let max = Budget::new(u64::MAX, u64::MAX, u64::MAX, u64::MAX);
    let mut root = Account::open(None, max, Budget::ZERO).unwrap();
    let a = AccountId::Task(TaskId::from_u128(1));
    let b = AccountId::Task(TaskId::from_u128(2));
    assert!(root
        .allocate(AccountId::Root, a, Budget::new(u64::MAX - 1, 0, 0, 0))
        .unwrap());
    let before = root.clone();
    let err = root
        .allocate(AccountId::Root, b, Budget::steps(2))
        .unwrap_err();
    assert!(
        matches!(
            err,
            LedgerError::Insufficient {
                requested: 2,
                available: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(root, before);
    assert!(root.allocate(AccountId::Root, b, Budget::steps(1)).unwrap());
    assert!(root.invariant_holds());
    // Reservations on a full-range account: the rest fits, one more does not.
    let mut own = Account::open(None, max, Budget::ZERO).unwrap();
    let me = AccountId::Task(TaskId::from_u128(5));
    own.reserve(me, Budget::new(0, 0, u64::MAX, 0)).unwrap();
    let err = own.reserve(me, Budget::new(0, 0, 1, 0)).unwrap_err();
    assert!(
        matches!(
            err,
            LedgerError::Insufficient {
                component: Component::Tokens,
                ..
            }
        ),
        "{err}"
    );
    // Plans whose node budgets sum past u64::MAX are refused with a typed error.
    let spec = PlanSpec {
        budget: max,
        nodes: vec![
            NodeSpec::named("a").with_budget(Budget::new(0, 0, u64::MAX, 0)),
            NodeSpec::named("b").with_budget(Budget::new(0, 0, 1, 0)),
        ],
        ..PlanSpec::default()
    };
    assert!(matches!(spec.validate(), Err(PlanError::BudgetOverflow(_))));
}

#[test]
fn self_loops_unknown_deps_and_widened_plans_are_refused() {
    let plan = |nodes| PlanSpec {
        nodes,
        ..PlanSpec::default()
    };
    let err = plan(vec![NodeSpec::named("a").after(&["a"])])
        .validate()
        .unwrap_err();
    assert!(
        matches!(&err, PlanError::SelfLoop { node } if node.as_str() == "a"),
        "{err}"
    );
    let err = plan(vec![NodeSpec::named("a").after(&["ghost"])])
        .validate()
        .unwrap_err();
    assert!(
        matches!(&err, PlanError::UnknownDep { dep, .. } if dep.as_str() == "ghost"),
        "{err}"
    );
    let err = plan(vec![
        NodeSpec::named("a"),
        NodeSpec::named("b").after(&["b", "a"]),
    ])
    .validate()
    .unwrap_err();
    assert!(matches!(err, PlanError::SelfLoop { .. }), "{err}");
    let mut wide = NodeSpec::named("a");
    wide.capabilities = Capabilities::parse(["shell.exec"]).unwrap();
    let err = plan(vec![wide]).validate().unwrap_err();
    assert!(matches!(err, PlanError::CapabilityWidened { .. }), "{err}");
}

fn decode(env: &Envelope<serde_json::Value>) -> Result<Envelope<serde_json::Value>, DecodeError> {
    decode_envelope(&encode_envelope(env), &Limits::default(), worker(0))
}

fn envelope(payload: serde_json::Value) -> Envelope<serde_json::Value> {
    Envelope::new(
        RunId::from_u128(1),
        TaskId::from_u128(2),
        worker(0),
        payload,
        &mut ids(),
    )
}

#[test]
fn every_decode_cap_accepts_at_the_cap_and_refuses_one_past() {
    let limits = Limits::default();
    // Bytes: pad with strings under the string cap until the envelope is exactly max_bytes.
    let chunk = "x".repeat(limits.max_string - 100);
    let base = envelope(json!([chunk, chunk, chunk, ""]));
    let overhead = encode_envelope(&base).len();
    let fill = limits.max_bytes - overhead;
    assert!(fill < limits.max_string);
    let at = envelope(json!([chunk, chunk, chunk, "y".repeat(fill)]));
    assert_eq!(encode_envelope(&at).len(), limits.max_bytes);
    assert!(decode(&at).is_ok());
    let past = envelope(json!([chunk, chunk, chunk, "y".repeat(fill + 1)]));
    assert!(matches!(decode(&past), Err(DecodeError::TooLarge { len, max }) if len == max + 1));
    // One string: exactly max_string bytes, then one more.
    assert!(decode(&envelope(json!("s".repeat(limits.max_string)))).is_ok());
    let err = decode(&envelope(json!("s".repeat(limits.max_string + 1)))).unwrap_err();
    assert!(
        matches!(err, DecodeError::StringTooLong { max, .. } if max == limits.max_string),
        "{err}"
    );
    // Evidence references.
    let mut env = envelope(json!(null));
    env.evidence = (0..limits.max_evidence)
        .map(|i| EvidenceRef::Record {
            key: format!("k{i}"),
            version: Version::new(1),
        })
        .collect();
    assert!(decode(&env).is_ok());
    env.evidence.push(EvidenceRef::Record {
        key: "one-more".into(),
        version: Version::new(1),
    });
    let err = decode(&env).unwrap_err();
    assert!(
        matches!(err, DecodeError::TooManyEvidenceRefs { count, max } if count == max + 1),
        "{err}"
    );
    // Depth: the deepest payload that passes, then one level more.
    let nest = |d: usize| (0..d).fold(json!(1), |v, _| json!([v]));
    let deepest = (0..limits.max_depth + 2)
        .take_while(|&d| decode(&envelope(nest(d))).is_ok())
        .last()
        .unwrap();
    let err = decode(&envelope(nest(deepest + 1))).unwrap_err();
    assert!(
        matches!(err, DecodeError::TooDeep { max, .. } if max == limits.max_depth),
        "{err}"
    );
    // The envelope itself is one level, so the payload may nest max_depth - 1 levels.
    assert_eq!(deepest, limits.max_depth - 1);
}
