//! The star shell writes a drive's accepted results to the store as one batch
//! (`MemoryStore::create_many_now`) and answers the core afterwards. A result key some other
//! writer took first is answered `Kept` through that batch: the task keeps the stored value, its
//! dependents get it, and the log says so (`result-kept`).

use std::sync::Arc;

use quorate::coordinator::{result_key, run_star, EventKind};
use quorate::protocols::{Acceptance, EvidenceRef, NodeSpec, Payload, ResultKind};
use quorate::state::{MemoryStore, Seq};
use quorate::workers::{Agent, AgentContext, AgentRegistry, Proposal, ToolRegistry};
use serde_json::json;

mod support;

/// Answers its first input's value citing its inputs (`1`, a suggestion, where it has none). As
/// node `b`, it first writes `"planted"` under its own result key, found from the key of `a`'s
/// result.
struct Planting(Arc<MemoryStore<Payload>>);

impl Agent for Planting {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        if ctx.node.as_str() == "b" {
            let (a_key, _) = self
                .0
                .scan_now("result/")
                .into_iter()
                .find(|(k, _)| k.ends_with("/a"))
                .expect("a's result is stored before b runs");
            let b_key = format!("{}b", a_key.trim_end_matches('a'));
            assert!(self
                .0
                .create_now(b_key, json!("planted").into())
                .is_committed());
        }
        let value = match ctx.inputs.first() {
            Some(input) => input.value.clone(),
            None => json!(1).into(),
        };
        let evidence: Vec<EvidenceRef> = ctx
            .inputs
            .iter()
            .map(|i| EvidenceRef::Input {
                node: i.node.clone(),
            })
            .collect();
        Proposal::Finish {
            kind: if evidence.is_empty() {
                ResultKind::Suggestion
            } else {
                ResultKind::VerifiedConclusion
            },
            value,
            evidence,
        }
    }
}

#[test]
fn a_result_key_taken_before_the_batch_keeps_the_stored_value_for_the_task_and_its_dependents() {
    let suggestion = Acceptance {
        kinds: vec![ResultKind::Suggestion],
        ..Acceptance::default()
    };
    // Siblings of b, dispatched with it: their replies come back in the same batches as b's,
    // so b's commit is usually one of several in its store batch (not asserted: the test holds
    // either way).
    let mut nodes = vec![
        NodeSpec::named("a").with_acceptance(suggestion),
        NodeSpec::named("b").after(&["a"]),
        NodeSpec::named("c").after(&["b"]),
    ];
    nodes.extend((0..20).map(|i| NodeSpec::named(&format!("w{i}")).after(&["a"])));
    let plan = support::two_step_plan(nodes);
    let store = Arc::new(MemoryStore::new());
    let options = support::two_workers(Some(store.clone()));
    let agents = store.clone();
    let out = run_star(plan, options, move || {
        let store = agents.clone();
        (
            AgentRegistry::new().with_fallback(move |_: &quorate::workers::Assignment| {
                Box::new(Planting(store.clone())) as Box<dyn Agent>
            }),
            ToolRegistry::new(),
        )
    })
    .expect("the run runs");
    assert_eq!(
        out.report.stop_reason.as_deref(),
        Some("completed"),
        "{:?}",
        out.report
    );
    let run = out.report.run_id;
    let row = |name: &str| {
        out.report
            .tasks
            .iter()
            .find(|t| t.id.as_str() == name)
            .unwrap_or_else(|| panic!("{name} has a row"))
    };
    assert_eq!(row("a").result, Some(json!(1).into()));
    assert_eq!(
        row("b").result,
        Some(json!("planted").into()),
        "b keeps the stored value"
    );
    assert_eq!(
        row("c").result,
        Some(json!("planted").into()),
        "c got b's kept value"
    );
    for name in ["a", "b", "c", "w0", "w19"] {
        assert_eq!(
            store.get_now(&result_key(run, name)).map(|v| v.value),
            row(name).result.clone(),
            "{name}: the store holds the reported result"
        );
    }
    let kept: Vec<_> = out
        .log
        .read_now(run, Seq(0), usize::MAX)
        .into_iter()
        .filter_map(|(_, e)| match e.kind {
            EventKind::ResultKept { same, result, .. } => Some((e.task, same, result)),
            _ => None,
        })
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let (task, same, result) = &kept[0];
    assert_eq!(task.as_deref(), Some("b"));
    assert!(!same, "b had answered a's value, not the planted one");
    assert_eq!(result, &Payload::from(json!("planted")));
}
