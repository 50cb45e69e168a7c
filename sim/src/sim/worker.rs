//! The worker side of a schedule: tool calls and queries on the virtual clock, worker crashes.

use std::task::{Context, Poll, Waker};
use std::time::Duration;

use quorate_protocols::{ActionId, AgentId, IdSource};
use quorate_workers::{
    AgentRegistry, Effect as WorkEffect, ScriptBook, ToolFuture, WorkerConfig, WorkerCore,
};
use rand::Rng;

use super::{Msg, OpenCall, Persistence, Sim};
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

fn poll_once<T>(mut fut: ToolFuture<T>) -> Option<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
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

    pub(super) fn drain_worker(&mut self, w: usize) {
        while let Some(effect) = self.workers[w].core.poll_effect() {
            match effect {
                call @ WorkEffect::CallTool { .. } => self.call_tool(w, call),
                WorkEffect::QueryTool {
                    action,
                    handle,
                    deadline,
                    ..
                } => {
                    let inc = self.workers[w].incarnation;
                    let answer = poll_once(handle.query(action)).flatten();
                    if !self.healed() && self.rng.gen_bool(self.faults.query_timeout) {
                        self.counts.bump(Fault::QueryTimeout);
                        self.schedule(deadline, Msg::QueryTimeout(w, inc, action));
                    } else {
                        let at = self.rng.gen_range(self.now..deadline.max(self.now + 1));
                        self.schedule(at, Msg::QueryAnswer(w, inc, action, answer));
                    }
                }
                WorkEffect::CheckPreconditions { action, checks } => {
                    // Checked at once against the run's store, as the actor shell does.
                    let outcome = quorate_state::check_preconditions(&self.results, &checks);
                    let now = self.now;
                    let _stale = self.workers[w]
                        .core
                        .handle_preconditions(now, action, outcome);
                }
                WorkEffect::Reply(reply) => self.send(Msg::Report(reply)),
                // The sim's calls run to their end when made (their answers are scheduled): an
                // aborted call's answer, if any, comes late and only updates the book.
                WorkEffect::AbortCall { .. } => {}
            }
        }
    }

    /// Carries out a `CallTool` effect of worker `w` (other effects are ignored).
    fn call_tool(&mut self, w: usize, effect: WorkEffect) {
        let WorkEffect::CallTool {
            task,
            action,
            tool,
            handle,
            params,
            deadline,
            call: tag,
        } = effect
        else {
            return;
        };
        let tool = tool.as_str();
        let writes = self.workers[w]
            .core
            .tools()
            .get(tool)
            .is_some_and(|t| t.side_effect().writes());
        if let Some(checks) = self.guards.get(&task).filter(|_| writes) {
            if let Err(observation) = quorate_state::check_preconditions(&self.results, checks) {
                let detail = format!("{tool} for {action} ran although {observation}");
                self.fail(Invariant::GuardedWrite, detail);
            }
        }
        let slot = &mut self.workers[w];
        let (attempt, slice) = slot.current.get(&task).copied().unwrap_or((0, u64::MAX));
        let made = slot.calls.entry((task, attempt)).or_default();
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
        let inc = self.workers[w].incarnation;
        let answer = poll_once(handle.call(action, params));
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
