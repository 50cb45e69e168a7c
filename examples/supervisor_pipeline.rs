//! A supervisor pipeline with your own agents and tools, written in Rust.
//!
//! ```text
//! gather-a --\
//!             +--> analyse --> merge --> review (publishes, with approval)
//! gather-b --/
//! ```
//!
//! What it shows:
//!
//! * a plan built in code ([`PlanSpec`] + [`NodeSpec`]): budgets, roles, capabilities and
//!   acceptance checks per node; `gather-a` and `gather-b` have no dependencies, so the
//!   supervisor runs them in parallel on its two workers;
//! * two custom [`Tool`]s: [`SourceTool`] (read-only, capability `docs.read`) serves documents
//!   from an in-memory map, and [`PublishTool`] (idempotent write, capability `report.publish`)
//!   publishes the final report, counts its effects and answers [`Tool::query`] so the runtime
//!   can recover a call whose outcome became unknown;
//! * custom [`Agent`]s registered by role: a gatherer that reads one source, an analyst that
//!   combines its inputs into a verified conclusion, a merger that drafts the report (titled
//!   after its plan node's goal, `AgentContext::goal`), and a
//!   reviewer that checks the draft and proposes the publish with `needs_approval: true`;
//! * the approval policy: [`ApprovalPolicy::All`] approves the publish. With
//!   [`ApprovalPolicy::None`] the request is rejected, the review task is cancelled and the run
//!   stops with `cancelled` (nothing is published); with [`ApprovalPolicy::Ask`] it stops with
//!   `waiting-approval`.
//!
//! Run it with:
//!
//! ```text
//! cargo run --example supervisor_pipeline
//! ```
//!
//! `tests/examples_run.rs` runs the same [`run`] and checks its outcome.

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use quorate::coordinator::{run_star, ApprovalPolicy, RunOptions, RunReport, SupervisorConfig};
use quorate::protocols::{
    Acceptance, ActionId, Budget, Capabilities, Capability, Check, EvidenceRef, NodeSpec, Payload,
    PlanSpec, ResultKind,
};
use quorate::workers::{
    Agent, AgentContext, AgentRegistry, Assignment, Observation, Proposal, SideEffect, Tool,
    ToolAnswer, ToolFuture, ToolRegistry,
};
use serde_json::{json, Value};

/// Where the reviewer publishes the report (and what the review's acceptance check reads back).
pub const REPORT_KEY: &str = "reports/actix-notes";

/// What a run of the pipeline leaves behind.
#[derive(Debug)]
pub struct PipelineOutcome {
    /// The supervisor's run report.
    pub report: RunReport,
    /// Effects the publish tool really applied (a repeated call with the same action id is not a
    /// second effect).
    pub publish_effects: u64,
    /// The published report body, if anything was published.
    pub published: Option<String>,
}

// ----- tools --------------------------------------------------------------------------------

/// A read-only tool: returns a document by name from an in-memory map.
///
/// Parameters: `{"source": "<name>"}`. Answers `{"source", "text"}`, or the error class
/// `not-found`.
#[derive(Debug, Clone)]
pub struct SourceTool {
    docs: Arc<BTreeMap<String, String>>,
}

impl SourceTool {
    /// A tool serving `docs` (name -> text).
    #[must_use]
    pub fn new(docs: BTreeMap<String, String>) -> Self {
        Self {
            docs: Arc::new(docs),
        }
    }
}

impl Tool for SourceTool {
    fn name(&self) -> &str {
        "docs.read"
    }

    fn capability(&self) -> Capability {
        Capability::new("docs.read").expect("valid capability name")
    }

    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }

    fn validate(&self, params: &Value) -> Result<(), String> {
        match params.get("source") {
            Some(Value::String(_)) => Ok(()),
            _ => Err("expected {\"source\": string}".to_string()),
        }
    }

    fn call(&self, _action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let source = params["source"].as_str().unwrap_or_default().to_string();
        let answer = match self.docs.get(&source) {
            Some(text) => ToolAnswer::Ok {
                output: json!({ "source": source, "text": text }).into(),
                cost: Budget::ZERO,
                // A read changes nothing in the world.
                changed: false,
            },
            None => ToolAnswer::Err {
                class: "not-found".to_string(),
                message: format!("no source named {source:?}"),
            },
        };
        Box::pin(std::future::ready(answer))
    }
}

#[derive(Debug, Default)]
struct PublishState {
    /// Answers by action id: a repeated call (or a query) is answered from here.
    answers: HashMap<ActionId, ToolAnswer>,
    /// Published bodies by key.
    documents: HashMap<String, String>,
    /// Version of each key (bumped by every effect).
    versions: HashMap<String, u64>,
}

/// An idempotent write: publishes a report body under a key.
///
/// Parameters: `{"key": string, "body": string}`. Answers `{"key", "version"}`. The same
/// [`ActionId`] never publishes twice: a repeat is answered from the record, and
/// [`Tool::query`] tells the runtime whether an action committed (used after a timeout).
/// Share one instance between all workers (it is the "world").
#[derive(Debug, Clone, Default)]
pub struct PublishTool {
    state: Arc<Mutex<PublishState>>,
    effects: Arc<AtomicU64>,
}

impl PublishTool {
    /// Effects applied so far.
    #[must_use]
    pub fn effects(&self) -> u64 {
        self.effects.load(Ordering::SeqCst)
    }

    /// The body published under `key`.
    #[must_use]
    pub fn document(&self, key: &str) -> Option<String> {
        let state = self.state.lock().expect("publish state lock");
        state.documents.get(key).cloned()
    }
}

impl Tool for PublishTool {
    fn name(&self) -> &str {
        "report.publish"
    }

    fn capability(&self) -> Capability {
        Capability::new("report.publish").expect("valid capability name")
    }

    fn side_effect(&self) -> SideEffect {
        SideEffect::IdempotentWrite
    }

    fn validate(&self, params: &Value) -> Result<(), String> {
        match (params.get("key"), params.get("body")) {
            (Some(Value::String(k)), Some(Value::String(b))) if !k.is_empty() && !b.is_empty() => {
                Ok(())
            }
            _ => Err("expected {\"key\": non-empty string, \"body\": non-empty string}".into()),
        }
    }

    fn call(&self, action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let mut state = self.state.lock().expect("publish state lock");
        if let Some(recorded) = state.answers.get(&action) {
            // Idempotent: the same action id does not publish again.
            return Box::pin(std::future::ready(recorded.clone()));
        }
        let key = params["key"].as_str().unwrap_or_default().to_string();
        let body = params["body"].as_str().unwrap_or_default().to_string();
        let version = {
            let v = state.versions.entry(key.clone()).or_insert(0);
            *v += 1;
            *v
        };
        state.documents.insert(key.clone(), body);
        self.effects.fetch_add(1, Ordering::SeqCst);
        let answer = ToolAnswer::Ok {
            output: json!({ "key": key, "version": version }).into(),
            cost: Budget::ZERO,
            changed: true,
        };
        state.answers.insert(action, answer.clone());
        Box::pin(std::future::ready(answer))
    }

    fn query(&self, action: ActionId) -> ToolFuture<Option<ToolAnswer>> {
        let state = self.state.lock().expect("publish state lock");
        Box::pin(std::future::ready(state.answers.get(&action).cloned()))
    }
}

// ----- agents -------------------------------------------------------------------------------

/// Reads one source (named after its node: `gather-a` reads `source-a`) and answers its text.
#[derive(Debug)]
pub struct Gatherer {
    source: String,
}

impl Gatherer {
    /// The gatherer for `assignment`.
    #[must_use]
    pub fn for_assignment(assignment: &Assignment) -> Self {
        let suffix = assignment
            .node
            .as_str()
            .strip_prefix("gather-")
            .unwrap_or(assignment.node.as_str());
        Self {
            source: format!("source-{suffix}"),
        }
    }
}

impl Agent for Gatherer {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        match ctx.last_observation {
            None => Proposal::CallTool {
                tool: "docs.read".to_string(),
                params: json!({ "source": self.source }).into(),
                intent_version: 0,
                needs_approval: false,
            },
            // The runtime observed the tool's output: that is evidence, not a guess.
            Some(Observation::Output { output, action, .. }) => Proposal::Finish {
                kind: ResultKind::VerifiedConclusion,
                value: output.clone(),
                // What the answer rests on: the call's output, as the runtime recorded it.
                evidence: vec![EvidenceRef::Action { action: *action }],
            },
            Some(other) => Proposal::Fail {
                observation: other.to_string(),
            },
        }
    }
}

/// Citations of every input of the task: an answer made from the inputs rests on them.
fn cite_inputs(ctx: &AgentContext<'_>) -> Vec<EvidenceRef> {
    ctx.inputs
        .iter()
        .map(|i| EvidenceRef::Input {
            node: i.node.clone(),
        })
        .collect()
}

/// Splits a document into its sentences ("claims").
fn claims(text: &str) -> Vec<String> {
    text.split('.')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| format!("{s}."))
        .collect()
}

/// Combines the gathered sources: claims made by at least two sources are corroborated.
#[derive(Debug, Default)]
pub struct Analyst;

impl Agent for Analyst {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        // claim -> sources that make it
        let mut by_claim: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for input in ctx.inputs {
            let source = input.value["source"].as_str().unwrap_or("?").to_string();
            for claim in claims(input.value["text"].as_str().unwrap_or_default()) {
                by_claim.entry(claim).or_default().push(source.clone());
            }
        }
        if by_claim.is_empty() {
            return Proposal::Fail {
                observation: "no claims in the gathered sources".to_string(),
            };
        }
        let (corroborated, single): (Vec<_>, Vec<_>) =
            by_claim.into_iter().partition(|(_, s)| s.len() >= 2);
        let entry =
            |(claim, sources): (String, Vec<String>)| json!({"claim": claim, "sources": sources});
        Proposal::Finish {
            kind: ResultKind::VerifiedConclusion,
            value: json!({
                "sources": ctx.inputs.len(),
                "corroborated": corroborated.into_iter().map(entry).collect::<Vec<_>>(),
                "single_source": single.into_iter().map(entry).collect::<Vec<_>>(),
            })
            .into(),
            evidence: cite_inputs(ctx),
        }
    }
}

/// Drafts the report from the analysis: corroborated claims first, then the rest.
#[derive(Debug, Default)]
pub struct Merger;

impl Agent for Merger {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let Some(analysis) = ctx.inputs.first().map(|i| &i.value) else {
            return Proposal::Fail {
                observation: "merge has no analysis to merge".to_string(),
            };
        };
        let line = |c: &Value| {
            let sources: Vec<&str> = c["sources"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            format!(
                "- {} [{}]",
                c["claim"].as_str().unwrap_or("?"),
                sources.join(", ")
            )
        };
        let section = |field: &str| -> Vec<String> {
            analysis[field]
                .as_array()
                .map(|a| a.iter().map(line).collect())
                .unwrap_or_default()
        };
        let mut body = vec!["Corroborated:".to_string()];
        body.extend(section("corroborated"));
        body.push("Single source:".to_string());
        body.extend(section("single_source"));
        // The plan node's goal (handed over with the assignment) names the report.
        let title = ctx.goal.unwrap_or("Report");
        Proposal::Finish {
            kind: ResultKind::VerifiedConclusion,
            value: json!({ "title": title, "body": body.join("\n") }).into(),
            evidence: cite_inputs(ctx),
        }
    }
}

/// Reviews the draft and publishes it, asking a human first.
#[derive(Debug, Default)]
pub struct Reviewer;

impl Agent for Reviewer {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        match ctx.last_observation {
            None => {
                let draft = ctx.inputs.first().map(|i| &i.value);
                let body = draft.and_then(|d| d["body"].as_str()).unwrap_or_default();
                if !body.contains("Corroborated:\n- ") {
                    return Proposal::Fail {
                        observation: "review: the draft has no corroborated claim".to_string(),
                    };
                }
                let title = draft.and_then(|d| d["title"].as_str()).unwrap_or("Report");
                Proposal::CallTool {
                    tool: "report.publish".to_string(),
                    params: json!({ "key": REPORT_KEY, "body": format!("# {title}\n{body}") })
                        .into(),
                    intent_version: 0,
                    // The worker parks the call; the supervisor's approval policy decides.
                    needs_approval: true,
                }
            }
            // Finish with the runtime-issued receipt as the proof; the node's acceptance check
            // (`read-back-changed`) reads the receipt, not this value.
            Some(Observation::Output { output, action, .. }) => Proposal::Finish {
                kind: ResultKind::ExecutionReceipt,
                value: output.clone(),
                evidence: vec![EvidenceRef::Action { action: *action }],
            },
            Some(other) => Proposal::Fail {
                observation: other.to_string(),
            },
        }
    }
}

// ----- the plan and the run -----------------------------------------------------------------

/// A node with a role, capabilities and a budget of `steps` steps and `tool_calls` tool calls.
fn node(id: &str, role: &str, caps: &[&str], steps: u64, tool_calls: u64) -> NodeSpec {
    let mut node = NodeSpec::named(id).with_budget(Budget::new(steps, tool_calls, 0, 0));
    node.role = role.into();
    node.capabilities = Capabilities::parse(caps.iter().copied()).expect("valid capabilities");
    node
}

/// The plan: two parallel gathers, then analyse, merge and review.
pub fn plan() -> PlanSpec {
    let gather_a = node("gather-a", "gatherer", &["docs.read"], 3, 1);
    let gather_b = node("gather-b", "gatherer", &["docs.read"], 3, 1);
    let mut analyse = node("analyse", "analyst", &[], 2, 0).after(&["gather-a", "gather-b"]);
    analyse.acceptance.checks = vec![Check::FieldPresent {
        field: "/corroborated/0".to_string(),
    }];
    let mut merge = node("merge", "merger", &[], 2, 0)
        .after(&["analyse"])
        .with_goal("Notes on actix");
    merge.acceptance.checks = vec![
        Check::NonEmpty,
        Check::FieldPresent {
            field: "/body".to_string(),
        },
    ];
    let mut review = node("review", "reviewer", &["report.publish"], 3, 1).after(&["merge"]);
    // Only a receipt of a write that really changed the report completes the review.
    review.acceptance = Acceptance {
        kinds: vec![ResultKind::ExecutionReceipt],
        checks: vec![Check::ReadBackChanged {
            key: REPORT_KEY.to_string(),
        }],
    };
    PlanSpec {
        budget: Budget::new(20, 5, 0, 0),
        reserve: Budget::steps(2),
        capabilities: Capabilities::parse(["docs.read", "report.publish"])
            .expect("valid capabilities"),
        nodes: vec![gather_a, gather_b, analyse, merge, review],
    }
}

/// The documents the gatherers read.
fn sources() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "source-a".to_string(),
            "An actor handles one message at a time. Mailboxes are bounded. \
             Supervisors restart failed actors."
                .to_string(),
        ),
        (
            "source-b".to_string(),
            "Supervisors restart failed actors. Addresses are cheap to clone. \
             An actor handles one message at a time."
                .to_string(),
        ),
    ])
}

/// Runs the pipeline with approval policy `approvals` and prints a summary.
pub fn run_with(approvals: ApprovalPolicy) -> Result<PipelineOutcome, Box<dyn Error>> {
    let plan = plan().validate()?;
    let docs = SourceTool::new(sources());
    // One publish tool shared by every worker: it is the outside world the effect lands in.
    let publish = PublishTool::default();
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers: 2,
            approvals,
            ..SupervisorConfig::default()
        },
        ..RunOptions::default()
    };
    let publish_for_workers = publish.clone();
    let output = run_star(plan, options, move || {
        let agents = AgentRegistry::new()
            .with_role("gatherer", |a: &Assignment| {
                Box::new(Gatherer::for_assignment(a)) as Box<dyn Agent>
            })
            .with_role("analyst", |_: &Assignment| {
                Box::new(Analyst) as Box<dyn Agent>
            })
            .with_role("merger", |_: &Assignment| {
                Box::new(Merger) as Box<dyn Agent>
            })
            .with_role("reviewer", |_: &Assignment| {
                Box::new(Reviewer) as Box<dyn Agent>
            });
        let mut tools = ToolRegistry::new();
        tools
            .register(Arc::new(docs.clone()))
            .expect("docs.read registered once");
        tools
            .register(Arc::new(publish_for_workers.clone()))
            .expect("report.publish registered once");
        (agents, tools)
    })?;
    let outcome = PipelineOutcome {
        report: output.report,
        publish_effects: publish.effects(),
        published: publish.document(REPORT_KEY),
    };
    print_summary(&outcome);
    Ok(outcome)
}

/// Runs the pipeline with every approval granted ([`ApprovalPolicy::All`]).
pub fn run() -> Result<PipelineOutcome, Box<dyn Error>> {
    run_with(ApprovalPolicy::All)
}

fn print_summary(outcome: &PipelineOutcome) {
    let report = &outcome.report;
    let reason = report.stop_reason.as_deref().unwrap_or("none");
    match report.stop_detail.as_deref() {
        Some(detail) if detail != reason => println!("stop reason: {reason} ({detail})"),
        _ => println!("stop reason: {reason}"),
    }
    println!(
        "{:<9} {:<10} {:>8} {:>6} {:>10}",
        "task", "state", "attempts", "steps", "tool calls"
    );
    for task in &report.tasks {
        println!(
            "{:<9} {:<10} {:>8} {:>6} {:>10}",
            task.id,
            task.state.to_string(),
            task.attempts,
            format!("{}/{}", task.spent.steps, task.granted.steps),
            format!("{}/{}", task.spent.tool_calls, task.granted.tool_calls),
        );
    }
    println!(
        "budget: spent {} of {} steps, {} of {} tool calls",
        report.budget.spent.steps,
        report.budget.limit.steps,
        report.budget.spent.tool_calls,
        report.budget.limit.tool_calls
    );
    println!(
        "actions: {} executed, {} rejected, {} unknown, {} duplicate effects",
        report.actions.executed,
        report.actions.rejected,
        report.actions.unknown,
        report.actions.duplicate_effects
    );
    println!("publish effects: {}", outcome.publish_effects);
    if let Some(body) = &outcome.published {
        println!("published {REPORT_KEY}:\n{body}");
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let outcome = run()?;
    if outcome.report.stop_exit_code() != 0 {
        return Err(format!("run did not complete: {:?}", outcome.report.stop_reason).into());
    }
    Ok(())
}
