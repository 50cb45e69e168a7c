//! Commit, then advance: an accepted result is committed first; the task is logged completed
//! and its dependents released only once the commit is answered (`Committed` or `Kept` with
//! the stored value), and nothing emitted before the answer is changed afterwards.

mod support;

use quorate_coordinator::drive::{drive, Answer, Flow, SupervisorEnv};
use quorate_coordinator::{
    CheckTicket, CommitOutcome, CommitTicket, EventKind, InputRefused, Record, StopReason,
    SupervisorConfig, SupervisorCore, SupervisorEffect,
};
use quorate_protocols::wire::{Assignment, Control};
use quorate_protocols::{Envelope, Payload, Precondition, TaskState, Version};
use quorate_state::PreconditionFailure;
use serde_json::{json, Value};

use support::{node, Harness};

/// One effect, as these tests compare them.
#[derive(Debug, PartialEq)]
enum Seen {
    /// A record of this kind, naming this task.
    Record(Option<String>, String),
    /// A kept result record: same as the core's, and the value it logs.
    Kept(bool, Value),
    /// A committed result record, with the value it logs.
    Committed(Value),
    /// A result commit of this key and value.
    Commit(String, Value),
    /// An assignment of this node, with its inputs (node, value).
    Dispatch(String, Vec<(String, Value)>),
    Control,
    Stop(StopReason),
}

/// Drives `core` with every result commit left unanswered (its ticket pushed on `tickets`),
/// returning the effects as seen.
fn poll(core: &mut SupervisorCore, tickets: &mut Vec<CommitTicket>) -> Vec<Seen> {
    let mut polled = Polled {
        effects: Vec::new(),
        tickets,
    };
    let drained = drive(core, &mut polled);
    assert_eq!(drained.refused, vec![], "nothing answered, nothing refused");
    polled.effects
}

/// The environment of [`poll`].
struct Polled<'a> {
    effects: Vec<Seen>,
    tickets: &'a mut Vec<CommitTicket>,
}

impl SupervisorEnv for Polled<'_> {
    fn now(&self) -> u64 {
        unreachable!("nothing is answered at once")
    }

    fn dispatch(&mut self, _worker: usize, envelope: Box<Envelope<Assignment>>) {
        self.effects.push(Seen::Dispatch(
            envelope.payload.node.to_string(),
            envelope
                .payload
                .inputs
                .iter()
                .map(|i| (i.node.to_string(), i.value.value().clone()))
                .collect(),
        ));
    }

    fn control(&mut self, _worker: usize, _envelope: Box<Envelope<Control>>) {
        self.effects.push(Seen::Control);
    }

    fn commit_result(
        &mut self,
        ticket: CommitTicket,
        key: String,
        value: Payload,
    ) -> Answer<CommitOutcome> {
        self.tickets.push(ticket);
        self.effects.push(Seen::Commit(key, value.into_value()));
        Answer::Later
    }

    fn check_preconditions(
        &mut self,
        _ticket: CheckTicket,
        _checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        unreachable!("no preconditions")
    }

    fn record(&mut self, core: &SupervisorCore, r: Record) {
        let event = core.event(r);
        self.effects.push(match event.kind {
            EventKind::ResultKept { same, result, .. } => Seen::Kept(same, result.into_value()),
            EventKind::ResultCommitted { result } => Seen::Committed(result.into_value()),
            kind => Seen::Record(event.task.as_deref().map(str::to_string), {
                match kind {
                    EventKind::Transition { to, .. } => format!("to {to}"),
                    other => other.name().to_string(),
                }
            }),
        });
    }

    fn stop(&mut self, _core: &SupervisorCore, reason: StopReason) -> Flow {
        self.effects.push(Seen::Stop(reason));
        Flow::Continue
    }
}

fn record(task: &str, kind: &str) -> Seen {
    Seen::Record(Some(task.to_string()), kind.to_string())
}

/// a, then b and c after it; a's reply accepted at 1, its effects polled (and its commit's
/// ticket).
fn a_answered(value: Value) -> (Harness, Vec<Seen>, CommitTicket) {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"]), node("c", &["a"])],
        SupervisorConfig::default(),
    );
    let reply = h.answer("a", value);
    h.core.handle_report(1, reply).expect("accepted");
    let mut tickets = Vec::new();
    let before = poll(&mut h.core, &mut tickets);
    assert_eq!(tickets.len(), 1);
    (h, before, tickets[0])
}

/// The commit finds a's key taken by another value: the effects out before the answer stop
/// at the commit (no completion, no dependent released); after it, the log records the kept
/// value, a completes, and b and c get the stored value, not a's answer.
#[test]
fn a_kept_commit_gives_the_dependents_the_stored_value_and_rewrites_nothing() {
    let (mut h, before, ticket) = a_answered(json!("mine"));
    let key = h.core.result_key(0);
    assert_eq!(
        before,
        vec![
            // The harness's answer reports the call its conclusion cites (see
            // `support::Harness::answer`), logged before the reply.
            record("a", "call-answered"),
            record("a", "reply-accepted"),
            Seen::Commit(key.clone(), json!("mine")),
        ],
        "the core stops at the commit"
    );
    assert_eq!(h.core.task_state(0), TaskState::Running);
    let kept = CommitOutcome::Kept {
        value: json!("stored").into(),
        version: Version::new(3),
    };
    h.core
        .handle_result_commit(2, ticket, kept)
        .expect("awaited");
    let after = poll(&mut h.core, &mut Vec::new());
    let inputs = vec![("a".to_string(), json!("stored"))];
    assert_eq!(
        after[..3],
        [
            Seen::Kept(false, json!("stored")),
            record("a", "to completed"),
            record("a", "task-closed"),
        ]
    );
    let dispatched: Vec<&Seen> = after
        .iter()
        .filter(|s| matches!(s, Seen::Dispatch(..)))
        .collect();
    assert_eq!(
        dispatched,
        [
            &Seen::Dispatch("b".into(), inputs.clone()),
            &Seen::Dispatch("c".into(), inputs)
        ]
    );
    assert!(!after.iter().any(|s| matches!(s, Seen::Commit(..))));
    assert_eq!(h.core.task_state(0), TaskState::Completed);
    assert_eq!(h.core.task_result(0), Some(&json!("stored")));
}

/// A commit that wrote the result: logged `result-committed` with the answer, then a
/// completes and its dependents get the answer.
#[test]
fn a_committed_result_completes_the_task_then_releases_its_dependents() {
    let (mut h, _, ticket) = a_answered(json!("mine"));
    let answered = h
        .core
        .handle_result_commit(2, ticket, CommitOutcome::Committed);
    assert_eq!(answered, Ok(()));
    let after = poll(&mut h.core, &mut Vec::new());
    assert_eq!(
        after[..3],
        [
            Seen::Committed(json!("mine")),
            record("a", "to completed"),
            record("a", "task-closed"),
        ]
    );
    let inputs = vec![("a".to_string(), json!("mine"))];
    assert!(after.contains(&Seen::Dispatch("b".into(), inputs)));
    // A second answer finds nothing awaited.
    let again = h
        .core
        .handle_result_commit(3, ticket, CommitOutcome::Committed);
    assert_eq!(
        again,
        Err(InputRefused::NotCommitting {
            task: h.core.task_id(0)
        })
    );
}

/// A cancel while a's commit is out: a is decided, so its worker is not told to stop and a
/// is not cancelled; the run waits for the answer, then a completes, b and c (never started)
/// are cancelled, and the run stops as cancelled.
#[test]
fn a_cancel_waits_for_a_commit_that_is_out() {
    let (mut h, _, ticket) = a_answered(json!(1));
    h.core.handle_cancel(2).expect("b and c are still to run");
    let during = poll(&mut h.core, &mut Vec::new());
    assert!(!during.contains(&Seen::Control), "{during:?}");
    assert!(!during.iter().any(|s| matches!(s, Seen::Stop(_))));
    assert_eq!(h.core.task_state(0), TaskState::Running);
    assert_eq!(h.core.task_state(1), TaskState::Cancelled);
    h.core
        .handle_result_commit(3, ticket, CommitOutcome::Committed)
        .expect("awaited");
    let after = poll(&mut h.core, &mut Vec::new());
    assert_eq!(h.core.task_state(0), TaskState::Completed);
    assert!(!after.iter().any(|s| matches!(s, Seen::Dispatch(..))));
    assert_eq!(after.last(), Some(&Seen::Stop(StopReason::Cancelled)));
}

/// Only a's commit is out: a cancel finds nothing left to run.
#[test]
fn a_cancel_with_only_a_commit_out_finds_nothing_to_cancel() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let reply = h.answer("a", json!(1));
    h.core.handle_report(1, reply).expect("accepted");
    let mut tickets = Vec::new();
    let _ = poll(&mut h.core, &mut tickets);
    assert_eq!(h.core.handle_cancel(2), Err(InputRefused::NothingToCancel));
    h.core
        .handle_result_commit(3, tickets[0], CommitOutcome::Committed)
        .expect("awaited");
    let after = poll(&mut h.core, &mut Vec::new());
    assert_eq!(after.last(), Some(&Seen::Stop(StopReason::Completed)));
}

/// A result is shared, not copied: the task's log record and every dependent's input hold
/// the very value the worker's reply carried.
#[test]
fn a_result_is_shared_by_its_record_and_every_dependent() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"]), node("c", &["a"])],
        SupervisorConfig::default(),
    );
    let reply = h.answer("a", json!({"rows": [1, 2, 3]}));
    let quorate_protocols::wire::Outcome::Answer { value: sent, .. } = &reply.payload.outcome
    else {
        unreachable!("an answer")
    };
    let sent = sent.clone();
    h.core.handle_report(1, reply).expect("accepted");
    // Polled by hand: an assertion over the raw effects (what each one carries), not a driver.
    let mut held = Vec::new();
    let mut ticket = None;
    while let Some(e) = h.core.poll_effect() {
        if let SupervisorEffect::CommitResult {
            ticket: t, value, ..
        } = e
        {
            held.push(value);
            ticket = Some(t);
        }
    }
    let ticket = ticket.expect("a's commit");
    h.core
        .handle_result_commit(2, ticket, CommitOutcome::Committed)
        .expect("awaited");
    while let Some(e) = h.core.poll_effect() {
        match e {
            SupervisorEffect::Record(r) => {
                if let EventKind::ResultCommitted { result } = r.kind {
                    held.push(result);
                }
            }
            SupervisorEffect::Dispatch { envelope, .. } => {
                held.extend(envelope.payload.inputs.into_iter().map(|i| i.value));
            }
            _ => {}
        }
    }
    assert_eq!(
        held.len(),
        4,
        "the commit, the record and b's and c's inputs"
    );
    for payload in &held {
        assert!(
            quorate_protocols::Payload::ptr_eq(payload, &sent),
            "{payload:?} was copied"
        );
    }
}
