//! The worker core's drive loop: answers given at once are fed by the loop, answers that come
//! later by the driver, refusals come back typed, and a halt leaves the rest queued.

use serde_json::json;

use super::*;
use crate::testing::{script, Driver};
use quorate_protocols::wire::Outcome;
use quorate_protocols::Budget;

/// Answers calls at once or later, keeps what it was asked.
#[derive(Default)]
struct Env {
    later: bool,
    calls: Vec<(ActionId, u64)>,
    replies: Vec<Envelope<Report>>,
    books: Option<Option<StoredBook>>,
    /// A fence every book write meets, whatever the store holds.
    fence: Option<Fenced>,
    halt_after: Option<usize>,
}

impl WorkerEnv for Env {
    fn now(&mut self) -> Millis {
        7
    }

    fn go_on(&mut self) -> Flow {
        match &mut self.halt_after {
            Some(0) => Flow::Halt,
            Some(n) => {
                *n -= 1;
                Flow::Continue
            }
            None => Flow::Continue,
        }
    }

    fn keeps_book_before(&self, _: &ToolHandle) -> bool {
        self.books.is_some()
    }

    fn write_book(&mut self, task: TaskId, book: StoredBook) -> Result<(), Fenced> {
        if let Some(fenced) = self.fence {
            return Err(fenced);
        }
        let stored = self.books.as_mut().expect("asked only with books");
        StoredBook::write(stored, task, book)
    }

    fn call_tool(&mut self, call: ToolCall) -> Answer<Option<ToolAnswer>> {
        self.calls.push((call.action, call.call));
        if self.later {
            return Answer::Later;
        }
        Answer::Now(poll_now(call.handle.call(call.action, call.params)))
    }

    fn query_tool(&mut self, _: ToolQuery) -> Answer<QueryEnd> {
        Answer::Now(QueryEnd::TimedOut)
    }

    fn reply(&mut self, reply: Box<Envelope<Report>>) {
        self.replies.push(*reply);
    }
}

/// A worker whose task saves twice, assigned attempt `attempt`.
fn saving(attempt: u32) -> Driver {
    let steps = json!([
        { "do": "call", "tool": "db.save", "params": { "id": 1 }, "output": "one" },
        { "do": "call", "tool": "db.save", "params": { "id": 2 }, "output": "two" },
    ]);
    let mut d = Driver::new(script(steps), vec![]);
    d.assign(
        attempt,
        Driver::assignment(&["db.save"], Budget::new(10, 2, 0, 0)),
    );
    d
}

#[test]
fn an_answer_given_at_once_is_fed_by_the_loop() {
    let mut d = saving(1);
    let mut env = Env::default();
    let drained = drive(&mut d.core, &mut env);
    assert_eq!(drained.flow, Flow::Continue);
    assert_eq!(drained.refused, vec![]);
    assert_eq!(
        env.calls.len(),
        2,
        "the second call follows the first's answer"
    );
    assert_eq!(env.replies.len(), 1);
    assert!(matches!(
        env.replies[0].payload.outcome,
        Outcome::Answer { .. }
    ));
}

#[test]
fn an_answer_that_comes_later_is_fed_by_the_driver() {
    let mut d = saving(1);
    let mut env = Env {
        later: true,
        ..Env::default()
    };
    let drained = drive(&mut d.core, &mut env);
    assert_eq!((drained.refused, drained.flow), (vec![], Flow::Continue));
    assert_eq!(env.calls.len(), 1, "the first call is in flight");
    assert!(env.replies.is_empty());
    let (action, call) = env.calls[0];
    let answer = ToolAnswer::Ok {
        output: json!("one").into(),
        cost: Budget::ZERO,
        changed: true,
    };
    let late = WorkerAnswer::Call {
        action,
        call,
        answer: Some(answer),
    };
    feed(&mut d.core, 8, late.clone()).unwrap();
    let _ = drive(&mut d.core, &mut env);
    assert_eq!(env.calls.len(), 2, "the answer moved the attempt on");
    // The same answer again is refused, typed.
    assert_eq!(
        feed(&mut d.core, 9, late),
        Err(InputError::NotAwaited { action })
    );
}

#[test]
fn a_fenced_book_stops_the_call() {
    // The store's book is owned by attempt 2: attempt 1's write is fenced, its call never runs.
    let mut d = saving(1);
    let mut stored = None;
    let _ = StoredBook::claim(&mut stored, d.task, 2).unwrap();
    let mut env = Env {
        books: Some(stored),
        ..Env::default()
    };
    let drained = drive(&mut d.core, &mut env);
    assert_eq!(drained.refused, vec![]);
    assert!(env.calls.is_empty(), "no call after a fenced write");
    assert_eq!(env.replies.len(), 1, "the attempt ended");
    assert!(!matches!(
        env.replies[0].payload.outcome,
        Outcome::Answer { .. }
    ));
}

#[test]
fn a_halt_leaves_the_rest_queued() {
    let mut d = saving(1);
    let mut env = Env {
        later: true,
        halt_after: Some(0),
        ..Env::default()
    };
    let drained = drive(&mut d.core, &mut env);
    assert_eq!(drained.flow, Flow::Halt);
    assert!(env.calls.is_empty());
    env.halt_after = None;
    let drained = drive(&mut d.core, &mut env);
    assert_eq!(drained.flow, Flow::Continue);
    assert_eq!(
        env.calls.len(),
        1,
        "the queued call went out on the next drive"
    );
}

#[test]
fn a_fence_that_names_no_newer_attempt_comes_back_refused() {
    let mut d = saving(3);
    let task = d.task;
    let fenced = Fenced {
        task,
        attempt: 3,
        owner: 2,
    };
    let mut env = Env {
        books: Some(None),
        fence: Some(fenced),
        ..Env::default()
    };
    let drained = drive(&mut d.core, &mut env);
    assert_eq!(
        drained.refused,
        vec![InputError::StaleAttempt {
            task,
            current: 3,
            got: 2
        }]
    );
    assert!(env.calls.is_empty(), "the fenced call does not run");
}
