//! Budget top-ups: a task whose node says `on_exhausted = "ask"` does not stop the run when its
//! slice runs out. It parks, waiting for a person, with a [`TopUpRequest`] (which component,
//! how much more, what it spent); a [`TopUp::Grant`] grows its slice out of the run's
//! unallocated budget (never more than is left: `reserve + sum(slices) <= budget` still holds)
//! and the task runs again as a new attempt; a [`TopUp::Reject`] stops it `stopped-limit`, as
//! the default (`on_exhausted = "stop"`) would have. Both are logged (`top-up-requested`,
//! `top-up-decided`) and replayed by a resume, so a decision is never lost nor applied twice.

use std::collections::BTreeMap;

use quorate_protocols::{Budget, Component, OnExhausted};
use quorate_state::{AccountId, LedgerError};
use serde::{Deserialize, Serialize};

use super::*;
use crate::event::EventKind;
use crate::StopReason;

/// What a task that ran out of its slice asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopUpRequest {
    /// The component that ran out.
    pub component: Component,
    /// How much more of `component` the charge it could not make needed: the least top-up
    /// that lets it take that step (a new attempt may redo earlier steps, and need more).
    pub needed: u64,
    /// What the task spent, as its worker reported.
    pub spent: Budget,
    /// Its slice (with the top-ups granted before).
    pub granted: Budget,
    /// What the run had left to grant when the task asked (its budget less the reserve, the
    /// open slices and what closed tasks spent).
    pub left: Budget,
}

/// A person's answer to a [`TopUpRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopUp {
    /// Grow the task's slice by this much, out of the run's unallocated budget; the task runs
    /// again (a new attempt with the larger slice).
    Grant(Budget),
    /// Stop the task `stopped-limit` (and the run with it), as without `on_exhausted = "ask"`.
    Reject,
}

/// Answers to top-up requests by node id (`quorate resume --grant`, `--reject`). A request
/// of a node it does not name waits for a person; the run stops `waiting-approval` once
/// nothing else can move.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopUpPolicy(pub BTreeMap<String, TopUp>);

impl TopUpPolicy {
    /// The answer for node `node`, if one was given.
    #[must_use]
    pub fn decide(&self, node: &str) -> Option<TopUp> {
        self.0.get(node).copied()
    }
}

/// A top-up answer could not be applied. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopUpError {
    /// The task is not waiting for a top-up (it never asked, or was answered already).
    #[error("task {task} is not waiting for a top-up")]
    NotWaiting {
        /// The task.
        task: String,
    },
    /// The grant is more than the run has left to grant in `component` (after the grants
    /// before it, in task order).
    #[error(
        "the grant to task {task} asks {asked} {component}; the run has {left} {component} left \
         to grant"
    )]
    Exceeds {
        /// The task.
        task: String,
        /// The first component that does not fit.
        component: Component,
        /// What the grant asks in it.
        asked: u64,
        /// What is left in it.
        left: u64,
    },
}

impl SupervisorCore {
    /// Task `i` ran out of its slice in `component` (`needed` more) having spent `spent`: it
    /// parks waiting for a person with its request, unless [`SupervisorConfig::top_ups`]
    /// already answers it (an answer that does not fit leaves it waiting). `false` if the task
    /// stops instead (its node does not ask, or the run is stopping).
    pub(super) fn ask_top_up(
        &mut self,
        now: u64,
        i: u32,
        component: Component,
        needed: u64,
        spent: Budget,
    ) -> bool {
        if self.plan.node(i).on_exhausted != OnExhausted::Ask || !self.phase.dispatches() {
            return false;
        }
        if !self.transition(now, i, TaskEvent::ApprovalRequested) {
            return false;
        }
        let request = TopUpRequest {
            component,
            needed: needed.max(1),
            spent,
            granted: self.tasks[i as usize].granted,
            left: self.left_to_grant(),
        };
        self.record(
            now,
            Some(i),
            EventKind::TopUpRequested {
                request: Box::new(request.clone()),
            },
        );
        self.tasks[i as usize].park_top_up(request);
        let node = self.plan.node(i).id.to_string();
        if let Some(answer) = self.config.top_ups.decide(&node) {
            // An answer that does not fit leaves the task waiting (a shell checks answers with
            // `check_top_ups` before it gives them).
            let _ = self.decide_top_up(now, i, answer);
        }
        true
    }

    /// What the run has left to grant: its headroom for new slices.
    fn left_to_grant(&self) -> Budget {
        self.root.headroom_for_children().unwrap_or_default()
    }

    /// A person answered node `node`'s top-up request.
    ///
    /// # Errors
    /// [`TopUpError::NotWaiting`] (also for a node index out of range), or
    /// [`TopUpError::Exceeds`]: the grant is more than the run has left. Nothing changed.
    pub fn handle_top_up(&mut self, now: u64, node: u32, answer: TopUp) -> Result<(), TopUpError> {
        if self.finished() || node as usize >= self.tasks.len() {
            return Err(TopUpError::NotWaiting {
                task: node.to_string(),
            });
        }
        self.decide_top_up(now, node, answer)?;
        self.after_input(now);
        Ok(())
    }

    /// Applies `answer` to task `i`'s parked request: logs the decision, then grants (the task
    /// is made ready for a new attempt with the larger slice) or stops the task.
    pub(super) fn decide_top_up(
        &mut self,
        now: u64,
        i: u32,
        answer: TopUp,
    ) -> Result<(), TopUpError> {
        let task = self.plan.node(i).id.to_string();
        let Some(request) = self.tasks[i as usize].parked_top_up() else {
            return Err(TopUpError::NotWaiting { task });
        };
        let component = request.component;
        if let TopUp::Grant(extra) = answer {
            fits(&task, &extra, &self.left_to_grant())?;
        }
        // Logged before it takes effect: a log cut after it replays the grant (and the task,
        // still waiting there, is dispatched again); a cut before it loses nothing decided.
        self.record(now, Some(i), EventKind::TopUpDecided { answer });
        match answer {
            TopUp::Grant(_) => {
                self.apply_top_up_live(now, i, answer);
                // Approved, then back to ready: the attempt that ran out is over, so the task
                // runs again as a new one.
                self.transition(now, i, TaskEvent::Approved);
                self.transition(now, i, TaskEvent::Requeued);
                self.ready.push_back(i);
            }
            TopUp::Reject => {
                // Closed while its request still says what it spent (its attempt is over).
                let reason = StopReason::StoppedLimit { component };
                self.stop_with(now, i, TaskEvent::LimitReached, reason);
                self.apply_top_up_live(now, i, answer);
            }
        }
        Ok(())
    }

    /// The bookkeeping of a decision (live, and when a replay meets `top-up-decided`): the
    /// request is answered, and a grant grows the task's slice in the root account.
    ///
    /// # Errors
    /// The root account refused the grant (more than it has left, or no such slice): the
    /// request is answered all the same, and nothing was granted. A live decision was checked
    /// first ([`fits`]), so there this means the ledger and the core disagree; a replay meets it
    /// on a log that does not fit the plan's budget.
    pub(super) fn apply_top_up(&mut self, i: u32, answer: TopUp) -> Result<(), LedgerError> {
        let slot = &mut self.tasks[i as usize];
        slot.take_top_up();
        if let TopUp::Grant(extra) = answer {
            let id = AccountId::Task(self.by_id.id(i));
            slot.granted = self.root.top_up(AccountId::Root, id, extra)?;
            self.granted_total = self.granted_total.saturating_add(&extra);
        }
        Ok(())
    }

    /// [`apply_top_up`](Self::apply_top_up) for a live decision: a refusal is logged as
    /// `budget-refused` (the task runs on with the slice it had).
    fn apply_top_up_live(&mut self, now: u64, i: u32, answer: TopUp) {
        if let Err(e) = self.apply_top_up(i, answer) {
            let detail = format!("granting the top-up: {e}");
            self.record(now, Some(i), EventKind::BudgetRefused { detail });
        }
    }

    /// The tasks waiting for a top-up, with their requests, in plan order.
    #[must_use]
    pub fn top_up_requests(&self) -> Vec<(String, TopUpRequest)> {
        (0..self.tasks.len() as u32)
            .filter_map(|i| {
                let request = self.tasks[i as usize].parked_top_up()?;
                Some((self.plan.node(i).id.to_string(), request.clone()))
            })
            .collect()
    }

    /// Checks `answers` against the tasks waiting for a top-up, changing nothing: every grant
    /// to a waiting task must fit in what the run has left, after the grants before it (in
    /// plan order). Returns the nodes `answers` names that are not waiting for a top-up
    /// (their answers would be ignored).
    ///
    /// # Errors
    /// [`TopUpError::Exceeds`] for the first grant that does not fit.
    pub fn check_top_ups(&self, answers: &TopUpPolicy) -> Result<Vec<String>, TopUpError> {
        let mut left = self.left_to_grant();
        let waiting = self.top_up_requests();
        for (task, _) in &waiting {
            if let Some(TopUp::Grant(extra)) = answers.decide(task) {
                fits(task, &extra, &left)?;
                left = left.saturating_sub(&extra);
            }
        }
        Ok(answers
            .0
            .keys()
            .filter(|node| !waiting.iter().any(|(t, _)| t == *node))
            .cloned()
            .collect())
    }
}

/// A grant of `extra` to `task` fits in `left`, or [`TopUpError::Exceeds`] names the first
/// component it does not fit in.
fn fits(task: &str, extra: &Budget, left: &Budget) -> Result<(), TopUpError> {
    match extra.first_excess(left) {
        None => Ok(()),
        Some(c) => Err(TopUpError::Exceeds {
            task: task.to_string(),
            component: c,
            asked: extra.get(c),
            left: left.get(c),
        }),
    }
}

#[cfg(test)]
#[path = "top_up_tests.rs"]
mod tests;
