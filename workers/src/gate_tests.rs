//! Gate decisions, one rule per test.

use std::sync::Arc;

use quorate_protocols::{ActionEvent, Payload, TaskId};
use serde_json::json;

use super::*;
use crate::scripted::{ScriptedTool, World};
use crate::tool::{SideEffect, Tool, ToolAnswer, ToolFuture};

struct Strict;
impl Tool for Strict {
    fn name(&self) -> &str {
        "db.strict"
    }
    fn capability(&self) -> quorate_protocols::Capability {
        quorate_protocols::Capability::new("db.strict").unwrap()
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::NonIdempotentWrite
    }
    fn validate(&self, params: &serde_json::Value) -> Result<(), String> {
        params
            .get("id")
            .map(|_| ())
            .ok_or_else(|| "missing id".to_owned())
    }
    fn call(&self, _: ActionId, _: Payload) -> ToolFuture<ToolAnswer> {
        Box::pin(std::future::pending())
    }
}

struct Fixture {
    tools: ToolRegistry,
    caps: Capabilities,
    book: ActionBook,
    account: Account,
    task: TaskId,
}

impl Fixture {
    fn new(budget: Budget) -> Self {
        let mut tools = ToolRegistry::new();
        let save = Capability::new("db.save").unwrap();
        let drop = Capability::new("db.drop").unwrap();
        for cap in [save, drop] {
            let tool = ScriptedTool::new(cap, SideEffect::IdempotentWrite, World::new());
            tools.register(Arc::new(tool)).unwrap();
        }
        tools.register(Arc::new(Strict)).unwrap();
        Self {
            tools,
            caps: Capabilities::parse(["db.save", "db.strict"]).unwrap(),
            book: ActionBook::default(),
            account: Account::open(None, budget, Budget::ZERO).unwrap(),
            task: TaskId::from_u128(1),
        }
    }

    fn check(
        &mut self,
        tool: &str,
        params: serde_json::Value,
        approval: (bool, bool),
    ) -> GateDecision {
        let request = CallRequest::new(
            ActionId::new(self.task, 0, 0),
            tool.into(),
            params.into(),
            approval.0,
        );
        let ctx = GateContext {
            tools: &self.tools,
            capabilities: &self.caps,
            book: &self.book,
            account: &mut self.account,
            account_id: AccountId::Task(self.task),
        };
        Gate::check(&request, ctx, approval.1)
    }

    fn record(&mut self, tool: &str, params: serde_json::Value, events: &[ActionEvent]) {
        let action = ActionId::new(self.task, 0, 0);
        self.book.propose(action, tool, ParamDigest::of(&params));
        for e in events {
            self.book.apply(action, *e).unwrap();
        }
    }
}

use quorate_protocols::Capability;

fn rejected(d: &GateDecision) -> &GateRejection {
    match d {
        GateDecision::Reject { reason } => reason,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn refuses_unknown_tools_missing_capabilities_and_bad_params_without_reserving() {
    let mut f = Fixture::new(Budget::new(5, 5, 0, 0));
    let d = f.check("db.nope", json!({}), (false, false));
    assert!(matches!(rejected(&d), GateRejection::UnknownTool { tool } if tool == "db.nope"));
    let d = f.check("db.drop", json!({}), (false, false));
    assert!(matches!(rejected(&d),
        GateRejection::MissingCapability { capability, .. } if capability == "db.drop"));
    let d = f.check("db.strict", json!({}), (false, false));
    assert!(matches!(rejected(&d),
        GateRejection::InvalidParams { message, .. } if message == "missing id"));
    assert!(f.account.reservations.is_empty());
    assert!(f.book.iter().next().is_none());
}

#[test]
fn executes_with_a_reservation_and_refuses_when_the_slice_is_empty() {
    let mut f = Fixture::new(Budget::new(5, 1, 100, 0));
    let d = f.check("db.save", json!({"id": 1}), (false, false));
    assert!(matches!(d, GateDecision::Execute { retry: false, .. }));
    assert_eq!(f.account.reserved_total, Budget::new(0, 1, 100, 0));
    let d = f.check("db.save", json!({"id": 2}), (false, false));
    assert_eq!(
        rejected(&d),
        &GateRejection::BudgetExhausted {
            component: Component::ToolCalls,
            requested: 1,
            available: 0
        }
    );
}

#[test]
fn same_action_with_different_params_is_refused() {
    let mut f = Fixture::new(Budget::new(5, 5, 0, 0));
    f.record(
        "db.save",
        json!({"id": 1}),
        &[ActionEvent::GatePassed, ActionEvent::Started],
    );
    let d = f.check("db.save", json!({"id": 2}), (false, false));
    assert!(
        matches!(rejected(&d), GateRejection::ParamsChanged { recorded, proposed, .. }
        if *recorded == ParamDigest::of(&json!({"id": 1}))
            && *proposed == ParamDigest::of(&json!({"id": 2})))
    );
    // Same params while in flight: refused too, nothing reserved.
    let d = f.check("db.save", json!({"id": 1}), (false, false));
    assert!(matches!(rejected(&d), GateRejection::InFlight { .. }));
    assert!(f.account.reservations.is_empty());
}

#[test]
fn succeeded_actions_are_answered_from_the_record() {
    let mut f = Fixture::new(Budget::new(5, 5, 0, 0));
    f.record(
        "db.save",
        json!({"id": 1}),
        &[ActionEvent::GatePassed, ActionEvent::Started],
    );
    let ok = ToolAnswer::Ok {
        output: json!("row").into(),
        cost: Budget::ZERO,
        changed: true,
    };
    f.book.resolve(ActionId::new(f.task, 0, 0), &ok).unwrap();
    let d = f.check("db.save", json!({"id": 1}), (true, false));
    assert_eq!(
        d,
        GateDecision::ReturnRecorded {
            output: json!("row").into()
        }
    );
    assert!(f.account.reservations.is_empty());
}

#[test]
fn unknown_outcomes_are_queried_first_and_retried_only_if_idempotent() {
    let unknown = [
        ActionEvent::GatePassed,
        ActionEvent::Started,
        ActionEvent::TimedOut,
    ];
    let mut f = Fixture::new(Budget::new(5, 5, 0, 0));
    f.record("db.save", json!({"id": 1}), &unknown);
    let action = ActionId::new(f.task, 0, 0);
    let d = f.check("db.save", json!({"id": 1}), (false, false));
    assert_eq!(d, GateDecision::NeedInformation { query: action });
    f.book.mark_absent(action);
    let d = f.check("db.save", json!({"id": 1}), (false, false));
    assert!(matches!(d, GateDecision::Execute { retry: true, .. }));

    let mut f = Fixture::new(Budget::new(5, 5, 0, 0));
    f.record("db.strict", json!({"id": 1}), &unknown);
    f.book.mark_absent(action);
    let d = f.check("db.strict", json!({"id": 1}), (false, false));
    assert!(matches!(rejected(&d), GateRejection::NotIdempotent { .. }));
}

#[test]
fn approval_comes_before_any_reservation() {
    let mut f = Fixture::new(Budget::new(5, 5, 0, 0));
    let d = f.check("db.save", json!({}), (true, false));
    assert!(matches!(d, GateDecision::AwaitApproval { .. }));
    assert!(f.account.reservations.is_empty());
    let d = f.check("db.save", json!({}), (true, true));
    assert!(matches!(d, GateDecision::Execute { .. }));
}

#[test]
fn a_restored_action_is_queried_before_it_is_sent_again() {
    let mut f = Fixture::new(Budget::new(10, 5, 100, 100));
    let params = serde_json::json!({ "key": "orders/7" });
    let action = ActionId::new(f.task, 0, 0);
    // An action a crashed process had sent (its intent was kept): outcome unknown, so the gate
    // asks the tool about it instead of executing it.
    f.book
        .restore_unknown(action, "db.save", ParamDigest::of(&params));
    assert_eq!(
        f.check("db.save", params.clone(), (false, false)),
        GateDecision::NeedInformation { query: action }
    );
    // Restoring again changes nothing about a record the book already has.
    let saved = ToolAnswer::Ok {
        output: serde_json::json!("saved").into(),
        cost: Budget::ZERO,
        changed: true,
    };
    f.book.resolve(action, &saved).unwrap();
    f.book
        .restore_unknown(action, "db.save", ParamDigest::of(&params));
    assert_eq!(
        f.check("db.save", params, (false, false)),
        GateDecision::ReturnRecorded {
            output: serde_json::json!("saved").into()
        }
    );
}

/// A model tool: reserves `{"tokens": n, "cost": c}` of its parameters.
struct Model;
impl Tool for Model {
    fn name(&self) -> &str {
        "model.small"
    }
    fn capability(&self) -> quorate_protocols::Capability {
        quorate_protocols::Capability::new("model.small").unwrap()
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }
    fn reservation(&self, params: &serde_json::Value) -> Option<Budget> {
        let get = |k: &str| params[k].as_u64().unwrap_or(0);
        Some(Budget::new(0, 0, get("tokens"), get("cost")))
    }
    fn call(&self, _: ActionId, _: Payload) -> ToolFuture<ToolAnswer> {
        Box::pin(std::future::pending())
    }
}

#[test]
fn a_tools_own_reservation_is_held_and_one_that_does_not_fit_is_refused_naming_it() {
    let mut f = Fixture::new(Budget::new(5, 2, 100, 10));
    f.tools.register(Arc::new(Model)).unwrap();
    f.caps = Capabilities::parse(["model.small"]).unwrap();
    let d = f.check(
        "model.small",
        json!({"tokens": 60, "cost": 3}),
        (false, false),
    );
    assert!(matches!(d, GateDecision::Execute { .. }), "{d:?}");
    // One tool call and what the tool asked for; not everything left.
    assert_eq!(f.account.reserved_total, Budget::new(0, 1, 60, 3));
    let d = f.check("model.small", json!({"tokens": 41}), (false, false));
    assert_eq!(
        rejected(&d),
        &GateRejection::ReservationTooLarge {
            tool: "model.small".into(),
            component: Component::Tokens,
            requested: 41,
            available: 40
        }
    );
    assert_eq!(rejected(&d).class(), "rejected:reservation");
    let d = f.check("model.small", json!({"cost": 8}), (false, false));
    assert!(matches!(
        rejected(&d),
        GateRejection::ReservationTooLarge {
            component: Component::Cost,
            requested: 8,
            available: 7,
            ..
        }
    ));
    // Refused: nothing more was reserved.
    assert_eq!(f.account.reserved_total, Budget::new(0, 1, 60, 3));
    // Out of tool calls is the slice running out, as for any call.
    let d = f.check("model.small", json!({"tokens": 1}), (false, false));
    assert!(matches!(d, GateDecision::Execute { .. }));
    let d = f.check("model.small", json!({"tokens": 1}), (false, false));
    assert!(matches!(
        rejected(&d),
        GateRejection::BudgetExhausted {
            component: Component::ToolCalls,
            ..
        }
    ));
}
