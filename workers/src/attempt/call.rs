//! A proposed call's way through the gate: the gate's decision carried out (run, answer from the
//! record, refuse, park for approval, ask what became of an earlier call), a write held for its
//! task's store preconditions, and the call started.

use quorate_protocols::{ActionEvent, Budget, ParamDigest, ResultKind};
use quorate_state::ReservationId;
use serde_json::Value;

use super::{output_answer, Attempt, CheckedWrite, Deps, Phase};
use crate::agent::Observation;
use crate::book::{ActionBook, BookError};
use crate::core::{Effect, ToolCall, ToolQuery};
use crate::gate::{CallRequest, Gate, GateContext, GateDecision, GateRejection};
use quorate_protocols::wire::{CallEvent, Outcome, ProgressSignature};

impl Attempt {
    /// Starts the call the gate let through (and whose preconditions, if it writes, hold).
    pub(super) fn launch(
        &mut self,
        d: &mut Deps<'_>,
        request: CallRequest,
        reservation: ReservationId,
        digest: ParamDigest,
        retry: bool,
    ) {
        let Some(handle) = d.tools.handle(&request.tool) else {
            self.release(reservation);
            self.unregistered(d, &request.tool);
            return;
        };
        if let Err(e) = Self::start(d.book, &request, digest, retry) {
            let observation = e.to_string();
            self.finish(d, ResultKind::Suggestion, Outcome::Failed { observation });
            return;
        }
        self.counts.executed += 1;
        if retry {
            self.calls.push(CallEvent::Retried {
                action: request.action,
            });
        }
        let model = if super::transcript::is_model_call(&request.params) {
            self.transcript()
                .request(request.action, &request.params)
                .map(Box::new)
        } else {
            None
        };
        self.calls.push(CallEvent::CallStarted {
            action: request.action,
            tool: request.tool.clone(),
            reserved: self
                .account
                .reservations
                .get(&reservation)
                .copied()
                .unwrap_or_default(),
            model,
        });
        *d.calls += 1;
        let call = *d.calls;
        d.out.push_back(Effect::CallTool(ToolCall {
            task: self.envelope.task,
            action: request.action,
            tool: request.tool.clone(),
            handle,
            params: request.params.clone(),
            digest: request.digest,
            deadline: Self::deadline(d, &request.tool),
            call,
        }));
        self.phase = Phase::Calling {
            request,
            reservation,
            call,
            started: d.now,
        };
    }

    /// When a call (or a query) of `tool` started now times out: after the tool's own
    /// [`timeout`](crate::Tool::timeout), or the worker's `call_timeout`.
    pub(super) fn deadline(d: &Deps<'_>, tool: &str) -> quorate_protocols::Millis {
        let timeout = d
            .tools
            .get(tool)
            .and_then(|t| t.timeout())
            .unwrap_or(d.config.call_timeout);
        d.now.saturating_add(quorate_protocols::millis(timeout))
    }

    /// The tool `tool` of a call the gate let through is not registered. The gate checks that
    /// first and a worker's registry never changes, so this is a broken configuration, not a
    /// call that committed nothing: the attempt fails saying so (nothing is retried, and no
    /// answer is made up).
    pub(super) fn unregistered(&mut self, d: &mut Deps<'_>, tool: &str) {
        let observation =
            format!("tool {tool:?} is not registered with this worker (a configuration error)");
        self.finish(d, ResultKind::Suggestion, Outcome::Failed { observation });
    }

    /// Gives back a reservation whose call never ran: nothing of it is charged.
    pub(super) fn release(&mut self, reservation: ReservationId) {
        let _ = self
            .account
            .settle(self.account_id, reservation, Budget::ZERO);
    }

    /// Puts `request` through the gate and carries out its decision.
    pub(super) fn submit(&mut self, d: &mut Deps<'_>, request: CallRequest, approved: bool) {
        let ctx = GateContext {
            tools: d.tools,
            capabilities: &self.envelope.payload.capabilities,
            book: d.book,
            account: &mut self.account,
            account_id: self.account_id,
        };
        let action = request.action;
        match Gate::check(&request, ctx, approved) {
            GateDecision::Execute {
                reservation,
                digest,
                retry,
            } => {
                let writes = d
                    .tools
                    .get(&request.tool)
                    .is_some_and(|t| t.side_effect().writes());
                let checks = &self.envelope.payload.preconditions;
                #[cfg(feature = "mutants")]
                let writes = writes
                    && !quorate_protocols::mutant::is(
                        quorate_protocols::mutant::Mutant::GateSkipsPreconditions,
                    );
                let guarded = writes
                    && checks
                        .iter()
                        .any(quorate_protocols::Precondition::needs_store);
                if guarded && !d.store {
                    // Nothing to check them against: they cannot be shown to hold.
                    self.release(reservation);
                    let observation = quorate_state::PreconditionFailure::NoStore;
                    let reason = GateRejection::PreconditionFailed { observation };
                    self.rejected(d, request, reason, retry);
                } else if guarded {
                    d.out.push_back(Effect::CheckPreconditions {
                        action,
                        checks: checks.clone(),
                    });
                    self.phase = Phase::Checking(Box::new(CheckedWrite {
                        request,
                        reservation,
                        digest,
                        retry,
                    }));
                } else {
                    self.launch(d, request, reservation, digest, retry);
                }
            }
            GateDecision::ReturnRecorded { output } => {
                self.calls.push(CallEvent::AnsweredFromRecord { action });
                self.absorb(d, &request, output_answer(output));
            }
            GateDecision::Reject { reason } => self.rejected(d, request, reason, false),
            GateDecision::AwaitApproval { reason } => {
                self.phase = Phase::Parked { request };
                self.send(
                    d,
                    ResultKind::Suggestion,
                    Outcome::ApprovalRequested { action, reason },
                );
            }
            GateDecision::NeedInformation { query } => {
                let Some(handle) = d.tools.handle(&request.tool) else {
                    self.unregistered(d, &request.tool);
                    return;
                };
                d.out.push_back(Effect::QueryTool(ToolQuery {
                    task: self.envelope.task,
                    action: query,
                    tool: request.tool.clone(),
                    handle,
                    deadline: Self::deadline(d, &request.tool),
                }));
                self.phase = Phase::Querying {
                    request,
                    reservation: None,
                    call: None,
                };
            }
        }
    }

    pub(super) fn start(
        book: &mut ActionBook,
        request: &CallRequest,
        digest: ParamDigest,
        retry: bool,
    ) -> Result<(), BookError> {
        let action = request.action;
        if retry {
            book.apply(action, ActionEvent::Retried)?;
        } else {
            book.propose(action, &request.tool, digest);
            book.apply(action, ActionEvent::GatePassed)?;
            book.apply(action, ActionEvent::Started)?;
        }
        Ok(())
    }

    /// The call of `request` will not run, for `reason`. A refused `retry` (the earlier call's
    /// outcome was unknown and a query found nothing) ends the action, like a retry the gate
    /// refuses for a non-idempotent tool.
    pub(super) fn rejected(
        &mut self,
        d: &mut Deps<'_>,
        request: CallRequest,
        reason: GateRejection,
        retry: bool,
    ) {
        if let GateRejection::BudgetExhausted {
            component,
            requested,
            available,
        } = reason
        {
            let needed = super::shortfall(requested, available);
            self.finish(
                d,
                ResultKind::Suggestion,
                Outcome::LimitReached { component, needed },
            );
            return;
        }
        self.counts.rejected += 1;
        self.calls.push(CallEvent::CallRejected {
            tool: request.tool.clone(),
            reason: reason.to_string(),
            class: reason.class().to_string(),
        });
        let action = request.action;
        let digest = request.digest;
        // Record the refusal; an id bound to other parameters keeps its original record. The
        // state machine decides; a refused transition leaves the record as it was.
        let _refused = if retry || matches!(reason, GateRejection::NotIdempotent { .. }) {
            d.book.apply(action, ActionEvent::FoundAbsent).err()
        } else if d.book.propose(action, &request.tool, digest) {
            d.book.apply(action, ActionEvent::GateRejected).err()
        } else {
            None
        };
        let signature = ProgressSignature {
            tool: request.tool,
            digest,
            environment: self.environment,
            error_class: Some(reason.class().to_owned()),
        };
        let observed = ParamDigest::of(&Value::String(reason.to_string()));
        self.observation = Some(Observation::Rejected { action, reason });
        self.check_progress(d, signature, observed);
    }
}
