//! A deterministic driver for the worker core (tests only): carries out effects
//! synchronously on a virtual clock. A tool future that is not ready when first polled never
//! answers, so the driver jumps the clock to the call's deadline and reports a timeout.

use std::task::{Context, Poll, Waker};
use std::time::Duration;

use quorate_protocols::{
    ActionId, AgentId, Budget, Capabilities, Envelope, NodeId, Role, RunId, Sender, TaskId,
};

use crate::agent::AgentRegistry;
use crate::core::{Effect, WorkerConfig, WorkerCore};
use crate::scripted::{Script, ScriptBook, World};
use crate::tool::ToolFuture;
use quorate_protocols::wire::{Assignment, Control, Report};

pub(crate) fn poll_once<T>(mut fut: ToolFuture<T>) -> Option<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

pub(crate) fn script(json: serde_json::Value) -> Script {
    serde_json::from_value(json).expect("test script parses")
}

/// A fresh seeded id source per call (seeds 1, 2, ...): tests draw distinct ids without a clock
/// or the operating system's randomness.
pub(crate) fn ids() -> quorate_protocols::IdSource {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    quorate_protocols::IdSource::seeded(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

pub(crate) fn supervisor() -> Sender {
    Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    }
}

pub(crate) struct Driver {
    pub(crate) core: WorkerCore,
    pub(crate) world: World,
    pub(crate) now: quorate_protocols::Millis,
    pub(crate) replies: Vec<Envelope<Report>>,
    pub(crate) calls: Vec<(ActionId, String)>,
    pub(crate) queries: Vec<ActionId>,
    pub(crate) task: TaskId,
    pub(crate) assignment: Option<Envelope<Assignment>>,
    /// The run's store, against which store preconditions are checked before writes.
    pub(crate) store: quorate_state::MemoryStore<serde_json::Value>,
    /// The writes whose preconditions were checked, in order.
    pub(crate) checked: Vec<ActionId>,
    /// The calls the core aborted (action, call tag), in order.
    pub(crate) aborted: Vec<(ActionId, u64)>,
}

impl Driver {
    /// A worker playing `script` on node "n" (every tool in `extra_tools` scripts is registered
    /// as well, so tests can make tools exist that the task may not use).
    pub(crate) fn new(script: Script, extra_tools: Vec<Script>) -> Self {
        let world = World::new();
        let mut book = ScriptBook::new(world.clone());
        book.insert(NodeId::new("n").unwrap(), script).unwrap();
        for (i, s) in extra_tools.into_iter().enumerate() {
            book.insert(NodeId::new(format!("extra{i}")).unwrap(), s)
                .unwrap();
        }
        let agents = AgentRegistry::new().with_fallback(book.factory());
        Self::with(agents, book.tools().unwrap(), world)
    }

    pub(crate) fn with(agents: AgentRegistry, tools: crate::ToolRegistry, world: World) -> Self {
        let config = WorkerConfig {
            call_timeout: Duration::from_secs(1),
            no_progress_limit: 3,
        };
        Self {
            core: WorkerCore::new(AgentId::from_u128(2), config, agents, tools, ids()),
            world,
            now: 0,
            replies: Vec::new(),
            calls: Vec::new(),
            queries: Vec::new(),
            task: TaskId::from_u128(3),
            assignment: None,
            store: quorate_state::MemoryStore::new(),
            checked: Vec::new(),
            aborted: Vec::new(),
        }
    }

    pub(crate) fn assignment(caps: &[&str], budget: Budget) -> Assignment {
        Assignment {
            node: NodeId::new("n").unwrap(),
            role: "scripted".into(),
            goal: None,
            inputs: vec![],
            capabilities: Capabilities::parse(caps.iter().copied()).unwrap(),
            budget,
            evidence_text: vec![],
            preconditions: vec![],
        }
    }

    /// Assigns attempt `attempt` without carrying anything out.
    pub(crate) fn assign(&mut self, attempt: u32, assignment: Assignment) {
        let mut env = Envelope::new(
            RunId::from_u128(9),
            self.task,
            supervisor(),
            assignment,
            &mut ids(),
        );
        env.attempt = attempt;
        self.assignment = Some(env.clone());
        self.core.handle_assignment(self.now, env).unwrap();
    }

    pub(crate) fn control(&mut self, control: Control) -> Result<(), crate::InputError> {
        let env = self.assignment.as_ref().unwrap().reply(
            supervisor(),
            quorate_protocols::ResultKind::Suggestion,
            control,
            &mut ids(),
        );
        let mut env = env;
        env.result_kind = None;
        self.core.handle_control(self.now, env)
    }

    /// Carries out one effect; `false` when there is none.
    pub(crate) fn step(&mut self) -> bool {
        let Some(effect) = self.core.poll_effect() else {
            return false;
        };
        self.carry_out(effect);
        true
    }

    /// Steps until quiet; panics on a livelock.
    pub(crate) fn drive(&mut self) {
        for _ in 0..10_000 {
            if !self.step() {
                return;
            }
        }
        panic!("worker core did not go quiet");
    }

    pub(crate) fn carry_out(&mut self, effect: Effect) {
        match effect {
            Effect::CallTool {
                action,
                tool,
                handle,
                params,
                deadline,
                call,
                ..
            } => {
                self.calls.push((action, tool));
                let fut = handle.call(action, params);
                let result = match poll_once(fut) {
                    Some(answer) => self.core.handle_tool_answer(self.now, action, call, answer),
                    None => {
                        self.now = deadline;
                        self.core.handle_tool_timeout(self.now, action, call)
                    }
                };
                let _late_or_stale = result;
            }
            Effect::QueryTool {
                action,
                handle,
                deadline,
                ..
            } => {
                self.queries.push(action);
                let fut = handle.query(action);
                let result = match poll_once(fut) {
                    Some(answer) => self.core.handle_query_answer(self.now, action, answer),
                    None => {
                        self.now = deadline;
                        self.core.handle_query_timeout(self.now, action)
                    }
                };
                let _late_or_stale = result;
            }
            Effect::CheckPreconditions { action, checks } => {
                self.checked.push(action);
                let outcome = quorate_state::check_preconditions(&self.store, &checks);
                let _late = self.core.handle_preconditions(self.now, action, outcome);
            }
            Effect::Reply(reply) => self.replies.push(*reply),
            Effect::AbortCall { action, call, .. } => self.aborted.push((action, call)),
        }
    }

    pub(crate) fn last(&self) -> &Report {
        &self.replies.last().expect("a reply").payload
    }
}
