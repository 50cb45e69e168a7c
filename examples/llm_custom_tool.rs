//! An `LlmAgent` with a custom tool: the model is told to look up a stock level with a Rust
//! tool (`stock.read`), the runtime runs the call through the gate, and the model answers from
//! the tool's output, which the answer cites.
//!
//! Needs a model server and the model client:
//!
//! ```sh
//! scripts/model-server.sh start        # SmolLM2-135M on 127.0.0.1:8077 (docs/models.md)
//! cargo run --features llm --example llm_custom_tool
//! QUORATE_MODEL_URL=https://api.openai.com/v1 QUORATE_MODEL=gpt-4o-mini \
//!   QUORATE_MODEL_KEY_ENV=OPENAI_API_KEY cargo run --features llm-tls --example llm_custom_tool
//! ```

use std::sync::Arc;

use quorate::coordinator::{run_star, RunOptions, SupervisorConfig};
use quorate::llm::{LlmAgent, LlmAgentConfig, ModelConfig, ModelTool, ToolChoice, ToolSpec};
use quorate::protocols::{ActionId, Budget, Capabilities, Capability, NodeSpec, Payload, PlanSpec};
use quorate::workers::{AgentRegistry, SideEffect, Tool, ToolAnswer, ToolFuture, ToolRegistry};
use serde_json::json;

/// A read-only tool: the stock level of a product.
struct Stock;

impl Tool for Stock {
    fn name(&self) -> &str {
        "stock.read"
    }
    fn capability(&self) -> Capability {
        Capability::new("stock.read").expect("a valid name")
    }
    fn side_effect(&self) -> SideEffect {
        SideEffect::ReadOnly
    }
    fn validate(&self, params: &serde_json::Value) -> Result<(), String> {
        match params["sku"].as_str() {
            Some(_) => Ok(()),
            None => Err("needs a string sku".into()),
        }
    }
    fn call(&self, _: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        let sku = params["sku"].as_str().unwrap_or_default().to_owned();
        Box::pin(async move {
            ToolAnswer::Ok {
                output: json!({ "sku": sku, "in_stock": 42 }).into(),
                cost: Budget::ZERO,
                changed: false,
            }
        })
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let mut model = ModelConfig::new(
        env("QUORATE_MODEL_URL", "http://127.0.0.1:8077/v1"),
        env("QUORATE_MODEL", "smollm2-135m"),
    );
    model.api_key_env = std::env::var("QUORATE_MODEL_KEY_ENV").ok();
    model.max_tokens = 32;
    model.temperature = Some(0.0);
    let model_tool = Arc::new(ModelTool::new("local", model)?);

    let mut agent = LlmAgentConfig::new("local", 32).with_tool(ToolSpec {
        name: "stock.read".into(),
        description: "The stock level of a product by SKU".into(),
        parameters: json!({ "type": "object",
            "properties": { "sku": { "type": "string", "enum": ["A-100", "B-200"] } },
            "required": ["sku"] }),
        needs_approval: false,
    });
    agent.first_tool_choice = ToolChoice::Tool("stock.read".into());

    let caps = Capabilities::parse(["model.local", "stock.read"])?;
    let mut task = NodeSpec::named("stock")
        .with_goal("How many units of A-100 are in stock? Use stock.read, then answer.")
        .with_budget(Budget::new(6, 3, 2_000, 0));
    task.capabilities = caps.clone();
    let plan = PlanSpec {
        budget: Budget::new(6, 3, 2_000, 0),
        reserve: Budget::ZERO,
        capabilities: caps,
        nodes: vec![task],
    }
    .validate()?;
    let options = RunOptions {
        supervisor: SupervisorConfig {
            // Longer than a model call (the model tool's own timeout, 60 s by default).
            attempt_timeout_ms: 180_000,
            max_attempts: 1,
            ..SupervisorConfig::default()
        },
        ..RunOptions::default()
    };
    let output = run_star(plan, options, || {
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(Stock)).expect("one stock tool");
        tools.register(model_tool.clone()).expect("one model");
        let config = agent.clone();
        let agents =
            AgentRegistry::new().with_agent("worker", move || LlmAgent::new(config.clone()));
        (agents, tools)
    })?;
    let report = &output.report;
    println!("stop: {}", report.stop_detail.as_deref().unwrap_or("-"));
    println!("answer: {}", output.result("stock").unwrap_or_default());
    println!("spent: {:?}", report.budget.spent);
    Ok(())
}
