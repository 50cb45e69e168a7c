//! One task attempt: the agent loop. Private to the crate; [`crate::WorkerCore`] routes inputs
//! here and drains the effects it pushes.

mod call;
mod charge;
mod inputs;
mod transcript;

use std::collections::VecDeque;

use quorate_protocols::{
    ActionId, Budget, Envelope, Millis, ParamDigest, Payload, ResultKind, Sender,
};
use quorate_state::{Account, AccountId, ReservationId};
use serde_json::Value;

use crate::agent::{Agent, AgentContext, Faults, Observation, Proposal, SubtaskResult};
use crate::book::ActionBook;
use crate::core::{Effect, InputError, WorkerConfig};
use crate::gate::CallRequest;
use crate::progress::{ProgressDetector, ProgressVerdict};
use crate::tool::{ToolAnswer, ToolRegistry};
use quorate_protocols::wire::{
    ActionCounts, Assignment, CallEvent, Outcome, ProgressSignature, Receipt, Report,
};

impl Deps<'_> {
    /// Sends `reply`: out of the worker, or to the parent's attempt if it is a sub-task's.
    fn reply(&mut self, reply: Box<Envelope<Report>>) {
        if !self.parents.is_empty() && self.parents.contains_key(&reply.task) {
            self.routed.push_back(reply);
        } else {
            self.out.push_back(Effect::Reply(reply));
        }
    }
}

/// What an attempt needs from the core for one input.
pub(crate) struct Deps<'a> {
    pub(crate) now: Millis,
    pub(crate) me: Sender,
    pub(crate) config: &'a WorkerConfig,
    pub(crate) tools: &'a ToolRegistry,
    /// The driver can check store preconditions (it has the run's store).
    pub(crate) store: bool,
    pub(crate) book: &'a mut ActionBook,
    pub(crate) out: &'a mut VecDeque<Effect>,
    /// Delegated sub-task -> the task that delegated it: a sub-task's reply goes to `routed`,
    /// never out of the worker.
    pub(crate) parents: &'a ahash::AHashMap<quorate_protocols::TaskId, quorate_protocols::TaskId>,
    /// Replies of sub-tasks, for the core to hand to their parents, in order.
    pub(crate) routed: &'a mut VecDeque<Box<Envelope<Report>>>,
    /// Sub-task assignments to start (the core runs them as attempts of their own).
    pub(crate) spawn: &'a mut Vec<Envelope<Assignment>>,
    /// The worker's call counter: tags are unique across attempts, so a late answer of an
    /// earlier attempt's call is never mistaken for the answer of a later one.
    pub(crate) calls: &'a mut u64,
    /// Where reply dedupe keys and sub-task ids come from.
    pub(crate) ids: &'a mut quorate_protocols::IdSource,
    /// Boxes for the replies (handed over by the supervisor).
    pub(crate) reply_boxes: &'a mut quorate_protocols::BoxPool<Envelope<Report>>,
}

enum Phase {
    /// Ready to ask the agent.
    Idle,
    /// A call is in flight.
    Calling {
        request: CallRequest,
        reservation: ReservationId,
        /// The call's tag (see [`Effect::CallTool`]).
        call: u64,
        /// When it started (a model call's latency is traced).
        started: Millis,
    },
    /// The tool is being asked what became of `request.action`.
    Querying {
        request: CallRequest,
        reservation: Option<ReservationId>,
        /// The call of this attempt that timed out, if any; answers of any other call of the
        /// action are stale (the query settles it).
        call: Option<u64>,
    },
    /// Waiting for a human.
    Parked { request: CallRequest },
    /// The gate let a write through; the task's store preconditions are being checked before
    /// it runs. Boxed: only tasks with store preconditions come here, and every attempt would
    /// otherwise carry the room.
    Checking(Box<CheckedWrite>),
    /// Waiting for delegated sub-tasks: `(task, name, result)` in proposal order.
    Delegating {
        children: Vec<(quorate_protocols::TaskId, String, Option<SubtaskResult>)>,
    },
    /// The final reply went out.
    Done,
}

/// A write the gate let through, waiting for its task's store preconditions.
struct CheckedWrite {
    request: CallRequest,
    reservation: ReservationId,
    digest: ParamDigest,
    retry: bool,
}

pub(crate) struct Attempt {
    /// Boxed as it arrived: the assignment travels from the supervisor's dispatch to here
    /// without being copied. Once the attempt is over, the core moves the box out, to hand it
    /// back for reuse (see [`quorate_protocols::BoxPool`]; a field move, so the rest of the
    /// attempt is dropped where it lies instead of being copied out first).
    pub(crate) envelope: Box<Envelope<Assignment>>,
    agent: Box<dyn Agent>,
    faults: Faults,
    account: Account,
    account_id: AccountId,
    step: u32,
    environment: u64,
    observation: Option<Observation>,
    last_output: Option<Payload>,
    receipts: Vec<Receipt>,
    counts: ActionCounts,
    /// What happened to the attempt's calls since its last reply (see [`Report::calls`]).
    calls: Vec<CallEvent>,
    progress: ProgressDetector,
    phase: Phase,
    /// What few attempts need (boxed, as every attempt is moved around whole): sub-tasks'
    /// approval requests passed up, and what the trace was sent of model calls.
    rare: Option<Box<Rare>>,
}

/// The part of an attempt few attempts use.
#[derive(Debug, Default)]
struct Rare {
    /// Sub-tasks' approval requests passed up to the supervisor, one at a time.
    relay: Relay,
    /// What the trace was sent of the attempt's model calls.
    transcript: transcript::Transcript,
}

/// The approval request of a sub-task that is out with the supervisor, and the ones waiting
/// behind it (the supervisor parks one action per task).
#[derive(Debug, Default)]
struct Relay {
    out: Option<ActionId>,
    /// The supervisor was told that nothing else of the task works any more (`Quiet`) since
    /// `out` went up.
    quiet: bool,
    waiting: VecDeque<(ActionId, String)>,
}

impl Attempt {
    /// An attempt of the assigned task, on a fresh account of the task's slice (an attempt of
    /// a task that ran here before is then charged what the earlier attempts spent:
    /// [`Self::charge_earlier`]). Infallible and inlined, so the attempt (hundreds of bytes,
    /// its account included) is built where the caller keeps it instead of being moved through
    /// a `Result` (always inlined: called from two places, it was not, and its attempt was
    /// then copied out).
    #[inline(always)]
    pub(crate) fn new(
        envelope: Box<Envelope<Assignment>>,
        agent: Box<dyn Agent>,
        config: &WorkerConfig,
    ) -> Self {
        Self {
            account_id: AccountId::Task(envelope.task),
            account: Account::unreserved(envelope.payload.budget),
            faults: agent.faults(),
            envelope,
            agent,
            step: 0,
            environment: 0,
            observation: None,
            last_output: None,
            receipts: Vec::new(),
            counts: ActionCounts::default(),
            calls: Vec::new(),
            progress: ProgressDetector::new(config.no_progress_limit),
            phase: Phase::Idle,
            rare: None,
        }
    }

    /// The assignment this attempt runs.
    pub(crate) fn envelope(&self) -> &Envelope<Assignment> {
        &self.envelope
    }

    pub(crate) fn number(&self) -> u32 {
        self.envelope.attempt
    }

    /// The sub-task approval requests this attempt passed up, if it ever did.
    fn relay(&self) -> Option<&Relay> {
        self.rare.as_deref().map(|r| &r.relay)
    }

    /// [`Self::relay`], made if needed.
    fn relay_mut(&mut self) -> &mut Relay {
        &mut self.rare.get_or_insert_with(Box::default).relay
    }

    /// What the trace was sent of the attempt's model calls.
    fn transcript(&mut self) -> &mut transcript::Transcript {
        &mut self.rare.get_or_insert_with(Box::default).transcript
    }

    pub(crate) fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// Working on its own: about to ask its agent, or waiting on a tool (not on a human, not
    /// on sub-tasks, not done).
    pub(crate) fn is_working(&self) -> bool {
        matches!(
            self.phase,
            Phase::Idle | Phase::Calling { .. } | Phase::Querying { .. } | Phase::Checking(_)
        )
    }

    pub(crate) fn counts(&self) -> ActionCounts {
        self.counts
    }

    /// Everything the attempt spent or holds reserved (a reservation in flight may be spent).
    pub(crate) fn spent_or_reserved(&self) -> Budget {
        self.account
            .spent()
            .and_then(|s| Ok(s.checked_add(&self.account.reserved_total)?))
            .unwrap_or(self.account.limit)
    }

    fn ended(&self) -> InputError {
        InputError::AttemptEnded {
            task: self.envelope.task,
            attempt: self.envelope.attempt,
        }
    }

    /// Runs the loop until the attempt waits for something or ends. Every iteration charges
    /// one step first, so the loop ends within the step budget.
    pub(crate) fn run(&mut self, d: &mut Deps<'_>) {
        while matches!(self.phase, Phase::Idle) {
            let remaining = match self.charge_step() {
                Ok(remaining) => remaining,
                Err((component, needed)) => {
                    self.finish(
                        d,
                        ResultKind::Suggestion,
                        Outcome::LimitReached { component, needed },
                    );
                    return;
                }
            };
            let step = self.step;
            self.step += 1;
            let observation = self.observation.take();
            let payload = &self.envelope.payload;
            let ctx = AgentContext {
                task: self.envelope.task,
                node: &payload.node,
                attempt: self.envelope.attempt,
                state_version: self.envelope.state_version,
                goal: payload.goal.as_deref(),
                step,
                inputs: &payload.inputs,
                capabilities: &payload.capabilities,
                remaining,
                evidence_text: &payload.evidence_text,
                last_observation: observation.as_ref(),
            };
            match self.agent.propose(&ctx) {
                Proposal::Finish {
                    kind,
                    value,
                    evidence,
                } => {
                    // The attempt ends here: its receipts go with the answer.
                    let receipts = std::mem::take(&mut self.receipts);
                    let outcome = Outcome::Answer { value, receipts };
                    self.finish_citing(d, kind, outcome, evidence);
                }
                Proposal::Fail { observation } => {
                    self.finish(d, ResultKind::Suggestion, Outcome::Failed { observation });
                }
                Proposal::Delegate { subtasks } => {
                    match crate::delegate::plan(
                        &self.envelope,
                        &mut self.account,
                        self.account_id,
                        &subtasks,
                        d.ids,
                    ) {
                        Ok(children) => {
                            let mut list = Vec::with_capacity(children.len());
                            for child in children {
                                list.push((child.envelope.task, child.name, None));
                                d.spawn.push(child.envelope);
                            }
                            self.phase = Phase::Delegating { children: list };
                        }
                        Err(reason) => {
                            self.counts.rejected += 1;
                            self.calls.push(CallEvent::CallRejected {
                                tool: "delegate".to_string(),
                                reason: reason.to_string(),
                                class: "rejected:delegation".to_string(),
                            });
                            self.observation = Some(Observation::DelegationRefused { reason });
                        }
                    }
                }
                Proposal::CallTool {
                    tool,
                    params,
                    intent_version,
                    needs_approval,
                } => {
                    let action = ActionId::new(self.envelope.task, step, intent_version);
                    let request = CallRequest::new(action, tool, params, needs_approval);
                    self.submit(d, request, false);
                }
            }
        }
    }

    /// Turns a tool's answer into receipts, an observation and a progress verdict.
    fn absorb(&mut self, d: &mut Deps<'_>, request: &CallRequest, answer: ToolAnswer) {
        let action = request.action;
        let digest = request.digest;
        let tool = request.tool.clone();
        let (signature, observed) = match answer {
            ToolAnswer::Ok {
                output, changed, ..
            } => {
                // The tool's output, shared by the action book, the receipt, the agent's
                // observation and the answer an attempt may end with; the parameters are the
                // request's own.
                self.receipts.push(Receipt {
                    action,
                    tool: tool.clone(),
                    digest,
                    params: request.params.clone(),
                    output: output.clone(),
                    changed,
                });
                self.last_output = Some(output.clone());
                self.observation = Some(Observation::Output {
                    action,
                    tool: tool.clone(),
                    output: output.clone(),
                    changed,
                });
                if changed {
                    self.environment += 1;
                    self.progress.reset();
                    return;
                }
                // What the no-progress rule compares: the output of a call that changed nothing.
                (None, ParamDigest::of(&output))
            }
            // Never absorbed (the core takes the timeout path); should one come here, the
            // agent sees it as the error it is.
            ToolAnswer::Lost { message } => {
                let class = "lost".to_owned();
                let observed = ParamDigest::of(&Value::String(message.clone()));
                self.observation = Some(Observation::ToolError {
                    action,
                    tool: tool.clone(),
                    class: class.clone(),
                    message,
                });
                (Some(class), observed)
            }
            ToolAnswer::Err { class, message } => {
                let observed = ParamDigest::of(&Value::String(message.clone()));
                self.observation = Some(Observation::ToolError {
                    action,
                    tool: tool.clone(),
                    class: class.clone(),
                    message,
                });
                (Some(class), observed)
            }
        };
        let signature = ProgressSignature {
            tool,
            digest,
            environment: self.environment,
            error_class: signature,
        };
        self.check_progress(d, signature, observed);
    }

    fn check_progress(
        &mut self,
        d: &mut Deps<'_>,
        signature: ProgressSignature,
        observed: ParamDigest,
    ) {
        if let ProgressVerdict::Stop { signature, times } =
            self.progress.observe(signature, observed)
        {
            self.finish(
                d,
                ResultKind::Suggestion,
                Outcome::NoProgress { signature, times },
            );
        }
    }

    /// Settles a reservation with what the call cost (one tool call plus the tool's reported
    /// cost). An overrun ends the attempt: the slice is exhausted in that component.
    fn settle(&mut self, d: &mut Deps<'_>, reservation: Option<ReservationId>, cost: Budget) {
        let Some(reservation) = reservation else {
            return;
        };
        let actual = Self::charge_of(cost);
        if let Ok(settlement) = self.account.settle(self.account_id, reservation, actual) {
            if let Some(component) = settlement.overrun.first_excess(&Budget::ZERO) {
                let needed = settlement.overrun.get(component);
                self.finish(
                    d,
                    ResultKind::Suggestion,
                    Outcome::LimitReached { component, needed },
                );
            }
        }
    }

    /// What a call that cost `cost` (the tool's report) is charged: that plus the call itself.
    fn charge_of(cost: Budget) -> Budget {
        cost.saturating_add(&Budget::new(0, 1, 0, 0))
    }

    /// The reply's report; it takes the call events gathered since the previous reply (each
    /// travels once).
    fn report(&mut self, outcome: Outcome) -> Report {
        Report {
            outcome,
            spent: self.account.spent().unwrap_or(self.account.limit),
            actions: self.counts,
            calls: std::mem::take(&mut self.calls),
        }
    }

    /// A reply to the attempt's assignment, carrying `report`, in a box (a reused one if the
    /// worker has any).
    fn boxed_reply(
        &self,
        d: &mut Deps<'_>,
        kind: ResultKind,
        report: Report,
    ) -> Box<Envelope<Report>> {
        d.reply_boxes
            .boxed(self.envelope.reply(d.me, kind, report, d.ids))
    }

    /// A non-final reply (an approval request).
    fn send(&mut self, d: &mut Deps<'_>, kind: ResultKind, outcome: Outcome) {
        let report = self.report(outcome);
        let reply = self.boxed_reply(d, kind, report);
        d.reply(reply);
    }

    /// The final reply: closes the account (open reservations are charged in full: an unknown
    /// outcome is not free), then replies. Injected faults apply here.
    fn finish(&mut self, d: &mut Deps<'_>, kind: ResultKind, outcome: Outcome) {
        self.finish_citing(d, kind, outcome, Vec::new());
    }

    /// [`Attempt::finish`] with the agent's citations in the reply's `evidence`. The worker
    /// carries them as the agent gave them: acceptance (the supervisor's, or the peer's)
    /// resolves them against the call events it logged for the attempt, so a worker's word is
    /// not what makes an answer verified.
    fn finish_citing(
        &mut self,
        d: &mut Deps<'_>,
        kind: ResultKind,
        outcome: Outcome,
        evidence: Vec<quorate_protocols::EvidenceRef>,
    ) {
        if self.is_done() {
            return;
        }
        // Sub-tasks still open are charged their whole slice (their calls may have spent it).
        // (Most attempts never delegated: nothing to collect then.)
        if !self.account.children.is_empty() {
            let mut open: Vec<(AccountId, Budget)> = self
                .account
                .children
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect();
            open.sort_unstable_by_key(|&(k, _)| k);
            for (child, slice) in open {
                let _ = self.account.child_closed(child, slice);
            }
        }
        // A write still waiting for its preconditions never ran: nothing of it is charged.
        if let Phase::Checking(write) = &self.phase {
            self.release(write.reservation);
        }
        // A call in flight is aborted: its future is dropped, so a request still open (an
        // HTTP request to a model) is closed. Its outcome is unknown; its reservation stays
        // open, and closing the account charges it in full (no usage comes back).
        if let Phase::Calling {
            request,
            reservation,
            call,
            ..
        } = &self.phase
        {
            let action = request.action;
            let charged = self
                .account
                .reservations
                .get(reservation)
                .copied()
                .unwrap_or_default();
            let _refused = d
                .book
                .apply(action, quorate_protocols::ActionEvent::TimedOut);
            self.counts.unknown += 1;
            self.calls.push(CallEvent::CallAborted { action, charged });
            d.out.push_back(Effect::AbortCall {
                task: self.envelope.task,
                action,
                call: *call,
            });
        }
        let _unused = self.account.close(self.account_id);
        let cancelled = outcome == Outcome::Cancelled;
        let report = self.report(outcome);
        let mut reply = self.boxed_reply(d, kind, report);
        reply.evidence = evidence;
        if self.faults.duplicate_reply {
            d.reply(reply.clone());
        }
        d.reply(reply);
        if cancelled && self.faults.late_reply {
            let value = self.last_output.clone().unwrap_or_default();
            let receipts = self.receipts.clone();
            let late = self.report(Outcome::Answer { value, receipts });
            let late = self.boxed_reply(d, ResultKind::VerifiedConclusion, late);
            d.reply(late);
        }
        self.phase = Phase::Done;
    }
}

/// How much more a charge of `requested` needed than the `available` left (at least 1: it
/// was refused).
pub(super) fn shortfall(requested: u64, available: u64) -> u64 {
    requested.saturating_sub(available).max(1)
}

fn output_answer(output: Payload) -> ToolAnswer {
    ToolAnswer::Ok {
        output,
        cost: Budget::ZERO,
        changed: false,
    }
}

fn cost_of(answer: &ToolAnswer) -> Budget {
    match answer {
        ToolAnswer::Ok { cost, .. } => *cost,
        ToolAnswer::Err { .. } | ToolAnswer::Lost { .. } => Budget::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use quorate_protocols::wire::{Assignment, Report};
    use quorate_protocols::Envelope;

    /// Every task's attempt and its two envelopes move along the hot path whole; the figures of
    /// docs/performance.md (an 800-byte attempt, 376-byte envelopes) are these sizes, the
    /// attempt 32 bytes more since a call's request carries its parameters' digest, and the
    /// assignment 88 more since it holds up to two inputs inline (`wire::TaskInputs`).
    #[test]
    fn an_attempt_and_its_envelopes_keep_their_sizes() {
        let sizes = (
            std::mem::size_of::<super::Attempt>(),
            std::mem::size_of::<Envelope<Assignment>>(),
            std::mem::size_of::<Envelope<Report>>(),
        );
        // Exact: a change of size is a change of docs/performance.md's figures (and of the copies
        // on the hot path), so it should be seen, not pass under a loose bound.
        assert_eq!(sizes, (832, 464, 376), "attempt, assignment, report");
    }
}
