//! The real actor in an actix system, with scripted agents and a collector.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::prelude::*;
use quorate_protocols::{ActionId, Budget, Envelope, NodeId, Payload, ResultKind, RunId, TaskId};
use serde_json::json;

use super::*;
use crate::scripted::{ScriptBook, World};
use crate::testing::{ids, script, supervisor, Driver};
use quorate_protocols::wire::Outcome;

#[derive(Default)]
struct Collector(Arc<Mutex<Vec<Envelope<Report>>>>);

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<ReportMsg> for Collector {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) {
        self.0.lock().unwrap().push(msg.0);
    }
}

async fn wait_for(replies: &Arc<Mutex<Vec<Envelope<Report>>>>, n: usize) -> Vec<Envelope<Report>> {
    for _ in 0..200 {
        if replies.lock().unwrap().len() >= n {
            break;
        }
        actix::clock::sleep(Duration::from_millis(10)).await;
    }
    replies.lock().unwrap().clone()
}

#[actix::test]
async fn worker_actor_recovers_a_timed_out_call_and_obeys_cancel() {
    let world = World::new();
    let mut book = ScriptBook::new(world.clone());
    let save = NodeId::new("save").unwrap();
    let ask = NodeId::new("ask").unwrap();
    book.insert(
        save.clone(),
        script(json!([
            { "do": "call", "tool": "db.save", "params": { "id": 7 },
              "outcome": "timeout-after-commit", "output": "saved" },
            { "do": "answer", "value": "saved once" },
        ])),
    )
    .unwrap();
    book.insert(
        ask.clone(),
        script(json!([{ "do": "call", "tool": "db.drop", "needs-approval": true }])),
    )
    .unwrap();
    let replies = Arc::new(Mutex::new(Vec::new()));
    let collector = Collector(replies.clone()).start();
    let config = WorkerConfig {
        call_timeout: Duration::from_millis(50),
        no_progress_limit: 3,
    };
    let worker = WorkerActor::new(
        ids().agent_id(),
        config,
        AgentRegistry::new().with_fallback(book.factory()),
        book.tools().unwrap(),
        collector.recipient(),
    )
    .start();

    let task = ids().task_id();
    let mut assignment = Driver::assignment(&["db.save", "db.drop"], Budget::new(10, 5, 0, 0));
    assignment.node = save;
    let env = Envelope::new(
        ids().run_id(),
        task,
        supervisor(),
        assignment.clone(),
        &mut ids(),
    );
    worker.send(AssignMsg(env.clone())).await.unwrap();
    let got = wait_for(&replies, 1).await;
    assert_eq!(got.len(), 1);
    let reply = &got[0];
    assert_eq!((reply.task, reply.correlation), (task, env.correlation));
    assert_eq!(reply.result_kind, Some(ResultKind::VerifiedConclusion));
    assert_eq!(reply.sender.role, quorate_protocols::Role::Worker);
    assert!(
        matches!(&reply.payload.outcome, Outcome::Answer { value, receipts }
        if value == &json!("saved once") && receipts.len() == 1)
    );
    assert_eq!(reply.payload.actions.unknown, 1);
    assert_eq!(reply.payload.actions.recovered, 1);
    assert_eq!(world.effects_for(&ActionId::new(task, 0, 0)), 1);

    // A parked call never starts once the task is cancelled.
    let parked = ids().task_id();
    assignment.node = ask;
    let env = Envelope::new(ids().run_id(), parked, supervisor(), assignment, &mut ids());
    worker.send(AssignMsg(env.clone())).await.unwrap();
    let got = wait_for(&replies, 2).await;
    assert!(matches!(
        got[1].payload.outcome,
        Outcome::ApprovalRequested { .. }
    ));
    let cancel = env.map(|_| crate::Control::Cancel);
    worker.send(ControlMsg(cancel.clone())).await.unwrap();
    let action = ActionId::new(parked, 0, 0);
    worker
        .send(ControlMsg(
            cancel.map(|_| crate::Control::Approve { action }),
        ))
        .await
        .unwrap();
    let got = wait_for(&replies, 3).await;
    assert_eq!(got[2].payload.outcome, Outcome::Cancelled);
    actix::clock::sleep(Duration::from_millis(30)).await;
    assert_eq!(replies.lock().unwrap().len(), 3);
    assert_eq!(world.effects_of("db.drop"), 0);
}

#[derive(Default)]
struct BatchCollector(Arc<Mutex<Vec<Vec<Envelope<Report>>>>>);

impl Actor for BatchCollector {
    type Context = Context<Self>;
}

impl Handler<ReportBatch> for BatchCollector {
    type Result = ();
    fn handle(&mut self, msg: ReportBatch, _: &mut Context<Self>) {
        self.0
            .lock()
            .unwrap()
            .push(msg.0.into_iter().map(|r| *r).collect());
    }
}

/// A book where nodes `a`, `b` and `c` answer at once, and their assignments.
fn three_answers() -> (ScriptBook, Vec<Envelope<Assignment>>) {
    let mut book = ScriptBook::new(World::new());
    let envs = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let node = NodeId::new(*n).unwrap();
            book.insert(
                node.clone(),
                script(json!([{ "do": "answer", "value": n }])),
            )
            .unwrap();
            let assignment = Assignment {
                node,
                role: "scripted".into(),
                goal: None,
                inputs: Default::default(),
                capabilities: quorate_protocols::Capabilities::none(),
                budget: Budget::steps(2),
                evidence_text: vec![],
                preconditions: vec![],
            };
            Envelope::new(
                RunId::from_u128(9),
                ids().task_id(),
                supervisor(),
                assignment,
                &mut ids(),
            )
        })
        .collect();
    (book, envs)
}

/// The envelopes of a batch message.
fn boxed<P: Clone>(envs: &[Envelope<P>]) -> Vec<Box<Envelope<P>>> {
    envs.iter().cloned().map(Box::new).collect()
}

#[test]
fn a_batch_splits_into_one_message_per_envelope_in_order() {
    let (_, envs) = three_answers();
    let parts = AssignBatch::new(boxed(&envs)).split();
    assert_eq!(parts.len(), 3);
    for (part, env) in parts.iter().zip(&envs) {
        assert_eq!(part.0, vec![Box::new(env.clone())]);
    }
}

#[actix::test]
async fn a_batched_worker_answers_a_batch_in_one_message_and_refuses_a_repeat() {
    let (book, envs) = three_answers();
    let batches = Arc::new(Mutex::new(Vec::new()));
    let collector = BatchCollector(batches.clone()).start();
    let worker = WorkerActor::with_replies(
        ids().agent_id(),
        WorkerConfig::default(),
        AgentRegistry::new().with_fallback(book.factory()),
        book.tools().unwrap(),
        Replies::Batched(collector.recipient()),
    )
    .start();
    // The second copy of "b" is a duplicate assignment: refused, no second reply.
    let mut batch = envs.clone();
    batch.push(envs[1].clone());
    worker.send(AssignBatch::new(boxed(&batch))).await.unwrap();
    for _ in 0..200 {
        if !batches.lock().unwrap().is_empty() {
            break;
        }
        actix::clock::sleep(Duration::from_millis(10)).await;
    }
    let got = batches.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "one message for the batch");
    let tasks: Vec<TaskId> = got[0].iter().map(|r| r.task).collect();
    assert_eq!(tasks, envs.iter().map(|e| e.task).collect::<Vec<_>>());
}

/// The actor checks a write's store preconditions against the store it was given; without a
/// store it cannot show they hold, and refuses the write.
#[actix::test]
async fn the_actor_checks_store_preconditions_against_its_store_before_a_write() {
    use quorate_protocols::Precondition;
    let node = NodeId::new("save").unwrap();
    let store = Arc::new(quorate_state::MemoryStore::new());
    assert!(matches!(
        store.cas_now("lock/orders", None, json!(true).into()),
        quorate_state::CasOutcome::Committed(_)
    ));
    for (with_store, lock_absent_needed, runs) in [
        (true, false, true),
        (true, true, false),
        (false, false, false),
    ] {
        let world = World::new();
        let mut book = ScriptBook::new(world.clone());
        book.insert(
            node.clone(),
            script(json!([{ "do": "call", "tool": "db.save", "params": { "id": 1 } }])),
        )
        .unwrap();
        let replies = Arc::new(Mutex::new(Vec::new()));
        let collector = Collector(replies.clone()).start();
        let mut worker = WorkerActor::new(
            ids().agent_id(),
            WorkerConfig::default(),
            AgentRegistry::new().with_fallback(book.factory()),
            book.tools().unwrap(),
            collector.recipient(),
        );
        if with_store {
            worker = worker.with_store(store.clone());
        }
        let worker = worker.start();
        let mut assignment = Driver::assignment(&["db.save"], Budget::new(10, 5, 0, 0));
        assignment.node = node.clone();
        assignment.preconditions = vec![if lock_absent_needed {
            Precondition::KeyAbsent {
                key: "lock/orders".into(),
            }
        } else {
            Precondition::KeyExists {
                key: "lock/orders".into(),
            }
        }];
        let env = Envelope::new(
            ids().run_id(),
            ids().task_id(),
            supervisor(),
            assignment,
            &mut ids(),
        );
        worker.send(AssignMsg(env)).await.unwrap();
        let got = wait_for(&replies, 1).await;
        let case = (with_store, lock_absent_needed);
        assert_eq!(world.effects_of("db.save"), usize::from(runs), "{case:?}");
        let reasons: Vec<&str> = got[0]
            .payload
            .rejected_calls()
            .map(|(_, reason)| reason)
            .collect();
        let want: &[&str] = match case {
            (true, false) => &[],
            (true, true) => &["precondition does not hold before the write: lock/orders exists"],
            _ => &["precondition does not hold before the write: no store to check the task's preconditions against"],
        };
        assert_eq!(reasons, want, "{case:?}");
    }
}

/// A model tool whose call never answers and notes when its future is dropped (as an HTTP
/// client's request future closes its connection when dropped).
struct Hanging {
    dropped: Arc<std::sync::atomic::AtomicBool>,
}

/// Sets its flag when dropped.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl crate::Tool for Hanging {
    fn name(&self) -> &str {
        "model.small"
    }
    fn capability(&self) -> quorate_protocols::Capability {
        quorate_protocols::Capability::new("model.small").unwrap()
    }
    fn side_effect(&self) -> crate::SideEffect {
        crate::SideEffect::ReadOnly
    }
    fn reservation(&self, _: &serde_json::Value) -> Option<Budget> {
        Some(Budget::new(0, 0, 70, 0))
    }
    fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(60))
    }
    fn call(&self, _: ActionId, _: Payload) -> crate::ToolFuture<crate::ToolAnswer> {
        let flag = DropFlag(self.dropped.clone());
        Box::pin(async move {
            std::future::pending::<()>().await;
            drop(flag);
            unreachable!("never answers")
        })
    }
}

#[actix::test]
async fn a_cancel_drops_the_future_of_the_call_in_flight() {
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tools = crate::ToolRegistry::new();
    tools
        .register(Arc::new(Hanging {
            dropped: dropped.clone(),
        }))
        .unwrap();
    let mut book = ScriptBook::new(World::new());
    let node = NodeId::new("ask").unwrap();
    let ask = json!([{ "do": "call", "tool": "model.small", "params": { "messages": [] } }]);
    book.insert(node.clone(), script(ask)).unwrap();
    let replies = Arc::new(Mutex::new(Vec::new()));
    let collector = Collector(replies.clone()).start();
    let worker = WorkerActor::new(
        ids().agent_id(),
        WorkerConfig::default(),
        AgentRegistry::new().with_fallback(book.factory()),
        tools,
        collector.recipient(),
    )
    .start();
    let mut assignment = Driver::assignment(&["model.small"], Budget::new(10, 5, 100, 0));
    assignment.node = node;
    let task = ids().task_id();
    let env = Envelope::new(ids().run_id(), task, supervisor(), assignment, &mut ids());
    worker.send(AssignMsg(env.clone())).await.unwrap();
    actix::clock::sleep(Duration::from_millis(50)).await;
    assert!(
        !dropped.load(std::sync::atomic::Ordering::SeqCst),
        "in flight"
    );
    worker
        .send(ControlMsg(env.map(|_| crate::Control::Cancel)))
        .await
        .unwrap();
    let got = wait_for(&replies, 1).await;
    assert_eq!(got[0].payload.outcome, Outcome::Cancelled);
    assert_eq!(got[0].payload.spent, Budget::new(1, 1, 70, 0));
    for _ in 0..100 {
        if dropped.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        actix::clock::sleep(Duration::from_millis(5)).await;
    }
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "aborted");
}
