//! `[fallback]` in peer mode: a failed store precondition switches the run to its fallback
//! plan, once, as in star mode (`coordinator/src/core/replan.rs`: the same checks, completed
//! tasks carried over, dropped tasks cancelled).
//!
//! What the peer adds is agreement on the plan version. The peer whose check failed proposes
//! version 2 by CAS on `plan/<run>` from absent ([`PeerEffect::ProposePlan`]), with the task
//! ids of the new plan (carried-over tasks keep theirs, new ones get ids it draws); the first
//! proposal written wins, and every peer, the losers included, switches to what the key holds
//! ([`PeerCore::handle_plan_version`]). A peer whose own check passed learns of the switch by
//! reading the key ([`PeerEffect::ReadPlan`]) when another peer's broadcast names a task it
//! does not know (kept until the read is answered, then handled again), and before it calls
//! itself done.
//!
//! The switch is decided before it is proposed, on the record of the node whose check failed,
//! when the fallback drops that node (BUG-5, docs/reliability.md): every peer checks a node when
//! it becomes ready in its own view, and another peer may have claimed it, run it and be about
//! to commit (or have committed) its terminal record under the first plan while this peer's
//! check fails. So the peer whose check failed first commits the node's record as *dropped by
//! version 2* ([`Terminal::dropped_by`]) by CAS on `state/<run>/<node>`, and:
//!
//! * if it wins, no peer can commit the node under the first plan any more: it proposes the
//!   switch; any peer that finds the dropped record when it commits the node (the claimant
//!   whose attempt ended, a stopping peer cancelling it, a peer adopting the record of a lost
//!   claim) cancels its attempt and proposes the same switch (CAS from absent: the first
//!   proposal stands), so the switch happens even if its first proposer never proposes;
//! * if it loses, another peer committed the node's record first (it ran the node, or
//!   cancelled it while stopping): that record is adopted like any other and the run keeps its
//!   plan.
//!
//! A dropped record never stops the run: it is not the task's end, the switch retires the
//! node. A switch on a peer that is stopping cancels the new plan's tasks, as its stop
//! cancelled the others.
//!
//! The switch is carried out once the effects queued before it are (in
//! [`PeerCore::poll_effect`], when the queue is empty): their answers name tasks by the old
//! plan's node indices, which the switch renumbers.

use std::sync::Arc;

use quorate_protocols::wire::Control;
use quorate_protocols::{Envelope, PlanSpec, TaskEvent, TaskState};

use super::PeerCore;
use crate::core::check_new_version;
use crate::event::{EventKind, Rejection};
use crate::peer::slot::PeerTask;
use crate::peer::{PeerEffect, PeerMsg, PlanVersion, Terminal};

/// One peer's side of the plan version: the fallback, and what it asked of `plan/<run>`.
#[derive(Debug)]
pub(super) struct PeerReplan {
    /// The plan to switch to when a store precondition fails (taken when used or refused).
    pub(super) fallback: Option<PlanSpec>,
    /// The plan version this peer runs.
    pub(super) version: u32,
    /// A proposal or read of `plan/<run>` is out.
    asking: bool,
    /// The node whose failed precondition asked for the switch, with the failure.
    cause: Option<(u32, String)>,
    /// The node whose failed precondition asks for a switch that drops it, with the failure,
    /// while this peer's dropped record of it is being committed (the switch is not decided).
    deciding: Option<(u32, String)>,
    /// This peer's own proposal (the store's record may be another peer's).
    proposed: Option<PlanVersion>,
    /// The version to switch to once the effects queued before it are carried out, and when
    /// it was read.
    pending: Option<(u64, PlanVersion)>,
    /// `plan/<run>` was read as not switched after every task settled here.
    confirmed: bool,
    /// Broadcasts naming tasks this peer does not know (maybe of a plan it has not switched to).
    stash: Vec<Envelope<PeerMsg>>,
    /// Tasks the switch dropped: their names and slots (a slice still to return, late replies).
    /// Effects name them by `plan.len() + k`.
    pub(super) retired: Vec<(Arc<str>, PeerTask)>,
}

impl Default for PeerReplan {
    fn default() -> Self {
        Self {
            fallback: None,
            version: 1,
            asking: false,
            cause: None,
            deciding: None,
            proposed: None,
            pending: None,
            confirmed: false,
            stash: Vec::new(),
            retired: Vec::new(),
        }
    }
}

impl PeerReplan {
    /// This peer may still switch plans (it has a fallback it did not use or refuse).
    pub(super) fn can_switch(&self) -> bool {
        self.fallback.is_some()
    }

    /// `true` if `task` is a task a switch dropped.
    pub(super) fn retired(&self, task: quorate_protocols::TaskId) -> bool {
        self.retired.iter().any(|(_, t)| t.id == task)
    }
}

impl PeerCore {
    /// A plan to switch to (once) when a store precondition fails; every peer of the run must
    /// get the same one.
    pub fn set_fallback_plan(&mut self, spec: PlanSpec) {
        self.replan.fallback = Some(spec);
    }

    /// The plan version this peer runs (1, then 2 after a switch to the fallback).
    pub fn plan_version(&self) -> u32 {
        self.replan.version
    }

    /// What `plan/<run>` holds, after this peer's [`PeerEffect::ProposePlan`] or
    /// [`PeerEffect::ReadPlan`]: a newer version is switched to (see the module docs); `None`
    /// (the run kept its first plan) lets a peer whose tasks all settled finish, and a
    /// broadcast kept for an unknown task is then refused as unauthorized.
    pub fn handle_plan_version(&mut self, now: u64, stored: Option<PlanVersion>) {
        self.replan.asking = false;
        #[cfg(feature = "mutants")]
        let stored = match (&self.replan.proposed, stored) {
            (Some(own), Some(_))
                if quorate_protocols::mutant::is(
                    quorate_protocols::mutant::Mutant::PeerIgnoresPlanVersion,
                ) =>
            {
                Some(own.clone())
            }
            (_, stored) => stored,
        };
        match stored {
            Some(record)
                if record.version > self.replan.version
                    && self.replan.can_switch()
                    && self.replan.pending.is_none() =>
            {
                self.replan.pending = Some((now, record));
            }
            Some(_) => {}
            None if self.replan.cause.is_some() => {
                // This peer's proposal found the key taken but empty: propose again.
                self.propose_switch(now);
            }
            None => {
                // What lets this peer finish is a read made once every task settled here; an
                // earlier one (for a broadcast) does not: the run may still switch after it.
                self.replan.confirmed = self.tasks.iter().all(PeerTask::settled);
                for env in std::mem::take(&mut self.replan.stash) {
                    let task = self.by_id.get(&env.task).copied();
                    self.reject(now, task, Rejection::Unauthorized);
                }
            }
        }
        self.after_input(now);
    }

    /// Node `node`'s store precondition failed (`observation`): switch to the fallback if there
    /// is one, else (or if the fallback is refused) the task fails.
    pub(super) fn precondition_failed(&mut self, now: u64, node: u32, observation: String) {
        if self.replan.cause.is_some()
            || self.replan.deciding.is_some()
            || self.replan.pending.is_some()
        {
            // A switch is under way: the node is checked again under the new plan.
            return;
        }
        let Some(spec) = self.replan.fallback.clone() else {
            self.fail(node, format!("precondition: {observation}"));
            return;
        };
        let states = self.replan_states(&spec);
        match check_new_version(&self.plan, |i| states[i as usize], spec) {
            Ok(plan) if plan.index_of(&self.plan.node(node).id).is_none() => {
                // The fallback drops the node: decide on its record first (module docs).
                self.decide_switch(node, observation);
            }
            Ok(_) => {
                self.replan.cause = Some((node, observation));
                self.propose_switch(now);
            }
            Err(e) => {
                self.replan.fallback = None;
                self.fail(
                    node,
                    format!("precondition: {observation}; replan refused: {e}"),
                );
            }
        }
    }

    /// Commits node `node`'s record as dropped by the next plan version: the switch is decided
    /// if it is written ([`dropped_known`](Self::dropped_known)), and not made if another
    /// record was there first (it is adopted; see [`apply`](Self::apply)).
    fn decide_switch(&mut self, node: u32, observation: String) {
        let t = &mut self.tasks[node as usize];
        t.committing = true;
        let record = Terminal {
            node,
            state: TaskState::Cancelled,
            result: None,
            evidence: Vec::new(),
            cause: None,
            by: self.index,
            dropped_by: Some(self.replan.version + 1),
        };
        self.replan.deciding = Some((node, observation));
        self.effects.push_back(PeerEffect::CommitTerminal(record));
    }

    /// Node `record.node`'s terminal record is a switch that drops it (this peer's own or one
    /// found in the store, at store version `version`): the switch is decided. This peer stops
    /// working on the node and proposes the switch (the first proposal stands; every peer follows
    /// what `plan/<run>` holds). A peer that gave its fallback up (its view refused it) cannot
    /// switch: it takes the record as the node's cancellation.
    pub(super) fn dropped_known(&mut self, now: u64, record: Terminal, version: u64) {
        let i = record.node;
        let Some(t) = self.tasks.get_mut(i as usize) else {
            return;
        };
        t.committing = false;
        t.commit_tries = 0;
        if t.settled() {
            return;
        }
        // Not claimed here any more before the switch retires it.
        t.claim_tried = true;
        let deciding = self.replan.deciding.take();
        if !self.replan.can_switch() {
            self.apply(now, record, version);
            self.after_input(now);
            return;
        }
        let t = &mut self.tasks[i as usize];
        if t.worker_live {
            t.worker_live = false;
            self.busy = false;
            self.control(i, Control::Cancel);
        }
        let to = record.dropped_by.unwrap_or(self.replan.version + 1);
        if self.replan.cause.is_none() {
            let why = deciding.map_or_else(|| format!("plan version {to} drops it"), |(_, o)| o);
            self.replan.cause = Some((i, why));
        }
        if self.replan.pending.is_none() && self.replan.version < to {
            self.propose_switch(now);
        }
        self.after_input(now);
    }

    /// A record of node `i` that is the task's end is known here: a switch this peer was
    /// deciding on the node is not made (the node ran, or was cancelled by a stop, first).
    pub(super) fn switch_not_decided(&mut self, i: u32) {
        if self.replan.deciding.as_ref().is_some_and(|(n, _)| *n == i) {
            self.replan.deciding = None;
        }
    }

    /// Each task's state as the check of a switch to `spec` judges it: a task completed here
    /// with a dependency that `spec` drops and that is not completed here was completed under
    /// `spec`'s version (another peer switched first and this peer took its record before it
    /// switched: under this plan the task could not have run), so it counts as not completed:
    /// its dependencies in this plan do not bind the new one.
    fn replan_states(&self, spec: &PlanSpec) -> Vec<TaskState> {
        let kept = |d: u32| spec.nodes.iter().any(|n| n.id == self.plan.node(d).id);
        (0..self.plan.len() as u32)
            .map(|i| {
                let state = self.tasks[i as usize].state;
                let newer =
                    state == TaskState::Completed
                        && self.plan.deps(i).iter().any(|&d| {
                            !kept(d) && self.tasks[d as usize].state != TaskState::Completed
                        });
                if newer {
                    TaskState::Pending
                } else {
                    state
                }
            })
            .collect()
    }

    /// Proposes the fallback as the next plan version (ids for its new tasks drawn here).
    fn propose_switch(&mut self, _now: u64) {
        let Some(spec) = self.replan.fallback.as_ref() else {
            return;
        };
        let tasks = spec
            .nodes
            .iter()
            .map(|n| match self.plan.index_of(&n.id) {
                Some(i) => self.tasks[i as usize].id,
                None => self.ids.task_id(),
            })
            .collect();
        self.replan.asking = true;
        let proposal = PlanVersion {
            version: self.replan.version + 1,
            tasks,
            by: self.index,
        };
        self.replan.proposed = Some(proposal.clone());
        self.effects.push_back(PeerEffect::ProposePlan(proposal));
    }

    /// Asks `plan/<run>` whether the run switched (once at a time).
    pub(super) fn read_plan(&mut self) {
        if !self.replan.asking && self.replan.pending.is_none() {
            self.replan.asking = true;
            self.effects.push_back(PeerEffect::ReadPlan);
        }
    }

    /// A broadcast names a task this peer does not know: kept until `plan/<run>` says whether
    /// the run switched to a plan that has it.
    pub(super) fn keep_for_switch(&mut self, env: Envelope<PeerMsg>) {
        self.replan.stash.push(env);
        self.read_plan();
    }

    /// Whether every task settled here may end the run: a peer that could still switch asks
    /// `plan/<run>` first (another peer may have switched while its own check passed).
    pub(super) fn plan_confirmed(&mut self) -> bool {
        if !self.replan.can_switch() || self.replan.confirmed {
            return true;
        }
        self.read_plan();
        false
    }

    /// Carries out a pending switch, once every effect queued before it was taken.
    pub(super) fn switch_if_pending(&mut self) {
        if self.done.is_some() {
            return;
        }
        if let Some((now, record)) = self.replan.pending.take() {
            self.switch(now, record);
        }
    }

    fn switch(&mut self, now: u64, record: PlanVersion) {
        let Some(spec) = self.replan.fallback.take() else {
            return;
        };
        let cause = self.replan.cause.take();
        let states = self.replan_states(&spec);
        let plan = match check_new_version(&self.plan, |i| states[i as usize], spec) {
            Ok(plan) if plan.len() == record.tasks.len() => plan,
            refused => {
                // Another peer switched to a plan this peer cannot take (its view of the
                // completed tasks differs, or the record does not fit the fallback).
                let why = match refused {
                    Err(e) => e.to_string(),
                    Ok(plan) => format!(
                        "plan/{} lists {} tasks; the fallback has {}",
                        self.run,
                        record.tasks.len(),
                        plan.len()
                    ),
                };
                if let Some((node, observation)) = cause {
                    let detail = format!("precondition: {observation}; replan refused: {why}");
                    self.fail(node, detail);
                }
                self.after_input(now);
                return;
            }
        };
        // Tasks the new plan drops: cancelled (their running attempt here told so), their
        // slice returned below.
        let dropped: Vec<u32> = (0..self.plan.len() as u32)
            .filter(|&i| plan.index_of(&self.plan.node(i).id).is_none())
            .collect();
        for &i in &dropped {
            let t = &mut self.tasks[i as usize];
            if t.worker_live {
                t.worker_live = false;
                self.busy &= !t.mine;
                self.control(i, Control::Cancel);
            }
            if !self.tasks[i as usize].settled() && !self.tasks[i as usize].state.is_terminal() {
                self.transition(now, i, TaskEvent::Cancelled);
            }
        }
        // Slots move over by node id; new nodes get fresh slots with the record's ids.
        let old_plan = std::mem::replace(&mut self.plan, plan);
        let mut old: Vec<Option<PeerTask>> = std::mem::take(&mut self.tasks)
            .into_iter()
            .map(Some)
            .collect();
        let mut old_text = std::mem::take(&mut self.evidence_text);
        let n = self.plan.len();
        let mut renumbered = vec![None; old.len()];
        for j in 0..n as u32 {
            let id = &self.plan.node(j).id;
            let (slot, text) = match old_plan.index_of(id) {
                Some(i) => {
                    renumbered[i as usize] = Some(j);
                    let mut slot = old[i as usize].take().expect("each slot moves once");
                    if let Some((r, _)) = &mut slot.terminal {
                        r.node = j;
                    }
                    (slot, std::mem::take(&mut old_text[i as usize]))
                }
                None => (
                    PeerTask::new(record.tasks[j as usize], self.plan.deps(j).len()),
                    Vec::new(),
                ),
            };
            self.tasks.push(slot);
            self.evidence_text.push(text);
        }
        for j in 0..n {
            let left = self
                .plan
                .deps(j as u32)
                .iter()
                .filter(|&&d| self.tasks[d as usize].state != TaskState::Completed)
                .count();
            let slot = &mut self.tasks[j];
            slot.deps_left = left;
            slot.checking = false;
        }
        self.by_id = self
            .tasks
            .iter()
            .enumerate()
            .map(|(j, t)| (t.id, j as u32))
            .collect();
        self.timeouts.rename(|i| renumbered[i as usize]);
        for (i, slot) in old.into_iter().enumerate() {
            if let Some(slot) = slot {
                let name = old_plan.shared_name(i as u32);
                self.replan.retired.push((name, slot));
            }
        }
        self.replan.version = record.version;
        let nodes = if self.describe_plan {
            crate::event::PlanNode::all(&self.plan)
        } else {
            Vec::new()
        };
        let kind = EventKind::Replanned {
            plan_version: self.replan.version,
            tasks: n,
            nodes,
        };
        self.record(now, None, kind);
        for k in 0..self.replan.retired.len() {
            self.close_slice(now, (n + k) as u32);
        }
        if let Some(cause) = self.stop_cause.clone() {
            // Stopping: the new plan's tasks are cancelled as the stop cancelled the others.
            for j in 0..n as u32 {
                self.propose(j, TaskState::Cancelled, Some(cause.clone()));
            }
        } else {
            for j in 0..n as u32 {
                let t = &self.tasks[j as usize];
                if t.state == TaskState::Pending && t.deps_left == 0 && !t.settled() {
                    self.make_ready(now, j);
                }
            }
        }
        for env in std::mem::take(&mut self.replan.stash) {
            self.take_broadcast(now, env);
        }
        self.after_input(now);
    }
}
