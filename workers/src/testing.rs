//! A deterministic driver for the worker core (tests only): drives it with the one drive loop
//! ([`crate::drive::drive`]) synchronously on a virtual clock. A tool future that is not ready when first polled never
//! answers, so the driver jumps the clock to the call's deadline and reports a timeout.

use std::time::Duration;

use quorate_protocols::{
    ActionId, AgentId, Budget, Capabilities, Envelope, NodeId, Role, RunId, Sender, TaskId,
};

use crate::agent::AgentRegistry;
use crate::core::{Effect, WorkerConfig, WorkerCore};
use crate::drive::{drive, poll_now, QueryEnd, ToolCall, ToolQuery, WorkerEnv};
use crate::failover::{Fenced, StoredBook};
use crate::scripted::{Script, ScriptBook, World};
use crate::tool::ToolAnswer;
use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::{Assignment, Control, Report};
use quorate_protocols::Millis;

pub(crate) use crate::drive::poll_now as poll_once;

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
    pub(crate) store: quorate_state::MemoryStore<quorate_protocols::Payload>,
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
            inputs: Default::default(),
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
        self.core.push_front_effect(effect);
        let (core, mut one) = self.split(None, false, 1);
        let _ = drive(core, &mut one);
        true
    }

    /// Drives until quiet ([`crate::drive::drive`]); panics on a livelock.
    pub(crate) fn drive(&mut self) {
        self.drive_with(None, false);
    }

    /// Drives until quiet as a shell with the store of record `books` does (each call waits
    /// for its task's book to be written, fenced by its attempt); with `die_on_call`, the
    /// first call commits in the world but its answer is lost with the worker, which stops.
    /// What the core refused.
    pub(crate) fn drive_with(
        &mut self,
        books: Option<&mut Option<crate::failover::StoredBook>>,
        die_on_call: bool,
    ) -> Vec<crate::InputError> {
        let (core, mut harness) = self.split(books, die_on_call, 10_000);
        let drained = drive(core, &mut harness);
        assert!(harness.budget > 0, "worker core did not go quiet");
        drained.refused
    }

    /// Carries out `effect` (one the test polled itself), as the next effect.
    pub(crate) fn carry_out(&mut self, effect: Effect) {
        self.core.push_front_effect(effect);
        assert!(self.step(), "the effect was carried out");
    }

    /// The core, and the rest of the driver as its environment (at most `budget` effects).
    fn split<'a>(
        &'a mut self,
        books: Option<&'a mut Option<StoredBook>>,
        die_on_call: bool,
        budget: usize,
    ) -> (&'a mut WorkerCore, Harness<'a>) {
        let Driver {
            core,
            now,
            replies,
            calls,
            queries,
            store,
            checked,
            aborted,
            ..
        } = self;
        let harness = Harness {
            now,
            replies,
            calls,
            queries,
            store,
            checked,
            aborted,
            books,
            die_on_call,
            died: false,
            budget,
        };
        (core, harness)
    }

    pub(crate) fn last(&self) -> &Report {
        &self.replies.last().expect("a reply").payload
    }
}

/// A [`Driver`]'s environment: tools answer when first polled, or never (the clock then jumps
/// to the call's deadline and the call times out); preconditions are checked against its store.
struct Harness<'a> {
    now: &'a mut Millis,
    replies: &'a mut Vec<Envelope<Report>>,
    calls: &'a mut Vec<(ActionId, String)>,
    queries: &'a mut Vec<ActionId>,
    store: &'a quorate_state::MemoryStore<quorate_protocols::Payload>,
    checked: &'a mut Vec<ActionId>,
    aborted: &'a mut Vec<(ActionId, u64)>,
    /// The store of record of the tasks' books, if the driver keeps one.
    books: Option<&'a mut Option<StoredBook>>,
    /// The first call's answer is lost with the worker, which stops.
    die_on_call: bool,
    died: bool,
    /// Effects still allowed (a livelock guard).
    budget: usize,
}

impl WorkerEnv for Harness<'_> {
    fn now(&mut self) -> Millis {
        *self.now
    }

    fn go_on(&mut self) -> Flow {
        if self.died || self.budget == 0 {
            return Flow::Halt;
        }
        self.budget -= 1;
        Flow::Continue
    }

    fn keeps_book_before(&self, _: &crate::ToolHandle) -> bool {
        self.books.is_some()
    }

    fn write_book(&mut self, task: TaskId, book: StoredBook) -> Result<(), Fenced> {
        match &mut self.books {
            Some(stored) => StoredBook::write(stored, task, book),
            None => Ok(()),
        }
    }

    fn call_tool(&mut self, call: ToolCall) -> Answer<Option<ToolAnswer>> {
        let answer = poll_now(call.handle.call(call.action, call.params));
        if self.die_on_call {
            // Committed in the world; the answer is lost with the worker.
            self.died = true;
            return Answer::Later;
        }
        self.calls.push((call.action, call.tool));
        if answer.is_none() {
            *self.now = call.deadline;
        }
        Answer::Now(answer)
    }

    fn abort_call(&mut self, _: TaskId, action: ActionId, call: u64) {
        self.aborted.push((action, call));
    }

    fn query_tool(&mut self, query: ToolQuery) -> Answer<QueryEnd> {
        self.queries.push(query.action);
        match poll_now(query.handle.query(query.action)) {
            Some(answer) => Answer::Now(QueryEnd::Answered(answer)),
            None => {
                *self.now = query.deadline;
                Answer::Now(QueryEnd::TimedOut)
            }
        }
    }

    fn check_preconditions(
        &mut self,
        action: ActionId,
        checks: Vec<quorate_protocols::Precondition>,
    ) -> Answer<Result<(), quorate_state::PreconditionFailure>> {
        self.checked.push(action);
        Answer::Now(quorate_state::check_preconditions(self.store, &checks))
    }

    fn reply(&mut self, reply: Box<Envelope<Report>>) {
        self.replies.push(*reply);
    }
}
