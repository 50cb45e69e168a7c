//! Memory in plan files: the `[[memory.records]]` entries and the model-task field
//! `memory_scope`.
//!
//! Each entry becomes one observation written through `quorate-memory`'s write path
//! ([`quorate_memory::write`]) into one in-run [`MemoryView`]: its scope is the record's access
//! rule (the scope name is the memory's tenant, so scopes never see each other's records), its
//! `source` and `version` the record's provenance. A model task with `memory_scope = "NAME"`
//! reads that scope through [`quorate_memory::retrieve`] (ranked by the words its goal shares
//! with the records, under the model's context budget), and the chosen records go into its
//! prompt as quoted data whose source is the record's provenance (`memory:SOURCE@VERSION`).
//!
//! The memory is the plan's, for the run: model answers are not written back (in
//! `quorate-memory` a stored answer would be a derived record, never a new source).

use std::collections::BTreeSet;

use quorate_llm::Quoted;
use quorate_memory::{
    retrieve, write, ClaimSpec, FreshnessPolicy, MemoryObservation, MemoryView, Principal, Query,
    WriteError,
};
use quorate_protocols::{
    AccessRule, EvidenceStatus, MemoryKind, NodeId, RecordId, Source, Timestamp, Validity,
};
use serde::{Deserialize, Serialize};

/// The `[memory]` table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySection {
    /// The records, in file order.
    #[serde(default)]
    pub records: Vec<MemoryEntry>,
}

/// One `[[memory.records]]` entry: a claim about an object, from a source at a version, in a
/// scope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryEntry {
    /// The scope that may read it (a task's `memory_scope`).
    pub scope: String,
    /// What the claim is about (`sku-42/price`).
    pub object: String,
    /// The claim.
    pub claim: String,
    /// Where it came from (a document, a system, a person).
    pub source: String,
    /// The source's version of what was read (default: none given).
    #[serde(default)]
    pub version: String,
    /// Extra retrieval words besides those of `object` and `claim`.
    #[serde(default)]
    pub keywords: Vec<String>,
}

/// The records are all observed at this time, and read at it: a plan file has no clock.
const PLAN_TIME: Timestamp = Timestamp(0);

fn scope_rule(scope: &str) -> AccessRule {
    AccessRule {
        tenant: scope.to_owned(),
        principal: None,
        task: None,
    }
}

impl MemorySection {
    /// The scope names the records use.
    #[must_use]
    pub fn scopes(&self) -> BTreeSet<&str> {
        self.records.iter().map(|r| r.scope.as_str()).collect()
    }

    /// The records written one by one through the memory's write path, or the first refused
    /// (its index in `[[memory.records]]`, and why).
    pub fn view(&self) -> Result<MemoryView, (usize, WriteError)> {
        let mut view = MemoryView::new();
        for (i, entry) in self.records.iter().enumerate() {
            let n = u128::try_from(i).unwrap_or(u128::MAX / 2);
            let access = scope_rule(&entry.scope);
            let mut claim = ClaimSpec::new(
                RecordId::from_u128(2 * n + 2),
                MemoryKind::Semantic,
                entry.object.clone(),
                entry.claim.clone(),
                Validity::default(),
            );
            claim.keywords.clone_from(&entry.keywords);
            let obs = MemoryObservation {
                event: RecordId::from_u128(2 * n + 1),
                episode: format!("[[memory.records]] {i} of the plan file"),
                source: Source {
                    name: entry.source.clone(),
                    version: entry.version.clone(),
                },
                observed_at: PLAN_TIME,
                access: access.clone(),
                status: EvidenceStatus::Unverified,
                derived_from: Vec::new(),
                claims: vec![claim],
            };
            view = write(&view, &access, &obs).map_err(|e| (i, e))?.0;
        }
        Ok(view)
    }
}

/// What task `task` with goal `goal` retrieves from `scope` of `view` within `budget` tokens, as
/// quoted data whose source is each record's provenance.
#[must_use]
pub(super) fn recall(
    view: &MemoryView,
    scope: &str,
    task: &NodeId,
    goal: &str,
    budget: u64,
) -> Vec<Quoted> {
    let reader = Principal::new(scope, task.as_str(), None);
    let budget = u32::try_from(budget).unwrap_or(u32::MAX);
    let query = Query::new(goal, budget, PLAN_TIME).kinds(&[MemoryKind::Semantic]);
    retrieve(view, &reader, &query, &FreshnessPolicy::default())
        .chosen
        .into_iter()
        .map(|scored| {
            let rec = scored.record.record();
            let source = if rec.source.version.is_empty() {
                format!("memory:{}", rec.source.name)
            } else {
                format!("memory:{}@{}", rec.source.name, rec.source.version)
            };
            let mut text = format!("{}: {}", rec.object, rec.claim);
            if scored.record.effective_status() == EvidenceStatus::Conflicting {
                text.push_str("\n(another record in memory disagrees)");
            }
            Quoted::new(source, text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use quorate_llm::estimate::message_tokens;
    use quorate_llm::{ChatParams, LlmAgent};
    use quorate_protocols::{Budget, Capabilities, TaskId, Version};
    use quorate_workers::{Agent, AgentContext, Proposal};

    use crate::plan_file::{ModelError, PlanFile, PlanFileError};

    const PLAN: &str = r#"
[run]
budget = { steps = 10, tool_calls = 4, tokens = 2000 }
capabilities = ["model.local"]
attempt_timeout_ms = 90000

[models.local]
base_url = "http://127.0.0.1:8077/v1"
model = "m"
timeout_ms = 60000
context_tokens = CONTEXT

[[memory.records]]
scope = "pricing"
object = "sku-42/price"
claim = "CLAIM"
source = "erp"
version = "r19"

[[memory.records]]
scope = "payroll"
object = "alice/salary"
claim = "the price of alice is 90000 EUR a year"
source = "hr-db"

[[tasks]]
id = "ask"
agent = "llm"
model = "local"
memory_scope = "SCOPE"
goal = "What is the price of sku-42?"
capabilities = ["model.local"]
budget = { steps = 10, tool_calls = 4, tokens = 2000 }
"#;

    fn compile(context: u64, claim: &str, scope: &str) -> Result<PlanFile, PlanFileError> {
        let text = PLAN
            .replace("CONTEXT", &context.to_string())
            .replace("CLAIM", claim)
            .replace("SCOPE", scope);
        let file = PlanFile::parse(Path::new("p.toml"), &text)?;
        file.compile(Path::new("p.toml")).map(|_| file)
    }

    /// The messages of the first model call of task `ask`'s agent.
    fn first_prompt(file: &PlanFile) -> Vec<quorate_llm::Message> {
        let node = file.tasks[0].id.clone();
        let config = file.model_agents().remove(&node).expect("an agent for ask");
        let mut agent = LlmAgent::new(config);
        let caps = Capabilities::parse(["model.local"]).unwrap();
        let ctx = AgentContext {
            task: TaskId::from_u128(1),
            node: &node,
            attempt: 1,
            state_version: Version::new(0),
            goal: file.tasks[0].goal.as_deref(),
            step: 0,
            inputs: &[],
            capabilities: &caps,
            remaining: Budget::new(10, 4, 2000, 0),
            evidence_text: &[],
            last_observation: None,
        };
        match agent.propose(&ctx) {
            Proposal::CallTool { tool, params, .. } => {
                assert_eq!(tool, "model.local");
                serde_json::from_value::<ChatParams>(params.into_value())
                    .unwrap()
                    .messages
            }
            other => panic!("expected the model call, got {other:?}"),
        }
    }

    #[test]
    fn a_task_quotes_its_scopes_records_with_their_source_and_no_other_scopes() {
        let file = compile(1536, "12 EUR", "pricing").unwrap();
        let messages = first_prompt(&file);
        let user = messages[1].content.as_deref().unwrap();
        assert!(
            user.contains("<data source=\"memory:erp@r19\">\nsku-42/price: 12 EUR\n</data>"),
            "{user}"
        );
        // The payroll record shares words with the goal, but not the scope.
        assert!(!user.contains("90000"), "{user}");
        assert!(!user.contains("hr-db"), "{user}");

        let file = compile(1536, "12 EUR", "payroll").unwrap();
        let user = first_prompt(&file)[1].content.clone().unwrap();
        assert!(user.contains("memory:hr-db"), "{user}");
        assert!(!user.contains("12 EUR"), "{user}");
    }

    #[test]
    fn the_context_budget_cuts_a_record_that_does_not_fit() {
        let long = format!("12 EUR. {}", "note ".repeat(150));
        let budget = 300;
        let file = compile(budget, &long, "pricing").unwrap();
        let messages = first_prompt(&file);
        let user = messages[1].content.as_deref().unwrap();
        assert!(user.contains("memory:erp@r19"), "{user}");
        assert!(user.contains("[cut: "), "{user}");
        assert!(!user.contains(long.trim_end()), "{user}");
        let used: u64 = messages.iter().map(message_tokens).sum();
        assert!(used <= budget, "{used} > {budget}");

        let roomy = compile(4096, &long, "pricing").unwrap();
        let user = first_prompt(&roomy)[1].content.clone().unwrap();
        assert!(user.contains(long.trim_end()), "{user}");
    }

    #[test]
    fn an_unknown_scope_is_refused_naming_the_task() {
        let e = compile(1536, "12 EUR", "sales").unwrap_err();
        let text = e.to_string();
        match e {
            PlanFileError::Model { task, source, .. } => {
                assert_eq!(task.unwrap().as_str(), "ask");
                assert_eq!(
                    source,
                    ModelError::UnknownMemoryScope {
                        scope: "sales".into(),
                        known: vec!["payroll".into(), "pricing".into()],
                    }
                );
            }
            other => panic!("expected a model error, got {other}"),
        }
        assert!(text.contains("task ask: memory_scope \"sales\""), "{text}");
    }

    #[test]
    fn a_blank_claim_is_refused_by_the_memory() {
        let e = compile(1536, " ", "pricing").unwrap_err();
        assert!(
            matches!(
                e,
                PlanFileError::Model {
                    task: None,
                    source: ModelError::MemoryRecord { index: 0, .. },
                    ..
                }
            ),
            "{e}"
        );
    }
}
