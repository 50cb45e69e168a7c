//! Every bad input docs/cli.md lists gets the typed error (and message) it shows.
//! If one of these changes, update the "Bad inputs" table of docs/cli.md.

use quorate::protocols::{
    decode_envelope, encode_envelope, ActionId, AgentId, Budget, BudgetError, Component,
    DecodeError, Envelope, Limits, NodeSpec, ParamDigest, PlanError, PlanSpec, Role, RunId, Sender,
    TaskEvent, TaskId, TaskState, TaskTransitionError,
};
use quorate::state::{Begin, IdempotencyError, IdempotencyRegistry, MemoryStore};
use serde_json::json;

#[test]
fn cyclic_plan() {
    let spec = PlanSpec {
        nodes: vec![
            NodeSpec::named("fetch").after(&["review"]),
            NodeSpec::named("analyse").after(&["fetch"]),
            NodeSpec::named("review").after(&["analyse"]),
        ],
        ..PlanSpec::default()
    };
    let err = spec.validate().unwrap_err();
    assert!(matches!(err, PlanError::Cycle { .. }));
    assert_eq!(
        err.to_string(),
        "dependency cycle: fetch -> review -> analyse -> fetch"
    );
}

#[test]
fn budget_overflow() {
    let err = Budget::new(0, 0, u64::MAX, 0)
        .checked_add(&Budget::new(0, 0, 1, 0))
        .unwrap_err();
    assert_eq!(
        err,
        BudgetError::Overflow {
            component: Component::Tokens,
            left: u64::MAX,
            right: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "budget overflow in tokens: 18446744073709551615 + 1 exceeds u64::MAX"
    );
}

fn worker() -> Sender {
    Sender {
        agent: AgentId::from_u128(1),
        role: Role::Worker,
    }
}

/// `body` in an envelope from [`worker`] for task 2 of run 1.
fn envelope<T>(body: T) -> Envelope<T> {
    Envelope::new(
        RunId::from_u128(1),
        TaskId::from_u128(2),
        worker(),
        body,
        &mut quorate_protocols::IdSource::seeded(1),
    )
}

#[test]
fn oversized_envelope() {
    let env = envelope("x".repeat(70_000));
    let bytes = encode_envelope(&env);
    let err = decode_envelope::<String>(&bytes, &Limits::default(), worker()).unwrap_err();
    assert!(matches!(err, DecodeError::TooLarge { max: 65_536, .. }));
    assert_eq!(
        err.to_string(),
        format!("envelope is {} bytes; the limit is 65536", bytes.len())
    );
}

#[test]
fn unknown_field() {
    let env = envelope(1u32);
    let mut value = serde_json::to_value(&env).unwrap();
    value["grant_capability"] = json!("db.delete");
    let err = decode_envelope::<u32>(
        &serde_json::to_vec(&value).unwrap(),
        &Limits::default(),
        worker(),
    )
    .unwrap_err();
    assert!(matches!(err, DecodeError::Malformed { .. }));
    assert!(
        err.to_string().contains("unknown field `grant_capability`"),
        "{err}"
    );
}

#[test]
fn illegal_transition() {
    let err = TaskState::Completed.on(TaskEvent::Dispatched).unwrap_err();
    assert_eq!(
        err,
        TaskTransitionError::Terminal {
            state: TaskState::Completed,
            event: TaskEvent::Dispatched
        }
    );
    assert_eq!(
        err.to_string(),
        "task is terminal (completed); Dispatched is refused"
    );
}

#[test]
fn idempotency_key_reused_with_other_parameters() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let registry = IdempotencyRegistry::new(MemoryStore::new());
        let action = ActionId::new(TaskId::from_u128(9), 1, 0);
        let first = ParamDigest::of(&json!({"sku": 42, "qty": 1}));
        assert_eq!(
            registry.begin(action, "reserve", first).await.unwrap(),
            Begin::New
        );
        let err = registry
            .begin(
                action,
                "reserve",
                ParamDigest::of(&json!({"sku": 42, "qty": 5})),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, IdempotencyError::DigestMismatch { .. }));
        assert!(err
            .to_string()
            .starts_with(&format!("action {action} is bound to parameters ")));
    });
}

#[test]
fn self_loop_unknown_dependency_and_duplicate_id() {
    let refused = |nodes: Vec<NodeSpec>| {
        PlanSpec {
            nodes,
            ..PlanSpec::default()
        }
        .validate()
        .unwrap_err()
    };
    let e = refused(vec![NodeSpec::named("a").after(&["a"])]);
    assert!(matches!(e, PlanError::SelfLoop { .. }));
    assert_eq!(e.to_string(), "node a depends on itself");
    let e = refused(vec![NodeSpec::named("a").after(&["zz"])]);
    assert!(matches!(e, PlanError::UnknownDep { .. }));
    assert_eq!(e.to_string(), "node a depends on unknown node zz");
    let e = refused(vec![NodeSpec::named("a"), NodeSpec::named("a")]);
    assert!(matches!(e, PlanError::DuplicateId { .. }));
    assert_eq!(e.to_string(), "node id a is used more than once");
}

#[test]
fn node_budgets_over_the_plan_budget() {
    let err = PlanSpec {
        budget: Budget::steps(10),
        reserve: Budget::steps(3),
        nodes: vec![
            NodeSpec::named("a").with_budget(Budget::steps(4)),
            NodeSpec::named("b").with_budget(Budget::steps(4)),
        ],
        ..PlanSpec::default()
    }
    .validate()
    .unwrap_err();
    assert!(matches!(
        err,
        PlanError::BudgetExceeded {
            component: Component::Steps,
            requested: 11,
            available: 10
        }
    ));
    assert_eq!(
        err.to_string(),
        "reserve + node budgets need 11 steps but the plan has 10"
    );
}

#[test]
fn forged_sender() {
    let env = envelope(1u32);
    let other = Sender {
        agent: AgentId::from_u128(9),
        role: Role::Worker,
    };
    let err =
        decode_envelope::<u32>(&encode_envelope(&env), &Limits::default(), other).unwrap_err();
    assert!(matches!(err, DecodeError::ForgedSender { .. }));
    let text = err.to_string();
    assert!(
        text.starts_with("envelope claims sender ") && text.contains(" but arrived from "),
        "{text}"
    );
}

#[test]
fn node_asks_for_a_capability_the_run_lacks() {
    let err = PlanSpec {
        capabilities: quorate::protocols::Capabilities::parse(["db.read"]).unwrap(),
        nodes: vec![NodeSpec::named("a")
            .with_capabilities(quorate::protocols::Capabilities::parse(["db.delete"]).unwrap())],
        ..PlanSpec::default()
    }
    .validate()
    .unwrap_err();
    assert!(matches!(err, PlanError::CapabilityWidened { .. }));
    assert_eq!(
        err.to_string(),
        r#"node a asks for capabilities the run does not hold: ["db.delete"]"#
    );
}
