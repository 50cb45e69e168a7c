//! The worker actor: a thin actix shell around [`WorkerCore`].
//!
//! Each handler turns a message into a core input, calls the core, then carries out the
//! effects: a tool call or query is spawned with `tokio::time::timeout` up to the effect's
//! deadline, and its result comes back to the actor as a message (no decision is taken while
//! awaiting); a reply is sent to the `Recipient<ReportMsg>` given at construction.

use std::time::Instant;

use actix::{Actor, AsyncContext, Context, Handler, Message, Recipient};
use quorate_protocols::{ActionId, AgentId, Envelope};

use crate::agent::AgentRegistry;
use crate::core::{Effect, InputError, WorkerConfig, WorkerCore};
use crate::messages::{Assignment, Control, Report};
use crate::tool::{ToolAnswer, ToolRegistry};

/// Supervisor -> worker: work on a task.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct AssignMsg(pub Envelope<Assignment>);

/// Supervisor -> worker: cancel, approve or reject.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct ControlMsg(pub Envelope<Control>);

/// Worker -> supervisor: a reply.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct ReportMsg(pub Envelope<Report>);

/// A tool call ended (`None`: timed out).
#[derive(Message)]
#[rtype(result = "()")]
struct CallEnded {
    action: ActionId,
    call: u64,
    answer: Option<ToolAnswer>,
}

/// A query ended (`Err(())`: timed out).
#[derive(Message)]
#[rtype(result = "()")]
struct QueryEnded {
    action: ActionId,
    answer: Result<Option<ToolAnswer>, ()>,
}

/// Runs task attempts for a supervisor.
///
/// ```
/// use quorate_protocols::*;
/// use quorate_workers::*;
/// use actix::prelude::*;
///
/// struct Collector(std::sync::mpsc::Sender<Envelope<Report>>);
/// impl Actor for Collector { type Context = Context<Self>; }
/// impl Handler<ReportMsg> for Collector {
///     type Result = ();
///     fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) { self.0.send(msg.0).unwrap(); }
/// }
///
/// let (tx, rx) = std::sync::mpsc::channel();
/// actix::System::new().block_on(async move {
///     let script: Script = serde_json::from_value(serde_json::json!([
///         { "do": "call", "tool": "db.save", "params": { "id": 1 }, "output": "ok" },
///     ])).unwrap();
///     let node = NodeId::new("save").unwrap();
///     let mut book = ScriptBook::new(World::new());
///     book.insert(node.clone(), script).unwrap();
///     let collector = Collector(tx).start();
///     let worker = WorkerActor::new(
///         AgentId::new(),
///         WorkerConfig::default(),
///         AgentRegistry::new().with_fallback(book.factory()),
///         book.tools().unwrap(),
///         collector.recipient(),
///     ).start();
///     let supervisor = Sender { agent: AgentId::new(), role: Role::Supervisor };
///     let assignment = Assignment {
///         node, role: "scripted".into(), inputs: vec![],
///         capabilities: Capabilities::parse(["db.save"]).unwrap(),
///         budget: Budget::new(5, 2, 0, 0), evidence_text: vec![],
///     };
///     worker.send(AssignMsg(Envelope::new(RunId::new(), TaskId::new(), supervisor, assignment)))
///         .await.unwrap();
///     actix::clock::sleep(std::time::Duration::from_millis(20)).await;
/// });
/// let report = rx.recv().unwrap();
/// assert_eq!(report.result_kind, Some(ResultKind::VerifiedConclusion));
/// assert!(matches!(report.payload.outcome, Outcome::Answer { .. }));
/// ```
#[derive(Debug)]
pub struct WorkerActor {
    core: WorkerCore,
    reports: Recipient<ReportMsg>,
}

impl WorkerActor {
    /// A worker with id `agent` replying to `reports`.
    #[must_use]
    pub fn new(
        agent: AgentId,
        config: WorkerConfig,
        agents: AgentRegistry,
        tools: ToolRegistry,
        reports: Recipient<ReportMsg>,
    ) -> Self {
        Self {
            core: WorkerCore::new(agent, config, agents, tools),
            reports,
        }
    }

    /// The core (for inspection).
    #[must_use]
    pub fn core(&self) -> &WorkerCore {
        &self.core
    }

    fn fed(&mut self, result: Result<(), InputError>, ctx: &mut Context<Self>) {
        if let Err(error) = result {
            metrics::counter!("quorate_worker_inputs_refused").increment(1);
            tracing::debug!(%error, "worker input refused");
        }
        self.carry_out(ctx);
    }

    fn carry_out(&mut self, ctx: &mut Context<Self>) {
        while let Some(effect) = self.core.poll_effect() {
            match effect {
                Effect::CallTool {
                    action,
                    tool,
                    params,
                    deadline,
                    call: tag,
                    ..
                } => {
                    metrics::counter!("quorate_worker_tool_calls").increment(1);
                    let call = self.core.tools().get(&tool).map(|t| t.call(action, params));
                    let me = ctx.address();
                    let wait = deadline.saturating_duration_since(Instant::now());
                    actix::spawn(async move {
                        let started = Instant::now();
                        let answer = match call {
                            Some(call) => tokio::time::timeout(wait, call).await.ok(),
                            None => Some(unknown_tool(&tool)),
                        };
                        let outcome = if answer.is_some() {
                            "answered"
                        } else {
                            "timed-out"
                        };
                        metrics::histogram!("quorate_tool_call_seconds", "outcome" => outcome)
                            .record(started.elapsed().as_secs_f64());
                        me.do_send(CallEnded {
                            action,
                            call: tag,
                            answer,
                        });
                    });
                }
                Effect::QueryTool {
                    action,
                    tool,
                    deadline,
                    ..
                } => {
                    let query = self.core.tools().get(&tool).map(|t| t.query(action));
                    let me = ctx.address();
                    let wait = deadline.saturating_duration_since(Instant::now());
                    actix::spawn(async move {
                        let answer = match query {
                            Some(query) => tokio::time::timeout(wait, query).await.map_err(|_| ()),
                            None => Ok(None),
                        };
                        me.do_send(QueryEnded { action, answer });
                    });
                }
                Effect::Reply(envelope) => {
                    metrics::counter!("quorate_worker_replies").increment(1);
                    self.reports.do_send(ReportMsg(*envelope));
                }
            }
        }
    }
}

fn unknown_tool(tool: &str) -> ToolAnswer {
    ToolAnswer::Err {
        class: "unknown-tool".to_owned(),
        message: format!("no tool named {tool:?}"),
    }
}

impl Actor for WorkerActor {
    type Context = Context<Self>;
}

impl Handler<AssignMsg> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: AssignMsg, ctx: &mut Context<Self>) {
        let _span = tracing::debug_span!("assign", run = %msg.0.run, task = %msg.0.task).entered();
        let result = self.core.handle_assignment(Instant::now(), msg.0);
        self.fed(result, ctx);
    }
}

impl Handler<ControlMsg> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: ControlMsg, ctx: &mut Context<Self>) {
        let _span = tracing::debug_span!("control", run = %msg.0.run, task = %msg.0.task).entered();
        let result = self.core.handle_control(Instant::now(), msg.0);
        self.fed(result, ctx);
    }
}

impl Handler<CallEnded> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: CallEnded, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let result = match msg.answer {
            Some(answer) => self
                .core
                .handle_tool_answer(now, msg.action, msg.call, answer),
            None => self.core.handle_tool_timeout(now, msg.action, msg.call),
        };
        self.fed(result, ctx);
    }
}

impl Handler<QueryEnded> for WorkerActor {
    type Result = ();
    fn handle(&mut self, msg: QueryEnded, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let result = match msg.answer {
            Ok(answer) => self.core.handle_query_answer(now, msg.action, answer),
            Err(()) => self.core.handle_query_timeout(now, msg.action),
        };
        self.fed(result, ctx);
    }
}

#[cfg(test)]
#[path = "actor_tests.rs"]
mod tests;
