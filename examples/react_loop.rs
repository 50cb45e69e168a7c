//! A ReAct-style agent loop: propose a tool call, observe, decide the next call, repeat.
//!
//! The [`Researcher`] agent answers a question by searching a small knowledge base through the
//! [`SearchTool`] (read-only, capability `kb.search`). Each search result either holds the
//! answer (`answer: ...`) or points elsewhere (`see: <query>`); the agent follows pointers until
//! it finds the answer. It never runs the tool itself: every call goes through the worker's
//! execution gate, and what came of it arrives as [`AgentContext::last_observation`] at the
//! next step.
//!
//! Two runs, each a one-node plan whose task gets a budget of [`STEPS`] steps:
//!
//! 1. a short chain (3 searches + 1 finishing step) completes with stop reason `completed`;
//! 2. a chain of 10 pointers cannot finish in 5 steps. The worker charges one step *before*
//!    every proposal, so the 6th iteration finds the slice empty and ends the attempt with
//!    `LimitReached { steps }`; the supervisor does not retry it, marks the task
//!    `stopped-limit` and stops the run with `stopped-limit` (detail `stopped-limit (steps)`,
//!    exit code 3). The agent needs no loop counter of its own: the budget is the limit.
//!
//! Run it with:
//!
//! ```text
//! cargo run --example react_loop
//! ```
//!
//! `tests/examples_run.rs` runs the same [`run`] and checks both outcomes.

use std::collections::BTreeMap;
use std::error::Error;
use std::sync::Arc;

use quorate::coordinator::{run_star, RunOptions, RunReport, SupervisorConfig};
use quorate::protocols::{
    ActionId, Budget, Capabilities, Capability, EvidenceRef, NodeSpec, Payload, PlanSpec,
    ResultKind,
};
use quorate::workers::{
    Agent, AgentContext, AgentRegistry, Assignment, Observation, Proposal, SideEffect, Tool,
    ToolAnswer, ToolFuture, ToolRegistry,
};
use serde_json::{json, Value};

/// Steps in each run's task budget (one per loop iteration).
pub const STEPS: u64 = 5;

/// The question with a short chain of pointers (answered in 4 steps).
pub const SHORT_QUESTION: &str = "who last changed the gate";

/// The question with a chain of 10 pointers (cannot be answered in [`STEPS`] steps).
pub const LONG_QUESTION: &str = "where did the rumour start";

/// A read-only search over an in-memory knowledge base.
///
/// Parameters: `{"query": string}`. Answers `{"query", "text"}` or the error class
/// `no-match`.
#[derive(Debug, Clone)]
pub struct SearchTool {
    entries: Arc<BTreeMap<String, String>>,
}

impl SearchTool {
    /// The knowledge base of this example.
    #[must_use]
    pub fn example() -> Self {
        let mut entries = BTreeMap::from([
            (
                SHORT_QUESTION.to_string(),
                "The gate lives in workers/src/gate.rs. see: gate.rs history".to_string(),
            ),
            (
                "gate.rs history".to_string(),
                "Last changed by commit 42. see: commit 42".to_string(),
            ),
            (
                "commit 42".to_string(),
                "answer: Ada, who added the budget check".to_string(),
            ),
            (LONG_QUESTION.to_string(), "see: hop 1".to_string()),
        ]);
        for hop in 1..10 {
            entries.insert(format!("hop {hop}"), format!("see: hop {}", hop + 1));
        }
        entries.insert("hop 10".to_string(), "answer: the break room".to_string());
        Self {
            entries: Arc::new(entries),
        }
    }
}

impl Tool for SearchTool {
    fn name(&self) -> &str {
        "search"
    }

    fn capability(&self) -> Capability {
        Capability::new("kb.search").expect("valid capability name")
    }

    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }

    fn validate(&self, params: &Value) -> Result<(), String> {
        match params.get("query") {
            Some(Value::String(q)) if !q.is_empty() => Ok(()),
            _ => Err("expected {\"query\": non-empty string}".to_string()),
        }
    }

    fn call(&self, _action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let query = params["query"].as_str().unwrap_or_default().to_string();
        let answer = match self.entries.get(&query) {
            Some(text) => ToolAnswer::Ok {
                output: json!({ "query": query, "text": text }).into(),
                cost: Budget::ZERO,
                changed: false,
            },
            None => ToolAnswer::Err {
                class: "no-match".to_string(),
                message: format!("nothing found for {query:?}"),
            },
        };
        Box::pin(std::future::ready(answer))
    }
}

/// The ReAct agent: search, read the result, follow its `see:` pointer or finish.
#[derive(Debug)]
pub struct Researcher {
    question: String,
    /// Queries issued so far (the reasoning trace; also used to refuse cycles).
    trail: Vec<String>,
}

impl Researcher {
    /// An agent that answers `question`.
    #[must_use]
    pub fn new(question: impl Into<String>) -> Self {
        Self {
            question: question.into(),
            trail: Vec::new(),
        }
    }

    fn search(&mut self, ctx: &AgentContext<'_>, query: &str) -> Proposal {
        println!(
            "  step {} (steps left {}): act    search({query:?})",
            ctx.step, ctx.remaining.steps
        );
        self.trail.push(query.to_string());
        Proposal::CallTool {
            tool: "search".to_string(),
            params: json!({ "query": query }).into(),
            intent_version: 0,
            needs_approval: false,
        }
    }
}

impl Agent for Researcher {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let (text, action) = match ctx.last_observation {
            // First step: search for the question itself.
            None => {
                let question = self.question.clone();
                return self.search(ctx, &question);
            }
            Some(Observation::Output { output, action, .. }) => (
                output["text"].as_str().unwrap_or_default().to_string(),
                *action,
            ),
            // A tool error or a gate rejection: fail fast with what was observed.
            Some(other) => {
                return Proposal::Fail {
                    observation: other.to_string(),
                }
            }
        };
        println!(
            "  step {} (steps left {}): observe {text:?}",
            ctx.step, ctx.remaining.steps
        );
        if let Some(answer) = text.split("answer:").nth(1) {
            return Proposal::Finish {
                kind: ResultKind::VerifiedConclusion,
                value: json!({ "answer": answer.trim(), "trail": self.trail }).into(),
                // The answer rests on the search result that gave it.
                evidence: vec![EvidenceRef::Action { action }],
            };
        }
        match text.split("see:").nth(1).map(str::trim) {
            Some(next) if self.trail.iter().any(|q| q == next) => Proposal::Fail {
                observation: format!("pointer cycle at {next:?}"),
            },
            Some(next) => {
                let next = next.to_string();
                self.search(ctx, &next)
            }
            None => Proposal::Fail {
                observation: format!("dead end: {text:?}"),
            },
        }
    }
}

/// A one-node plan: task `research` (role `researcher`) with [`STEPS`] steps and room for more
/// tool calls than it can make, so steps are what runs out.
pub fn plan() -> PlanSpec {
    let mut research = NodeSpec::named("research").with_budget(Budget::new(STEPS, 20, 0, 0));
    research.role = "researcher".into();
    research.capabilities = Capabilities::parse(["kb.search"]).expect("valid capability");
    PlanSpec {
        budget: Budget::new(STEPS + 1, 20, 0, 0),
        reserve: Budget::steps(1),
        capabilities: Capabilities::parse(["kb.search"]).expect("valid capability"),
        nodes: vec![research],
    }
}

/// Runs the ReAct agent on `question` and prints the trace and the outcome.
pub fn ask(question: &str) -> Result<RunReport, Box<dyn Error>> {
    println!("question: {question:?}");
    let tool = SearchTool::example();
    let question = question.to_string();
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers: 1,
            ..SupervisorConfig::default()
        },
        ..RunOptions::default()
    };
    let output = run_star(plan().validate()?, options, move || {
        let question = question.clone();
        let agents = AgentRegistry::new().with_role("researcher", move |_: &Assignment| {
            Box::new(Researcher::new(question.clone())) as Box<dyn Agent>
        });
        let mut tools = ToolRegistry::new();
        tools
            .register(Arc::new(tool.clone()))
            .expect("search registered once");
        (agents, tools)
    })?;
    let answer = output.result("research");
    let report = output.report;
    let task = &report.tasks[0];
    println!(
        "stop reason: {} / task {} spent {} of {} steps, {} tool calls",
        report.stop_detail.as_deref().unwrap_or("none"),
        task.state,
        task.spent.steps,
        task.granted.steps,
        task.spent.tool_calls
    );
    if let Some(result) = answer {
        println!("answer: {}", result["answer"]);
    }
    println!("exit code: {}\n", report.stop_exit_code());
    Ok(report)
}

/// Both runs: the short chain (completes), then the long one (stops at the step limit).
pub fn run() -> Result<(RunReport, RunReport), Box<dyn Error>> {
    let short = ask(SHORT_QUESTION)?;
    let long = ask(LONG_QUESTION)?;
    Ok((short, long))
}

fn main() -> Result<(), Box<dyn Error>> {
    let (short, long) = run()?;
    let ok = short.stop_reason.as_deref() == Some("completed")
        && long.stop_reason.as_deref() == Some("stopped-limit");
    if !ok {
        return Err("the runs did not end as documented".into());
    }
    Ok(())
}
