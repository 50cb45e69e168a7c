//! The worker side of a schedule: tool calls and queries on the virtual clock, worker crashes.

use std::collections::HashMap;
use std::time::Duration;

use quorate_protocols::drive::Answer;
use quorate_protocols::wire::Report;
use quorate_protocols::{ActionId, AgentId, Envelope, IdSource, Precondition, TaskId};
use quorate_state::PreconditionFailure;
use quorate_workers::drive::{drive, poll_now, QueryEnd, ToolCall, ToolQuery, WorkerEnv};
use quorate_workers::{
    AgentRegistry, Fenced, ScriptBook, StoredBook, ToolAnswer, ToolHandle, WorkerConfig, WorkerCore,
};
use rand::Rng;

use super::{Msg, OpenCall, Persistence, Sim, WorkerSlot};
use crate::check::Invariant;
use crate::fault::Fault;

pub(super) fn worker_core(agent: AgentId, book: &ScriptBook, ids: IdSource) -> WorkerCore {
    let agents = AgentRegistry::new().with_fallback(book.factory());
    let tools = book.tools().expect("generated tools are valid");
    let config = WorkerConfig {
        call_timeout: Duration::from_millis(200),
        no_progress_limit: 3,
    };
    WorkerCore::new(agent, config, agents, tools, ids)
}

impl Sim {
    pub(super) fn crash_worker(&mut self, w: usize) {
        self.counts.bump(Fault::WorkerCrash);
        let now = self.now;
        let slot = &mut self.workers[w];
        match self.opts.persistence {
            Persistence::DurableBook => {
                // In-flight calls lose their answers: their outcomes become unknown.
                let open: Vec<(ActionId, u64)> = self
                    .calls
                    .values()
                    .filter(|c| c.worker == w && c.incarnation == slot.incarnation && !c.answered)
                    .map(|c| (c.action, c.tag))
                    .collect();
                for (action, tag) in open {
                    let _late = slot.core.handle_tool_timeout(now, action, tag);
                }
                // Not carried out: the crashed worker's effects are lost with it.
                while slot.core.poll_effect().is_some() {}
            }
            Persistence::Volatile => {
                slot.core = worker_core(self.senders[w].agent, &self.book, self.ids.fork());
                slot.current.clear();
            }
        }
        slot.incarnation += 1;
        slot.down_until = self.now + self.rng.gen_range(50..500);
    }

    /// Carries out worker `w`'s effects through the worker core's one drive loop
    /// ([`quorate_workers::drive::drive`], with [`SimWorker`] as its environment).
    pub(super) fn drain_worker(&mut self, w: usize) {
        // The core leaves the sim while it is driven (the environment is the rest of the sim).
        let mut workers = std::mem::take(&mut self.workers);
        let WorkerSlot {
            core,
            incarnation,
            current,
            calls,
            ..
        } = &mut workers[w];
        let mut env = SimWorker {
            sim: self,
            w,
            incarnation: *incarnation,
            current,
            calls,
        };
        let _late_or_stale = drive(core, &mut env);
        self.workers = workers;
    }
}

/// Worker `w` of a sim as its core's drive environment: a tool call's or query's answer is
/// scheduled on the virtual clock (`Answer::Later`), store preconditions are checked at once
/// against the run's store, replies go on the network.
struct SimWorker<'a> {
    sim: &'a mut Sim,
    w: usize,
    incarnation: u32,
    current: &'a HashMap<TaskId, (u32, u64)>,
    calls: &'a mut HashMap<(TaskId, u32), u64>,
}

impl WorkerEnv for SimWorker<'_> {
    fn now(&mut self) -> u64 {
        self.sim.now
    }

    fn keeps_book_before(&self, _: &ToolHandle) -> bool {
        self.sim.opts.persistence == Persistence::DurableBook
    }

    fn write_book(&mut self, task: TaskId, book: StoredBook) -> Result<(), Fenced> {
        self.sim.write_book(task, book)
    }

    fn call_tool(&mut self, call: ToolCall) -> Answer<Option<ToolAnswer>> {
        self.sim
            .call_tool(self.w, self.incarnation, self.current, self.calls, call);
        Answer::Later
    }

    fn query_tool(&mut self, query: ToolQuery) -> Answer<QueryEnd> {
        let sim = &mut *self.sim;
        let (w, inc, action, deadline) = (self.w, self.incarnation, query.action, query.deadline);
        let answer = poll_now(query.handle.query(action)).flatten();
        if !sim.healed() && sim.rng.gen_bool(sim.faults.query_timeout) {
            sim.counts.bump(Fault::QueryTimeout);
            sim.schedule(deadline, Msg::QueryTimeout(w, inc, action));
        } else {
            let at = sim.rng.gen_range(sim.now..deadline.max(sim.now + 1));
            sim.schedule(at, Msg::QueryAnswer(w, inc, action, answer));
        }
        Answer::Later
    }

    fn check_preconditions(
        &mut self,
        _: ActionId,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        // Checked at once against the run's store, as the actor shell does.
        Answer::Now(quorate_state::check_preconditions(
            &self.sim.results,
            &checks,
        ))
    }

    fn reply(&mut self, reply: Box<Envelope<Report>>) {
        self.sim.send(Msg::Report(reply));
    }

    // The sim's calls run to their end when made (their answers are scheduled): an aborted
    // call's answer, if any, comes late and only updates the book (the default `abort_call`).
}

impl Sim {
    /// Makes a tool call of worker `w` (incarnation `inc`, with its `current` attempts and the
    /// `made` calls per attempt), checking the guarded write, budget and effect invariants; its
    /// answer and its timeout are scheduled.
    fn call_tool(
        &mut self,
        w: usize,
        inc: u32,
        current: &HashMap<TaskId, (u32, u64)>,
        made: &mut HashMap<(TaskId, u32), u64>,
        call: ToolCall,
    ) {
        let ToolCall {
            task,
            action,
            tool,
            handle,
            params,
            deadline,
            call: tag,
            ..
        } = call;
        let tool = tool.as_str();
        let writes = handle.side_effect().writes();
        if let Some(checks) = self.guards.get(&task).filter(|_| writes) {
            if let Err(observation) = quorate_state::check_preconditions(&self.results, checks) {
                let detail = format!("{tool} for {action} ran although {observation}");
                self.fail(Invariant::GuardedWrite, detail);
            }
        }
        let (attempt, slice) = current.get(&task).copied().unwrap_or((0, u64::MAX));
        let made = made.entry((task, attempt)).or_default();
        *made += 1;
        if *made > slice {
            let detail =
                format!("attempt {attempt} made {made} tool calls with a slice of {slice}");
            self.fail(Invariant::Budget, detail);
        }
        let total = self.task_calls.entry(task).or_default();
        *total += 1;
        if *total > slice {
            self.slice_reused = true;
        }
        let answer = poll_now(handle.call(action, params));
        let effects = self.world.effects_for(&action);
        if effects > 1 {
            self.fail(
                Invariant::DuplicateEffect,
                format!(
                    "action {action} committed {effects} effects{}",
                    if self.late_answered.contains(&action) {
                        " (after a late answer of an earlier call)"
                    } else {
                        ""
                    }
                ),
            );
        }
        let call = self.next_call;
        self.next_call += 1;
        self.calls.insert(
            call,
            OpenCall {
                worker: w,
                incarnation: inc,
                action,
                tag,
                answered: false,
            },
        );
        self.schedule(deadline, Msg::ToolTimeout(w, inc, call, tag, action));
        if let Some(answer) = answer {
            let at = if !self.healed() && self.rng.gen_bool(self.faults.late_answer) {
                self.counts.bump(Fault::LateToolAnswer);
                deadline + self.rng.gen_range(1..300)
            } else {
                self.rng.gen_range(self.now..deadline.max(self.now + 1))
            };
            self.schedule(at, Msg::ToolAnswer(w, inc, call, tag, action, answer));
        }
    }
}
