//! The execution gate: the only way from a proposal to a tool call.
//!
//! [`Gate::check`] is pure. It looks at the proposed call, the tool registry, the task's
//! delegated [`Capabilities`], the task's [`ActionBook`] and its budget [`Account`] — and at
//! nothing else. In particular it never sees the task's evidence text, so nothing a document
//! says can add a call or widen what the task may do.
//!
//! Checks, in order: the tool exists; its capability is delegated; the parameters validate;
//! the id is not bound to other parameters; the id's history allows running it (a succeeded
//! action is answered from the record, an unknown one is queried first and retried only if the
//! tool is idempotent); approval; budget (one tool call plus the attempt's remaining tokens and
//! cost are reserved, or what the tool asks for the call through
//! [`Tool::reservation`](crate::Tool::reservation), e.g. a model call's prompt estimate plus
//! `max_tokens`; settled with the actual cost afterwards, the rest released).

use quorate_protocols::{ActionId, ActionState, Budget, Capabilities, Component, ParamDigest};
use quorate_state::{Account, AccountId, LedgerError, ReservationId};

use crate::book::ActionBook;
use crate::tool::ToolRegistry;

/// A call an agent proposed, with its runtime-assigned id, for [`Gate::check`]. Built by
/// [`CallRequest::new`] only, its fields private: the parameters' digest is worked out there
/// once and the gate trusts it, so the parameters cannot change after it.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRequest {
    /// The id (task, step, intent version).
    pub(crate) action: ActionId,
    pub(crate) tool: String,
    /// Shared by the call, its receipt and the tool (never copied).
    pub(crate) params: quorate_protocols::Payload,
    /// `ParamDigest::of(&params)`, for the gate's idempotency check, the action book, the
    /// receipt and the journal.
    pub(crate) digest: ParamDigest,
    /// The agent asked for human approval.
    pub(crate) needs_approval: bool,
}

impl CallRequest {
    /// The call `action` of `tool` with `params`, and their digest.
    #[must_use]
    pub fn new(
        action: ActionId,
        tool: String,
        params: quorate_protocols::Payload,
        needs_approval: bool,
    ) -> Self {
        let digest = ParamDigest::of(&params);
        Self {
            action,
            tool,
            params,
            digest,
            needs_approval,
        }
    }
}

/// Why the gate refused a call. Nothing ran.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GateRejection {
    /// No tool has this name.
    #[error("no tool named {tool:?}")]
    UnknownTool {
        /// The proposed name.
        tool: String,
    },
    /// The task was not delegated the tool's capability.
    #[error("tool {tool:?} needs capability {capability:?}, which the task does not hold")]
    MissingCapability {
        /// The tool.
        tool: String,
        /// The capability it needs.
        capability: String,
    },
    /// The tool refused the parameters.
    #[error("tool {tool:?} refused the parameters: {message}")]
    InvalidParams {
        /// The tool.
        tool: String,
        /// Its reason.
        message: String,
    },
    /// The id is bound to other parameters; reusing it for another call is refused.
    #[error("action {action} is bound to parameters {recorded}, not {proposed}")]
    ParamsChanged {
        /// The id.
        action: ActionId,
        /// The digest recorded first.
        recorded: ParamDigest,
        /// The digest proposed now.
        proposed: ParamDigest,
    },
    /// The outcome is unknown, nothing was found committed, and the tool is not idempotent:
    /// sending again could apply the effect twice.
    #[error("action {action}: outcome unknown and tool {tool:?} is not idempotent; not retried")]
    NotIdempotent {
        /// The id.
        action: ActionId,
        /// The tool.
        tool: String,
    },
    /// The action already ended without an effect (failed or rejected).
    #[error("action {action} already ended ({state})")]
    ActionEnded {
        /// The id.
        action: ActionId,
        /// Its terminal state.
        state: ActionState,
    },
    /// The action is being executed right now.
    #[error("action {action} is in flight ({state})")]
    InFlight {
        /// The id.
        action: ActionId,
        /// Its state.
        state: ActionState,
    },
    /// The budget slice cannot cover the call.
    #[error("budget exhausted in {component}: {requested} requested, {available} available")]
    BudgetExhausted {
        /// The first component that does not fit.
        component: Component,
        /// What was asked.
        requested: u64,
        /// What was free.
        available: u64,
    },
    /// The tool's own reservation for this call (a model call: prompt estimate plus
    /// `max_tokens`, and its cost; see [`Tool::reservation`](crate::Tool::reservation)) does
    /// not fit what is left of the slice. Nothing was sent; the agent may ask for less.
    #[error(
        "tool {tool:?} reserves {requested} {component} for this call, but only {available} are left"
    )]
    ReservationTooLarge {
        /// The tool.
        tool: String,
        /// The first component that does not fit (tokens or cost).
        component: Component,
        /// What the call would reserve in it.
        requested: u64,
        /// What is left of the slice in it.
        available: u64,
    },
    /// The account refused for another reason (closed, arithmetic).
    #[error("budget account refused: {0}")]
    Ledger(LedgerError),
    /// A store precondition of the task (a key that must exist, be absent, or still be at the
    /// version the task was planned against) no longer holds when a write is about to run.
    #[error("precondition does not hold before the write: {observation}")]
    PreconditionFailed {
        /// The first failing check, as the store showed it.
        observation: quorate_state::PreconditionFailure,
    },
}

impl GateRejection {
    /// A short stable class name (for no-progress signatures and metrics).
    #[must_use]
    pub const fn class(&self) -> &'static str {
        match self {
            GateRejection::UnknownTool { .. } => "rejected:unknown-tool",
            GateRejection::MissingCapability { .. } => "rejected:missing-capability",
            GateRejection::InvalidParams { .. } => "rejected:invalid-params",
            GateRejection::ParamsChanged { .. } => "rejected:params-changed",
            GateRejection::NotIdempotent { .. } => "rejected:not-idempotent",
            GateRejection::ActionEnded { .. } => "rejected:action-ended",
            GateRejection::InFlight { .. } => "rejected:in-flight",
            GateRejection::BudgetExhausted { .. } => "rejected:budget",
            GateRejection::ReservationTooLarge { .. } => "rejected:reservation",
            GateRejection::Ledger(_) => "rejected:ledger",
            GateRejection::PreconditionFailed { .. } => "rejected:precondition",
        }
    }
}

/// What the gate decided.
#[must_use]
#[derive(Clone, Debug, PartialEq)]
pub enum GateDecision {
    /// Run the call; `reservation` is open on the task's account.
    Execute {
        /// Settle it with the actual cost when the call ends.
        reservation: ReservationId,
        /// Digest of the parameters.
        digest: ParamDigest,
        /// `true` if this re-sends an action whose outcome was unknown and found absent.
        retry: bool,
    },
    /// The action succeeded before: here is the recorded output; nothing runs again.
    ReturnRecorded {
        /// The recorded output.
        output: quorate_protocols::Payload,
    },
    /// Refused; nothing runs.
    Reject {
        /// Why.
        reason: GateRejection,
    },
    /// Needs a human's approval first; nothing is reserved yet.
    AwaitApproval {
        /// Why.
        reason: String,
    },
    /// The action's outcome is unknown: query the tool by id before deciding.
    NeedInformation {
        /// The action to query.
        query: ActionId,
    },
}

/// The gate's view of a task.
#[derive(Debug)]
pub struct GateContext<'a> {
    /// The tools.
    pub tools: &'a ToolRegistry,
    /// The task's delegated capabilities.
    pub capabilities: &'a Capabilities,
    /// The task's actions so far.
    pub book: &'a ActionBook,
    /// The attempt's budget account (a reservation is made on it for `Execute`).
    pub account: &'a mut Account,
    /// The account's id.
    pub account_id: AccountId,
}

/// The execution gate: [`Gate::check`] is the only way from a proposal to a tool call.
///
/// It is pure and looks only at the proposed call, the tools, the task's delegated
/// capabilities, its [`ActionBook`] and its budget [`Account`] — never at evidence text, so
/// nothing a document says can add a call or widen what the task may do. Checks, in order:
/// the tool exists; its capability is delegated; the parameters validate; the id is not bound
/// to other parameters; the id's history allows running it (succeeded: answered from the
/// record; unknown: queried first, then retried only if the tool is idempotent); approval;
/// budget (one tool call plus the remaining tokens and cost are reserved, or what the tool's
/// [`reservation`](crate::Tool::reservation) asks for, settled with the actual cost
/// afterwards, the rest released).
///
/// ```
/// use quorate_protocols::{ActionId, Budget, Capabilities, TaskId};
/// use quorate_state::{Account, AccountId};
/// use quorate_workers::{ActionBook, CallRequest, Gate, GateDecision, GateContext, GateRejection,
///     ToolRegistry};
///
/// let task = TaskId::from_u128(1);
/// let mut account = Account::open(None, Budget::new(5, 5, 0, 0), Budget::ZERO).unwrap();
/// let request = CallRequest::new(
///     ActionId::new(task, 0, 0),
///     "db.delete".into(),
///     serde_json::json!({}).into(),
///     false,
/// );
/// let decision = Gate::check(&request, GateContext {
///     tools: &ToolRegistry::new(),
///     capabilities: &Capabilities::none(),
///     book: &ActionBook::default(),
///     account: &mut account,
///     account_id: AccountId::Task(task),
/// }, false);
/// assert!(matches!(decision,
///     GateDecision::Reject { reason: GateRejection::UnknownTool { .. } }));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Gate;

impl Gate {
    /// Decides about `request`. `approved` says a human already approved this action.
    pub fn check(request: &CallRequest, ctx: GateContext<'_>, approved: bool) -> GateDecision {
        let reject = |reason| GateDecision::Reject { reason };
        let Some(tool) = ctx.tools.get(&request.tool) else {
            return reject(GateRejection::UnknownTool {
                tool: request.tool.clone(),
            });
        };
        let capability = tool.capability();
        if !ctx.capabilities.contains(&capability) {
            return reject(GateRejection::MissingCapability {
                tool: request.tool.clone(),
                capability: capability.to_string(),
            });
        }
        if let Err(message) = tool.validate(&request.params) {
            return reject(GateRejection::InvalidParams {
                tool: request.tool.clone(),
                message,
            });
        }
        let digest = request.digest;
        let action = request.action;
        let mut retry = false;
        if let Some(record) = ctx.book.get(&action) {
            if record.digest != digest {
                return reject(GateRejection::ParamsChanged {
                    action,
                    recorded: record.digest,
                    proposed: digest,
                });
            }
            match record.state {
                ActionState::Succeeded => {
                    return GateDecision::ReturnRecorded {
                        output: record.output.clone().unwrap_or_default(),
                    }
                }
                ActionState::OutcomeUnknown if !record.queried_absent => {
                    return GateDecision::NeedInformation { query: action }
                }
                ActionState::OutcomeUnknown if !tool.side_effect().may_retry() => {
                    return reject(GateRejection::NotIdempotent {
                        action,
                        tool: request.tool.clone(),
                    })
                }
                ActionState::OutcomeUnknown => retry = true,
                state @ (ActionState::Failed | ActionState::Rejected) => {
                    return reject(GateRejection::ActionEnded { action, state })
                }
                state @ (ActionState::Proposed
                | ActionState::Validated
                | ActionState::Executing) => {
                    return reject(GateRejection::InFlight { action, state })
                }
            }
        }
        if request.needs_approval && !approved {
            return GateDecision::AwaitApproval {
                reason: format!("tool {:?} asks for human approval", request.tool),
            };
        }
        #[cfg(feature = "mutants")]
        if quorate_protocols::mutant::is(quorate_protocols::mutant::Mutant::ChargeAfterCall) {
            let reservation = ReservationId(u64::MAX);
            return GateDecision::Execute {
                reservation,
                digest,
                retry,
            };
        }
        let headroom = match ctx.account.headroom_for_self() {
            Ok(h) => h,
            Err(e) => return reject(GateRejection::Ledger(e)),
        };
        // Every call, a model call included, is charged one tool call. What else is held
        // until the answer: the tool's own reservation, or everything left.
        let own = tool.reservation(&request.params);
        let amount = match own {
            Some(b) => Budget::new(0, 1, b.tokens, b.cost),
            None => Budget::new(0, 1, headroom.tokens, headroom.cost),
        };
        match ctx.account.reserve(ctx.account_id, amount) {
            Ok(reservation) => GateDecision::Execute {
                reservation,
                digest,
                retry,
            },
            Err(LedgerError::Insufficient {
                component,
                requested,
                available,
                ..
            }) => reject(match (own, component) {
                (Some(_), Component::Tokens | Component::Cost) => {
                    GateRejection::ReservationTooLarge {
                        tool: request.tool.clone(),
                        component,
                        requested,
                        available,
                    }
                }
                _ => GateRejection::BudgetExhausted {
                    component,
                    requested,
                    available,
                },
            }),
            Err(e) => reject(GateRejection::Ledger(e)),
        }
    }
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
