//! A peer (all-to-all) pipeline: no supervisor; peers claim ready tasks by compare-and-swap,
//! run them with their own worker, and broadcast each result to every other peer.
//!
//! ```text
//! shard-0 --\
//! shard-1 ---+--> total
//! shard-2 --/
//! ```
//!
//! Each `shard-i` sums its slice of numbers with a custom read-only [`SumTool`]; `total` adds
//! the shards' sums. With `n` peers every result is announced to the `n - 1` others, so the run
//! sends `(n - 1) x tasks` messages (the star sends `2 x tasks`: assignment + reply).
//!
//! ```text
//! cargo run --example peer_pipeline
//! ```

use std::error::Error;
use std::sync::Arc;

use quorate::coordinator::peer::run_peer;
use quorate::coordinator::{RunOptions, RunOutput, SupervisorConfig};
use quorate::protocols::{
    ActionId, Budget, Capabilities, Capability, EvidenceRef, NodeSpec, Payload, PlanSpec,
    ResultKind,
};
use quorate::workers::{
    Agent, AgentContext, AgentRegistry, Observation, Proposal, SideEffect, Tool, ToolAnswer,
    ToolFuture, ToolRegistry,
};
use serde_json::{json, Value};

/// Sums the numbers it is given. Read-only, capability `math.sum`.
struct SumTool(Capability);

impl Tool for SumTool {
    fn name(&self) -> &str {
        "math.sum"
    }
    fn capability(&self) -> Capability {
        self.0.clone()
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }
    fn validate(&self, params: &Value) -> Result<(), String> {
        match params.get("numbers").and_then(Value::as_array) {
            Some(a) if a.iter().all(Value::is_i64) => Ok(()),
            _ => Err("params.numbers must be an array of integers".into()),
        }
    }
    fn call(&self, _: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let sum: i64 = params["numbers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_i64)
            .sum();
        Box::pin(async move {
            ToolAnswer::Ok {
                output: json!(sum).into(),
                cost: Budget::ZERO,
                changed: false,
            }
        })
    }
}

/// A shard: sums numbers `[10 * i, 10 * i + 10)` with the tool, then answers the observed sum.
struct Shard;

impl Agent for Shard {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        match ctx.last_observation {
            None => {
                let i: i64 = ctx
                    .node
                    .as_str()
                    .trim_start_matches("shard-")
                    .parse()
                    .unwrap_or(0);
                Proposal::CallTool {
                    tool: "math.sum".into(),
                    params: json!({ "numbers": (10 * i..10 * i + 10).collect::<Vec<_>>() }).into(),
                    intent_version: 0,
                    needs_approval: false,
                }
            }
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

/// Adds its inputs.
struct Total;

impl Agent for Total {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        let sum: i64 = ctx.inputs.iter().filter_map(|i| i.value.as_i64()).sum();
        Proposal::Finish {
            kind: ResultKind::VerifiedConclusion,
            value: json!(sum).into(),
            // The sum rests on the inputs the runtime handed over.
            evidence: ctx
                .inputs
                .iter()
                .map(|i| EvidenceRef::Input {
                    node: i.node.clone(),
                })
                .collect(),
        }
    }
}

/// Runs the pipeline on `peers` peers.
pub fn run(peers: usize) -> Result<RunOutput, Box<dyn Error>> {
    let caps = Capabilities::parse(["math.sum"])?;
    let mut nodes: Vec<NodeSpec> = (0..3)
        .map(|i| {
            NodeSpec::named(&format!("shard-{i}"))
                .with_role("shard")
                .with_capabilities(caps.clone())
                .with_budget(Budget::new(3, 1, 0, 0))
        })
        .collect();
    nodes.push(
        NodeSpec::named("total")
            .after(&["shard-0", "shard-1", "shard-2"])
            .with_role("total")
            .with_budget(Budget::steps(2)),
    );
    let plan = PlanSpec {
        budget: Budget::new(20, 3, 0, 0),
        reserve: Budget::steps(2),
        capabilities: caps,
        nodes,
    }
    .validate()?;
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers: peers,
            ..SupervisorConfig::default()
        },
        ..RunOptions::default()
    };
    let tool = Arc::new(SumTool(Capability::new("math.sum")?));
    let out = run_peer(plan, options, move || {
        let mut tools = ToolRegistry::new();
        // The tool is stateless; sharing one instance across peers is still the habit to keep.
        let _ = tools.register(tool.clone());
        (
            AgentRegistry::new()
                .with_agent("shard", || Shard)
                .with_agent("total", || Total),
            tools,
        )
    })?;
    Ok(out)
}

fn main() -> Result<(), Box<dyn Error>> {
    for peers in [2, 3, 4] {
        let out = run(peers)?;
        let r = &out.report;
        println!(
            "{peers} peers: stop {}, total = {}, messages sent {} (= (n-1) x 4 tasks = {}), tool calls {}",
            r.stop_reason.as_deref().unwrap_or("-"),
            out.result("total").unwrap_or_default(),
            r.messages.sent,
            (peers - 1) * 4,
            r.actions.executed,
        );
    }
    Ok(())
}
