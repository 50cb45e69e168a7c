//! The attempt's input handlers: tool answers, timeouts, query answers, controls.

use quorate_protocols::{ActionEvent, ActionId, Budget, ResultKind};

use super::{cost_of, Attempt, Deps, Phase};
use crate::book::Resolved;
use crate::core::{Effect, InputError, ToolQuery};
use crate::gate::CallRequest;
use crate::tool::ToolAnswer;
use quorate_protocols::wire::{CallEvent, Outcome};
use quorate_state::{AccountId, ReservationId};

use crate::agent::{Observation, SubtaskResult};

/// The error class a lost answer is known by.
const LOST: &str = "lost";

impl Attempt {
    pub(crate) fn on_answer(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
        call: u64,
        answer: ToolAnswer,
    ) -> Result<(), InputError> {
        if let ToolAnswer::Lost { .. } = answer {
            // The request went out and its answer is lost: exactly a timeout.
            return self.on_timeout(d, action, call);
        }
        if self.newer_call_in_flight(action, call) {
            // An earlier call of this action (timed out, then retried) answers late: the retry
            // in flight settles the action, not this answer.
            return Err(InputError::NotAwaited { action });
        }
        if d.book.resolve(action, &answer)? == Resolved::DuplicateEffect {
            self.counts.duplicate_effects += 1;
        }
        let Phase::Calling { request, .. } = &self.phase else {
            return Err(InputError::NotAwaited { action });
        };
        if request.action != action {
            return Err(InputError::NotAwaited { action });
        }
        let Phase::Calling {
            request,
            reservation,
            started,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return Err(InputError::NotAwaited { action });
        };
        let (changed, error) = match &answer {
            ToolAnswer::Ok { changed, .. } => (*changed, None),
            ToolAnswer::Err { class, .. } => (false, Some(class.clone())),
            ToolAnswer::Lost { .. } => (false, Some(LOST.to_owned())),
        };
        let model = match &answer {
            ToolAnswer::Ok { output, .. } if super::transcript::is_model_call(&request.params) => {
                let latency = d.now.saturating_sub(started);
                Some(Box::new(self.transcript().answer(output, latency)))
            }
            _ => None,
        };
        self.calls.push(CallEvent::CallAnswered {
            action,
            changed,
            cost: Self::charge_of(cost_of(&answer)),
            error,
            model,
        });
        self.settle(d, Some(reservation), cost_of(&answer));
        self.absorb(d, &request, answer);
        self.run(d);
        Ok(())
    }

    /// The store preconditions checked before the write `action`: if they hold, the call
    /// starts; if not, the gate rejects it (the agent sees why) and the loop goes on.
    pub(crate) fn on_preconditions(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
        outcome: Result<(), quorate_state::PreconditionFailure>,
    ) -> Result<(), InputError> {
        let awaited = matches!(&self.phase, Phase::Checking(w) if w.request.action == action);
        if !awaited {
            return Err(InputError::NotAwaited { action });
        }
        let Phase::Checking(write) = std::mem::replace(&mut self.phase, Phase::Idle) else {
            return Err(InputError::NotAwaited { action });
        };
        let super::CheckedWrite {
            request,
            reservation,
            digest,
            retry,
        } = *write;
        match outcome {
            Ok(()) => self.launch(d, request, reservation, digest, retry),
            Err(observation) => {
                self.release(reservation);
                let reason = crate::gate::GateRejection::PreconditionFailed { observation };
                self.rejected(d, request, reason, retry);
            }
        }
        self.run(d);
        Ok(())
    }

    pub(crate) fn on_timeout(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
        call: u64,
    ) -> Result<(), InputError> {
        if self.newer_call_in_flight(action, call) {
            return Err(InputError::NotAwaited { action });
        }
        d.book.apply(action, ActionEvent::TimedOut)?;
        let awaited =
            matches!(&self.phase, Phase::Calling { request, .. } if request.action == action);
        if !awaited {
            return Err(InputError::NotAwaited { action });
        }
        let Phase::Calling {
            request,
            reservation,
            call,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return Err(InputError::NotAwaited { action });
        };
        self.counts.unknown += 1;
        self.calls.push(CallEvent::OutcomeUnknown { action });
        let Some(handle) = d.tools.handle(&request.tool) else {
            // The reservation stays open, so closing the attempt charges it in full: the
            // call's outcome is unknown.
            self.unregistered(d, &request.tool);
            return Ok(());
        };
        d.out.push_back(Effect::QueryTool(ToolQuery {
            task: self.envelope.task,
            action,
            tool: request.tool.clone(),
            handle,
            deadline: Self::deadline(d, &request.tool),
        }));
        self.phase = Phase::Querying {
            request,
            reservation: Some(reservation),
            call: Some(call),
        };
        Ok(())
    }

    pub(crate) fn on_query_answer(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
        answer: Option<ToolAnswer>,
    ) -> Result<(), InputError> {
        if let Some(ToolAnswer::Lost { message }) = &answer {
            // The query's own answer is lost: as if it had not answered in time.
            tracing::debug!(%action, %message, "query answer lost");
            return self.on_query_timeout(d, action);
        }
        match &answer {
            Some(answer) => {
                d.book.resolve(action, answer)?;
            }
            None => d.book.mark_absent(action),
        }
        let (request, reservation) = self.take_query(action)?;
        self.calls.push(CallEvent::Queried {
            action,
            found: answer.is_some(),
        });
        match answer {
            Some(answer) => {
                if matches!(answer, ToolAnswer::Ok { .. }) {
                    self.counts.recovered += 1;
                    self.calls.push(CallEvent::Recovered { action });
                }
                self.settle(d, reservation, cost_of(&answer));
                self.absorb(d, &request, answer);
            }
            None => {
                // Nothing committed: the call counts as made; the gate decides about a retry
                // (same id, same parameters, idempotent tools only). Approval, if any, was given.
                self.settle(d, reservation, Budget::ZERO);
                if !self.is_done() {
                    self.submit(d, request, true);
                }
            }
        }
        self.run(d);
        Ok(())
    }

    pub(crate) fn on_query_timeout(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
    ) -> Result<(), InputError> {
        let (request, _) = self.take_query(action)?;
        let observation = format!(
            "outcome of action {action} on {:?} is unknown: the tool did not answer the query",
            request.tool
        );
        self.finish(d, ResultKind::Suggestion, Outcome::Failed { observation });
        Ok(())
    }

    fn take_query(
        &mut self,
        action: ActionId,
    ) -> Result<(CallRequest, Option<ReservationId>), InputError> {
        let awaited =
            matches!(&self.phase, Phase::Querying { request, .. } if request.action == action);
        if !awaited {
            return Err(InputError::NotAwaited { action });
        }
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Querying {
                request,
                reservation,
                ..
            } => Ok((request, reservation)),
            _ => Err(InputError::NotAwaited { action }),
        }
    }

    /// `true` if the attempt is busy with another call of `action` than `call` (calling it
    /// again, or querying after that call timed out): then `call`'s answer or timeout is stale
    /// and must not settle the action.
    fn newer_call_in_flight(&self, action: ActionId, call: u64) -> bool {
        match &self.phase {
            Phase::Calling {
                request,
                call: current,
                ..
            } => request.action == action && *current != call,
            Phase::Querying {
                request,
                call: current,
                ..
            } => request.action == action && *current != Some(call),
            _ => false,
        }
    }

    /// Whether this attempt is waiting for a sub-task.
    pub(crate) fn has_open_children(&self) -> bool {
        self.open_children().next().is_some()
    }

    /// Sub-tasks this attempt is waiting for.
    pub(crate) fn open_children(&self) -> impl Iterator<Item = quorate_protocols::TaskId> + '_ {
        let children = match &self.phase {
            Phase::Delegating { children } => children.as_slice(),
            _ => &[],
        };
        children
            .iter()
            .filter(|(_, _, r)| r.is_none())
            .map(|(t, _, _)| *t)
    }

    /// A delegated sub-task ended with `report`, citing `evidence`. When the last one ends, the
    /// agent sees all results as one observation and the loop goes on.
    pub(crate) fn on_child_done(
        &mut self,
        d: &mut Deps<'_>,
        child: quorate_protocols::TaskId,
        report: quorate_protocols::wire::Report,
        evidence: Vec<quorate_protocols::EvidenceRef>,
    ) -> Result<(), InputError> {
        let Phase::Delegating { children } = &mut self.phase else {
            return Err(self.ended());
        };
        let Some(entry) = children
            .iter_mut()
            .find(|(t, _, r)| *t == child && r.is_none())
        else {
            return Err(InputError::UnknownTask { task: child });
        };
        let slice = self
            .account
            .children
            .get(&AccountId::Task(child))
            .copied()
            .unwrap_or_default();
        let spent = report.spent.min(&slice);
        let (outcome, evidence) = match report.outcome {
            quorate_protocols::wire::Outcome::Answer { value, receipts } => {
                self.receipts.extend(receipts);
                (Ok(value), evidence)
            }
            other => (Err(other.to_string()), Vec::new()),
        };
        entry.2 = Some(SubtaskResult {
            name: entry.1.clone(),
            outcome,
            spent,
            evidence,
        });
        let _ = self.account.child_closed(AccountId::Task(child), spent);
        self.counts += report.actions;
        self.calls.extend(report.calls);
        if children.iter().all(|(_, _, r)| r.is_some()) {
            let Phase::Delegating { children } = std::mem::replace(&mut self.phase, Phase::Idle)
            else {
                return Ok(());
            };
            let results = children.into_iter().filter_map(|(_, _, r)| r).collect();
            self.observation = Some(Observation::Delegated { results });
            self.run(d);
        }
        Ok(())
    }

    pub(crate) fn on_cancel(&mut self, d: &mut Deps<'_>) -> Result<(), InputError> {
        if self.is_done() {
            return Err(self.ended());
        }
        self.finish(d, ResultKind::Suggestion, Outcome::Cancelled);
        Ok(())
    }

    /// A delegated sub-task (below this attempt, at any depth) parked `action` for a human: this
    /// attempt, the one the supervisor knows, passes the request up as its own non-final reply
    /// and keeps waiting for its sub-tasks. The supervisor parks one action per task, so while
    /// a request is out, later ones wait here, and go up one at a time as decisions come back
    /// ([`approval_decided`](Self::approval_decided)).
    pub(crate) fn relay_approval(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
        reason: String,
        calls: Vec<CallEvent>,
    ) -> Result<(), InputError> {
        if !matches!(self.phase, Phase::Delegating { .. }) {
            return Err(self.ended());
        }
        // The sub-task's call steps go up with this attempt's next reply.
        self.calls.extend(calls);
        let relay = self.relay_mut();
        if relay.out.is_some() {
            relay.waiting.push_back((action, reason));
        } else {
            relay.out = Some(action);
            relay.quiet = false;
            self.send(
                d,
                ResultKind::Suggestion,
                Outcome::ApprovalRequested { action, reason },
            );
        }
        Ok(())
    }

    /// A sub-task's request this attempt passed up is out with the supervisor.
    pub(crate) fn relays_request(&self) -> bool {
        self.relay().is_some_and(|r| r.out.is_some())
    }

    /// The sub-task request this attempt passed up and has not yet followed with `Quiet`.
    pub(crate) fn unquiet_request(&self) -> Option<ActionId> {
        self.relay().filter(|r| !r.quiet).and_then(|r| r.out)
    }

    /// Nothing below this attempt works any more: the supervisor is told, after the request
    /// that is out ([`Outcome::Quiet`]).
    pub(crate) fn report_quiet(&mut self, d: &mut Deps<'_>) {
        let Some(action) = self.unquiet_request() else {
            return;
        };
        self.relay_mut().quiet = true;
        self.send(d, ResultKind::Suggestion, Outcome::Quiet { action });
    }

    /// The supervisor decided about `action`, a sub-task's request this attempt passed up: the
    /// next waiting request, if any, goes up now.
    pub(crate) fn approval_decided(&mut self, d: &mut Deps<'_>, action: ActionId) {
        if self.relay().and_then(|r| r.out) != Some(action) {
            return;
        }
        let relay = self.relay_mut();
        relay.out = None;
        if let Some((next, reason)) = relay.waiting.pop_front() {
            let _ = self.relay_approval(d, next, reason, Vec::new());
        }
    }

    /// A human rejected the call this attempt parked as `action`: the rejection is recorded in
    /// its book and the attempt stops waiting, without going on (the caller cancels it, with the
    /// task it belongs to).
    pub(crate) fn reject_parked(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
    ) -> Result<(), InputError> {
        let request = self.unpark(action)?;
        if d.book.propose(action, &request.tool, request.digest) {
            d.book.apply(action, ActionEvent::GateRejected)?;
        }
        Ok(())
    }

    /// The call parked as `action`, which stops being parked; `NotParked` if it is not.
    fn unpark(&mut self, action: ActionId) -> Result<CallRequest, InputError> {
        match std::mem::replace(&mut self.phase, Phase::Idle) {
            Phase::Parked { request } if request.action == action => Ok(request),
            other => {
                self.phase = other;
                Err(InputError::NotParked { action })
            }
        }
    }

    pub(crate) fn on_approval(
        &mut self,
        d: &mut Deps<'_>,
        action: ActionId,
        approved: bool,
    ) -> Result<(), InputError> {
        if approved {
            let request = self.unpark(action)?;
            self.submit(d, request, true);
            self.run(d);
        } else {
            self.reject_parked(d, action)?;
            self.finish(d, ResultKind::Suggestion, Outcome::Cancelled);
        }
        Ok(())
    }
}
