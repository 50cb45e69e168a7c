use quorate_protocols::{ActionId, Budget, ResultKind, TaskId};
use serde::Deserialize;
use serde_json::json;

use super::*;
use crate::testing::poll_once;
use crate::tool::{Tool, ToolAnswer};

#[derive(Deserialize)]
struct Node {
    script: Script,
}

const EXAMPLE: &str = r#"
script = [
  { do = "call", tool = "db.save", params = { id = 7 }, outcome = "timeout-after-commit", output = "saved", cost = { tokens = 10 }, needs-approval = true, repeat = 2, side-effect = "idempotent-write" },
  { do = "call", tool = "db.read" },
  { do = "answer", kind = "suggestion", value = { total = 3 } },
  { do = "fail", observation = "unreachable" },
  { do = "duplicate-reply" },
  { do = "late-reply" },
]
"#;

#[test]
fn the_documented_toml_format_parses() {
    let node: Node = toml::from_str(EXAMPLE).unwrap();
    let steps = &node.script.steps;
    assert_eq!(steps.len(), 6);
    let Step::Call(call) = &steps[0] else {
        panic!()
    };
    assert_eq!(call.tool, "db.save");
    assert_eq!(call.params, json!({"id": 7}));
    assert_eq!(call.outcome, CallOutcome::TimeoutAfterCommit);
    assert_eq!(call.cost, Budget::new(0, 0, 10, 0));
    assert!(call.needs_approval);
    assert_eq!(call.repeat, 2);
    let Step::Call(read) = &steps[1] else {
        panic!()
    };
    assert_eq!(
        (
            read.params.value(),
            read.outcome,
            read.repeat,
            read.output.value()
        ),
        (&json!({}), CallOutcome::Ok, 1, &serde_json::Value::Null)
    );
    assert_eq!(
        steps[2],
        Step::Answer(AnswerStep {
            kind: ResultKind::Suggestion,
            value: json!({"total": 3})
        })
    );
    assert_eq!(steps[4], Step::DuplicateReply {});
    assert_eq!(steps[5], Step::LateReply {});
    let defaulted: Node = toml::from_str(r#"script = [{ do = "answer", value = 1 }]"#).unwrap();
    assert!(
        matches!(&defaulted.script.steps[0], Step::Answer(a) if a.kind == ResultKind::VerifiedConclusion)
    );
}

#[test]
fn long_steps_can_use_array_of_tables() {
    let node: Node = toml::from_str(
        r#"
[[script]]
do = "call"
tool = "db.save"
params = { id = 7 }
outcome = "error"
output = "conflict"

[[script]]
do = "answer"
value = "done"
"#,
    )
    .unwrap();
    assert!(matches!(&node.script.steps[0], Step::Call(c) if c.outcome == CallOutcome::Error));
}

#[test]
fn unknown_fields_and_steps_are_refused() {
    let typo = r#"script = [{ do = "call", tool = "db.save", outcom = "ok" }]"#;
    let err = toml::from_str::<Node>(typo).err().unwrap().to_string();
    assert!(err.contains("outcom"), "{err}");
    assert!(toml::from_str::<Node>(r#"script = [{ do = "dance" }]"#).is_err());
    assert!(
        toml::from_str::<Node>(r#"script = [{ do = "call", tool = "t", outcome = "maybe" }]"#)
            .is_err()
    );
    // The steps without fields refuse fields too.
    for step in ["duplicate-reply", "late-reply"] {
        let extra = format!(r#"script = [{{ do = "{step}", extra = 2 }}]"#);
        let err = toml::from_str::<Node>(&extra).err().unwrap().to_string();
        assert!(err.contains("extra"), "{step}: {err}");
    }
}

#[test]
fn script_checks_name_the_step_or_tool_at_fault() {
    let bad: Node = toml::from_str(
        r#"script = [{ do = "answer", value = 1 }, { do = "call", tool = "DB Save" }]"#,
    )
    .unwrap();
    assert!(matches!(
        bad.script.tools(),
        Err(ScriptError::BadToolName { step: 1, .. })
    ));
    let zero: Node =
        toml::from_str(r#"script = [{ do = "call", tool = "a", repeat = 0 }]"#).unwrap();
    assert_eq!(
        zero.script.tools(),
        Err(ScriptError::ZeroRepeat { step: 0 })
    );
    let mut book = ScriptBook::new(World::new());
    let a: Node = toml::from_str(r#"script = [{ do = "call", tool = "a" }]"#).unwrap();
    let b: Node =
        toml::from_str(r#"script = [{ do = "call", tool = "a", side-effect = "read-only" }]"#)
            .unwrap();
    book.insert(quorate_protocols::NodeId::new("a").unwrap(), a.script)
        .unwrap();
    book.insert(quorate_protocols::NodeId::new("b").unwrap(), b.script)
        .unwrap();
    assert!(matches!(
        book.tools(),
        Err(ScriptError::ConflictingSideEffect { .. })
    ));
}

#[test]
fn scripted_tool_follows_the_plan_and_records_effects_per_action() {
    let world = World::new();
    let cap = quorate_protocols::Capability::new("db.save").unwrap();
    let tool = ScriptedTool::new(cap.clone(), SideEffect::IdempotentWrite, world.clone());
    assert_eq!((tool.name(), tool.capability()), ("db.save", cap.clone()));
    let a = ActionId::new(TaskId::from_u128(1), 0, 0);
    world.plan(
        a,
        CallOutcome::TimeoutAfterCommit,
        json!("v").into(),
        Budget::ZERO,
    );
    assert_eq!(
        poll_once(tool.call(a, json!({}).into())),
        None,
        "never answers"
    );
    assert_eq!(world.effects_for(&a), 1);
    let found = poll_once(tool.query(a)).unwrap();
    assert!(matches!(found, Some(ToolAnswer::Ok { output, .. }) if output == json!("v")));
    // A retry of an idempotent write answers ok and commits nothing more.
    assert_eq!(
        poll_once(tool.call(a, json!({}).into())),
        Some(ToolAnswer::Ok {
            output: json!("v").into(),
            cost: Budget::ZERO,
            changed: false
        })
    );
    assert_eq!(world.effects_for(&a), 1);

    let b = ActionId::new(TaskId::from_u128(1), 1, 0);
    world.plan(
        b,
        CallOutcome::OkButUnchanged,
        json!("same").into(),
        Budget::ZERO,
    );
    assert_eq!(
        poll_once(tool.call(b, json!({}).into())),
        Some(ToolAnswer::Ok {
            output: json!("same").into(),
            cost: Budget::ZERO,
            changed: false
        })
    );
    assert_eq!(world.effects_for(&b), 0);
    assert_eq!(poll_once(tool.query(b)), Some(None));

    let loud = ScriptedTool::new(cap, SideEffect::NonIdempotentWrite, world.clone());
    let c = ActionId::new(TaskId::from_u128(1), 2, 0);
    for _ in 0..2 {
        let _answer = poll_once(loud.call(c, json!({}).into()));
    }
    assert_eq!(
        world.effects_for(&c),
        2,
        "non-idempotent tools commit on every call"
    );
}

#[test]
fn a_latency_delays_the_answer_of_the_first_call_but_not_its_effect() {
    let script: Node = toml::from_str(
        r#"script = [{ do = "call", tool = "db.save", latency-ms = 40, output = "v" }, { do = "call", tool = "db.save", latency_ms = 5 }]"#,
    )
    .unwrap();
    let latencies: Vec<u64> = script
        .script
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Call(c) => Some(c.latency_ms),
            _ => None,
        })
        .collect();
    assert_eq!(latencies, [40, 5], "latency-ms, or latency_ms");

    let world = World::new();
    let cap = quorate_protocols::Capability::new("db.save").unwrap();
    let tool = ScriptedTool::new(cap, SideEffect::IdempotentWrite, world.clone());
    let a = ActionId::new(TaskId::from_u128(1), 0, 0);
    world.plan_call(
        a,
        PlannedCall {
            output: json!("v").into(),
            latency: std::time::Duration::from_millis(40),
            ..PlannedCall::default()
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let started = std::time::Instant::now();
        let answer = tool.call(a, json!({}).into());
        assert_eq!(
            world.effects_for(&a),
            1,
            "the effect commits when the call starts"
        );
        let answer = answer.await;
        assert!(started.elapsed() >= std::time::Duration::from_millis(40));
        assert!(
            matches!(answer, ToolAnswer::Ok { output, changed: true, .. } if output == json!("v"))
        );
        // A retry answers at once.
        assert!(poll_once(tool.call(a, json!({}).into())).is_some());
    });
}

/// An [`EffectStore`] in memory: what two processes' worlds would share.
#[derive(Debug, Default)]
struct SharedEffects(std::sync::Mutex<Vec<CommittedEffect>>);

impl EffectStore for SharedEffects {
    fn create(&self, effect: &CommittedEffect) -> bool {
        let mut effects = self.0.lock().unwrap();
        if effects.iter().any(|e| e.action == effect.action) {
            return false;
        }
        effects.push(effect.clone());
        true
    }
    fn again(&self, effect: &CommittedEffect) {
        self.0.lock().unwrap().push(effect.clone());
    }
    fn find(&self, action: &ActionId) -> Option<CommittedEffect> {
        let effects = self.0.lock().unwrap();
        effects.iter().find(|e| e.action == *action).cloned()
    }
}

#[test]
fn worlds_sharing_a_store_commit_an_action_once_and_see_each_others_effects() {
    let store = std::sync::Arc::new(SharedEffects::default());
    let (here, there) = (World::new(), World::new());
    here.set_store(store.clone());
    there.set_store(store.clone());
    let cap = quorate_protocols::Capability::new("db.save").unwrap();
    let tool = |world: &World, side| ScriptedTool::new(cap.clone(), side, world.clone());
    let a = ActionId::new(TaskId::from_u128(1), 0, 0);
    here.plan(
        a,
        CallOutcome::TimeoutAfterCommit,
        json!("v").into(),
        Budget::ZERO,
    );
    let idempotent = SideEffect::IdempotentWrite;
    assert_eq!(
        poll_once(tool(&here, idempotent).call(a, json!({}).into())),
        None
    );
    // The other process never called it, and finds it by id in the store.
    let found = poll_once(tool(&there, idempotent).query(a)).unwrap();
    assert!(matches!(found, Some(ToolAnswer::Ok { output, .. }) if output == json!("v")));
    // A call of the same action there commits nothing more.
    let again = poll_once(tool(&there, idempotent).call(a, json!({}).into())).unwrap();
    assert!(matches!(again, ToolAnswer::Ok { changed: false, .. }));
    assert_eq!((here.effects().len(), there.effects().len()), (1, 0));
    assert_eq!(store.0.lock().unwrap().len(), 1);
    // A non-idempotent tool called twice (the gate must prevent it) leaves both in the store.
    let b = ActionId::new(TaskId::from_u128(1), 1, 0);
    let loud = SideEffect::NonIdempotentWrite;
    let _first = poll_once(tool(&here, loud).call(b, json!({}).into()));
    let _second = poll_once(tool(&there, loud).call(b, json!({}).into()));
    let stored = store.0.lock().unwrap();
    assert_eq!(stored.iter().filter(|e| e.action == b).count(), 2);
}
