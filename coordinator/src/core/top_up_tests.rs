//! The top-up decisions of the supervisor core: parking, the request, checking a grant against
//! what is left, applying it, rejecting it, and replaying both from the log.

use quorate_protocols::wire::{Assignment, Outcome, Report};
use quorate_protocols::{
    Budget, Component, NodeSpec, OnExhausted, PlanSpec, ResultKind, TaskState,
};

use super::{TopUp, TopUpError, TopUpPolicy, TopUpRequest};
use crate::core::test_core::{one_worker_core, WORKER};
use crate::core::{SupervisorConfig, SupervisorCore};
use crate::event::{Event, EventKind};
use crate::StopReason;

/// Budget 20 steps (reserve 2): `ask` (3 steps, asks when it runs out) and `after` (2 steps)
/// behind it.
fn core(on_exhausted: OnExhausted, top_ups: TopUpPolicy) -> SupervisorCore {
    core_with(
        vec![
            NodeSpec::named("ask")
                .with_budget(Budget::new(3, 2, 0, 0))
                .with_on_exhausted(on_exhausted),
            NodeSpec::named("after")
                .after(&["ask"])
                .with_budget(Budget::steps(2)),
        ],
        top_ups,
    )
}

/// A core over `nodes` with a budget of 20 steps (reserve 2), one worker and `top_ups`.
fn core_with(nodes: Vec<NodeSpec>, top_ups: TopUpPolicy) -> SupervisorCore {
    let spec = PlanSpec {
        budget: Budget::new(20, 4, 100, 0),
        reserve: Budget::steps(2),
        nodes,
        ..PlanSpec::default()
    };
    let config = SupervisorConfig {
        workers: 1,
        top_ups,
        ..SupervisorConfig::default()
    };
    one_worker_core(spec, config, 9)
}

/// Drains the effects: the assignments sent, and the events logged (appended to `log`); no
/// result commit is answered.
fn drain(
    core: &mut SupervisorCore,
    log: &mut Vec<Event>,
) -> Vec<quorate_protocols::Envelope<Assignment>> {
    let mut seen = Seen {
        sent: Vec::new(),
        log,
    };
    let drained = crate::drive::drive(core, &mut seen);
    assert_eq!(drained.refused, vec![], "nothing answered, nothing refused");
    seen.sent
}

/// The environment of [`drain`].
struct Seen<'a> {
    sent: Vec<quorate_protocols::Envelope<Assignment>>,
    log: &'a mut Vec<Event>,
}

impl crate::drive::SupervisorEnv for Seen<'_> {
    fn now(&self) -> u64 {
        unreachable!("nothing is answered at once")
    }
    fn dispatch(&mut self, _: usize, envelope: Box<quorate_protocols::Envelope<Assignment>>) {
        self.sent.push(*envelope);
    }
    fn commit_result(
        &mut self,
        _: crate::CommitTicket,
        _: String,
        _: quorate_protocols::Payload,
    ) -> crate::drive::Answer<crate::CommitOutcome> {
        crate::drive::Answer::Later
    }
    fn record(&mut self, core: &SupervisorCore, record: crate::Record) {
        self.log.push(core.event(record));
    }
}

/// The worker's final reply to `assignment`: out of steps, having spent `spent`.
fn ran_out(
    core: &mut SupervisorCore,
    assignment: &quorate_protocols::Envelope<Assignment>,
    spent: Budget,
) {
    let report = Report {
        outcome: Outcome::LimitReached {
            component: Component::Steps,
            needed: 1,
        },
        spent,
        actions: Default::default(),
        calls: vec![],
    };
    // Each reply from its own source: a reply's dedupe key is new.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100);
    let seed = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut ids = quorate_protocols::IdSource::seeded(seed);
    core.handle_report(
        5,
        assignment.reply(WORKER, ResultKind::Suggestion, report, &mut ids),
    )
    .expect("the reply that runs out is accepted");
}

/// A core, the events it logged and the assignments it sent.
type Driven = (
    SupervisorCore,
    Vec<Event>,
    Vec<quorate_protocols::Envelope<Assignment>>,
);

/// Started, `ask` dispatched and run out of steps; the log so far.
fn asking(top_ups: TopUpPolicy) -> Driven {
    let mut core = core(OnExhausted::Ask, top_ups);
    let mut log = Vec::new();
    core.start(0);
    let sent = drain(&mut core, &mut log);
    assert_eq!(sent.len(), 1);
    ran_out(&mut core, &sent[0], Budget::new(3, 1, 0, 0));
    let more = drain(&mut core, &mut log);
    (core, log, more)
}

fn grant(task: &str, b: Budget) -> TopUpPolicy {
    TopUpPolicy([(task.to_string(), TopUp::Grant(b))].into_iter().collect())
}

#[test]
fn a_task_that_asks_parks_with_its_request_and_the_run_stops_waiting() {
    let (core, log, sent) = asking(TopUpPolicy::default());
    assert!(sent.is_empty(), "nothing runs");
    assert_eq!(core.task_state(0), TaskState::WaitingApproval);
    // 20 - 2 (reserve) - 3 (its slice, still held) = 15 steps; 4 - 2 calls; 100 tokens.
    let request = TopUpRequest {
        component: Component::Steps,
        needed: 1,
        spent: Budget::new(3, 1, 0, 0),
        granted: Budget::new(3, 2, 0, 0),
        left: Budget::new(15, 2, 100, 0),
    };
    assert_eq!(
        core.top_up_requests(),
        [("ask".to_string(), request.clone())]
    );
    assert!(log.iter().any(|e| e.kind
        == EventKind::TopUpRequested {
            request: Box::new(request.clone())
        }));
    assert_eq!(
        core.stop_reason(),
        Some(&StopReason::WaitingApproval { node: "ask".into() })
    );
    let row = &core.snapshot().tasks[0];
    assert_eq!(row.top_up.as_deref(), Some(&request));
}

#[test]
fn without_ask_the_task_stops_the_run_as_before() {
    let mut core = core(OnExhausted::Stop, TopUpPolicy::default());
    let mut log = Vec::new();
    core.start(0);
    let sent = drain(&mut core, &mut log);
    ran_out(&mut core, &sent[0], Budget::new(3, 1, 0, 0));
    drain(&mut core, &mut log);
    assert_eq!(core.task_state(0), TaskState::StoppedLimit);
    assert_eq!(
        core.stop_reason(),
        Some(&StopReason::StoppedLimit {
            component: Component::Steps
        })
    );
    assert!(core.top_up_requests().is_empty());
}

#[test]
fn a_grant_larger_than_what_is_left_is_refused_and_changes_nothing() {
    let (core, ..) = asking(TopUpPolicy::default());
    let too_much = Budget::new(16, 0, 0, 0);
    let exceeds = TopUpError::Exceeds {
        task: "ask".into(),
        component: Component::Steps,
        asked: 16,
        left: 15,
    };
    assert_eq!(
        core.check_top_ups(&grant("ask", too_much)),
        Err(exceeds.clone())
    );
    assert_eq!(
        core.check_top_ups(&grant("ask", Budget::steps(15))),
        Ok(vec![])
    );
    // Live (the run still going: `after`'s slice is held too, 13 left), a person's answer is
    // checked before anything happens.
    let mut core2 = self::asking_live();
    let before = core2.snapshot();
    let exceeds = TopUpError::Exceeds {
        task: "ask".into(),
        component: Component::Steps,
        asked: 14,
        left: 13,
    };
    assert_eq!(
        core2.handle_top_up(6, 0, TopUp::Grant(Budget::steps(14))),
        Err(exceeds)
    );
    assert_eq!(core2.pending_effects(), 0, "nothing logged, nothing sent");
    assert_eq!(core2.snapshot(), before);
    // A task that is not waiting cannot be answered.
    assert_eq!(
        core2.handle_top_up(6, 1, TopUp::Reject),
        Err(TopUpError::NotWaiting {
            task: "after".into()
        })
    );
    // Grants of 10 to `ask` and to `after` (not waiting): only the first counts against the
    // 15 left; the second is named as ignored.
    let policy = TopUpPolicy(
        [
            ("ask".to_string(), TopUp::Grant(Budget::steps(10))),
            ("after".to_string(), TopUp::Grant(Budget::steps(10))),
        ]
        .into_iter()
        .collect(),
    );
    assert_eq!(core.check_top_ups(&policy), Ok(vec!["after".to_string()]));
}

/// A core whose `ask` is waiting for a top-up but whose run has not stopped yet (`after` has
/// a second task running beside it), so live answers reach it.
fn asking_live() -> SupervisorCore {
    let mut core = core_with(
        vec![
            NodeSpec::named("ask")
                .with_budget(Budget::new(3, 2, 0, 0))
                .with_on_exhausted(OnExhausted::Ask),
            NodeSpec::named("after").with_budget(Budget::steps(2)),
        ],
        TopUpPolicy::default(),
    );
    let mut log = Vec::new();
    core.start(0);
    let sent = drain(&mut core, &mut log);
    assert_eq!(sent.len(), 2);
    ran_out(&mut core, &sent[0], Budget::new(3, 1, 0, 0));
    drain(&mut core, &mut log);
    assert_eq!(core.stop_reason(), None, "`after` still runs");
    core
}

#[test]
fn a_grant_grows_the_slice_out_of_what_is_left_and_the_task_runs_again() {
    let mut core = asking_live();
    core.handle_top_up(6, 0, TopUp::Grant(Budget::new(5, 0, 50, 0)))
        .unwrap();
    let mut log = Vec::new();
    let sent = drain(&mut core, &mut log);
    assert!(log.iter().any(|e| e.kind
        == EventKind::TopUpDecided {
            answer: TopUp::Grant(Budget::new(5, 0, 50, 0))
        }));
    assert_eq!(sent.len(), 1, "a new attempt");
    assert_eq!(sent[0].attempt, 2);
    assert_eq!(sent[0].payload.budget, Budget::new(8, 2, 50, 0));
    assert_eq!(core.task_state(0), TaskState::Running);
    assert!(core.top_up_requests().is_empty());
    // The reserve and the slices (3 + 5 and 2) within the budget; 20 - 2 - 8 - 2 = 8 left.
    assert!(core.root.invariant_holds());
    assert_eq!(core.left_to_grant().steps, 8);
    assert_eq!(core.snapshot().budget.granted, Budget::new(10, 2, 50, 0));
    // Answered once: a second answer finds nothing waiting.
    assert!(matches!(
        core.handle_top_up(7, 0, TopUp::Reject),
        Err(TopUpError::NotWaiting { .. })
    ));
}

#[test]
fn a_rejection_stops_the_task_at_its_limit_charged_what_it_spent() {
    let mut core = asking_live();
    core.handle_top_up(6, 0, TopUp::Reject).unwrap();
    let mut log = Vec::new();
    drain(&mut core, &mut log);
    assert!(log.iter().any(|e| e.kind
        == EventKind::TopUpDecided {
            answer: TopUp::Reject
        }));
    assert_eq!(core.task_state(0), TaskState::StoppedLimit);
    let row = &core.snapshot().tasks[0];
    assert_eq!(row.spent, Budget::new(3, 1, 0, 0));
    assert!(row.top_up.is_none());
    // `after` is cancelled; the run stops at the limit once its worker acknowledges (or the
    // drain ends).
    core.handle_tick(u64::MAX / 2);
    assert_eq!(
        core.stop_reason(),
        Some(&StopReason::StoppedLimit {
            component: Component::Steps
        })
    );
}

#[test]
fn a_logged_grant_the_budget_cannot_hold_does_not_replay() {
    let (_, mut log, _) = asking(TopUpPolicy::default());
    log.pop(); // run-stopped: the run continues.
    let (_, more, _) = resumed(&log, grant("ask", Budget::steps(4)));
    let mut decided = more
        .into_iter()
        .find(|e| matches!(e.kind, EventKind::TopUpDecided { .. }))
        .expect("the decision is logged");
    // A log that says more was granted than the run ever had.
    decided.kind = EventKind::TopUpDecided {
        answer: TopUp::Grant(Budget::steps(1_000)),
    };
    let seq = decided.seq;
    log.push(decided);
    let mut core = core(OnExhausted::Ask, TopUpPolicy::default());
    assert!(matches!(
        core.replay(&log, |_| None),
        Err(crate::ResumeError::Ledger { seq: s, .. }) if s == seq
    ));
}

/// A resumed core over `log`, with `top_ups` as this incarnation's answers; started.
fn resumed(log: &[Event], top_ups: TopUpPolicy) -> Driven {
    let mut core = core(OnExhausted::Ask, top_ups);
    core.replay(log, |_| None).expect("the log replays");
    let mut out = Vec::new();
    core.start(10);
    let sent = drain(&mut core, &mut out);
    (core, out, sent)
}

#[test]
fn a_resume_answers_the_request_from_the_log_and_never_grants_twice() {
    let (_, log, _) = asking(TopUpPolicy::default());
    // The log up to the stop: the run continues.
    let mut log = log;
    assert!(matches!(
        log.pop().map(|e| e.kind),
        Some(EventKind::RunStopped { .. })
    ));

    // No answer: the task stays waiting, nothing is dispatched, the run stops waiting again.
    let (core, _, sent) = resumed(&log, TopUpPolicy::default());
    assert!(sent.is_empty());
    assert_eq!(core.top_up_requests().len(), 1);
    assert!(matches!(
        core.stop_reason(),
        Some(StopReason::WaitingApproval { .. })
    ));

    // A grant: logged, and the task runs again with the larger slice.
    let (_, more, sent) = resumed(&log, grant("ask", Budget::steps(4)));
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].payload.budget, Budget::new(7, 2, 0, 0));
    let decided = more
        .iter()
        .position(|e| matches!(e.kind, EventKind::TopUpDecided { .. }))
        .expect("the decision is logged");

    // Cut right after the decision (a crash before the task was dispatched again): the replay
    // applies the grant once, and the same answer given again finds nothing waiting.
    let mut cut = log.clone();
    cut.extend(more[..=decided].iter().cloned());
    let (core, _, sent) = resumed(&cut, grant("ask", Budget::steps(4)));
    assert_eq!(sent.len(), 1, "dispatched again");
    assert_eq!(
        sent[0].payload.budget,
        Budget::new(7, 2, 0, 0),
        "granted once"
    );
    assert_eq!(core.snapshot().budget.granted, Budget::new(7, 2, 0, 0));
    assert!(core.root.invariant_holds());

    // A rejection given at the resume stops the task at its limit.
    let (core, _, sent) = resumed(
        &log,
        TopUpPolicy([("ask".to_string(), TopUp::Reject)].into_iter().collect()),
    );
    assert!(sent.is_empty());
    assert_eq!(core.task_state(0), TaskState::StoppedLimit);
    assert_eq!(core.snapshot().tasks[0].spent, Budget::new(3, 1, 0, 0));
}
