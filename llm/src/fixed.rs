//! [`FixedTool`]: a simulated tool that answers every call with the same output, for plan files
//! whose tasks are model agents (`[tools.NAME]`) and for examples. Its effects go to a scripted
//! [`World`], as a scripted tool's do: a write commits once per `ActionId`, and a query by id
//! finds it.

use quorate_protocols::{ActionId, Budget, Capability, Payload};
use quorate_workers::scripted::CallOutcome;
use quorate_workers::{ScriptedTool, SideEffect, Tool, ToolAnswer, ToolFuture, World};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chat::ToolSpec;

/// A `[tools.NAME]` section: what the tool is, for the model and for the gate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedToolConfig {
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// A JSON schema of its parameters (default: any object).
    #[serde(default = "any_object")]
    pub parameters: Value,
    /// `read-only`, `idempotent-write` (the default) or `non-idempotent-write`.
    #[serde(default)]
    pub side_effect: SideEffect,
    /// What every call answers.
    #[serde(default)]
    pub output: Value,
    /// A model agent proposes its calls for a person's approval first.
    #[serde(default)]
    pub needs_approval: bool,
}

fn any_object() -> Value {
    serde_json::json!({ "type": "object" })
}

impl FixedToolConfig {
    /// How a model agent is offered the tool named `name`.
    #[must_use]
    pub fn spec(&self, name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
            needs_approval: self.needs_approval,
        }
    }
}

/// A tool named (and needing capability) `name` that answers `output` to every call.
#[derive(Clone, Debug)]
pub struct FixedTool {
    inner: ScriptedTool,
    /// Shared by every answer.
    output: Payload,
    world: World,
}

impl FixedTool {
    /// The tool `name` as `config` says, committing to `world`.
    #[must_use]
    pub fn new(name: Capability, config: &FixedToolConfig, world: World) -> Self {
        Self {
            inner: ScriptedTool::new(name, config.side_effect, world.clone()),
            output: config.output.clone().into(),
            world,
        }
    }
}

impl Tool for FixedTool {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capability(&self) -> Capability {
        self.inner.capability()
    }
    fn side_effect(&self) -> SideEffect {
        self.inner.side_effect()
    }
    fn call(&self, action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        self.world
            .plan(action, CallOutcome::Ok, self.output.clone(), Budget::ZERO);
        self.inner.call(action, params)
    }
    fn query(&self, action: ActionId) -> ToolFuture<Option<ToolAnswer>> {
        self.inner.query(action)
    }
}
