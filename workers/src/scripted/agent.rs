//! The scripted agent and the book of scripts per plan node.

use std::collections::HashMap;
use std::sync::Arc;

use quorate_protocols::{ActionId, Capability, EvidenceRef, NodeId, Payload, ResultKind};
use serde_json::Value;

use super::{merge_tool, CallStep, Script, ScriptError, ScriptedTool, Step, World};
use crate::agent::{Agent, AgentContext, AgentFactory, Faults, Observation, Proposal};
use crate::tool::{SideEffect, ToolRegistry};
use quorate_protocols::wire::Assignment;

enum Item {
    Call(CallStep),
    Delegate(Vec<crate::agent::SubtaskSpec>),
    Finish { kind: ResultKind, value: Payload },
    Fail(String),
}

/// Proposes a [`Script`]'s steps in order (see the [module docs](super)).
pub struct ScriptedAgent {
    items: Vec<Item>,
    next: usize,
    faults: Faults,
    world: World,
    last_output: Option<Payload>,
    last_error: Option<String>,
    /// What `last_output` rests on: the call that returned it, or what the sub-tasks whose
    /// answers it gathers cited.
    last_cites: Vec<EvidenceRef>,
}

impl ScriptedAgent {
    /// An agent playing `script`, planning tool outcomes in `world`.
    #[must_use]
    pub fn new(script: &Script, world: World) -> Self {
        let mut items = Vec::new();
        let mut faults = Faults::default();
        for step in &script.steps {
            match step {
                Step::Call(call) => {
                    for _ in 0..call.repeat {
                        items.push(Item::Call(call.clone()));
                    }
                }
                Step::Answer(a) => items.push(Item::Finish {
                    kind: a.kind,
                    value: a.value.clone().into(),
                }),
                Step::Fail(f) => items.push(Item::Fail(f.observation.clone())),
                Step::Delegate(d) => items.push(Item::Delegate(
                    d.subtasks
                        .iter()
                        .map(|s| crate::agent::SubtaskSpec {
                            name: s.name.clone(),
                            role: s.role.clone(),
                            capabilities: s.capabilities.clone(),
                            budget: s.budget,
                            input: s.input.clone(),
                        })
                        .collect(),
                )),
                Step::DuplicateReply {} => faults.duplicate_reply = true,
                Step::LateReply {} => faults.late_reply = true,
            }
        }
        Self {
            items,
            next: 0,
            faults,
            world,
            last_output: None,
            last_error: None,
            last_cites: Vec::new(),
        }
    }
}

impl ScriptedAgent {
    /// What an answer rests on: the last tool output (or what the sub-tasks it gathers cited),
    /// or, when no call answered, the task's inputs. Empty when there is neither: such an answer
    /// rests on nothing the runtime recorded, and acceptance takes it as a suggestion.
    fn citations(&self, ctx: &AgentContext<'_>) -> Vec<EvidenceRef> {
        if self.last_output.is_some() && !self.last_cites.is_empty() {
            return self.last_cites.clone();
        }
        ctx.inputs
            .iter()
            .map(|i| EvidenceRef::Input {
                node: i.node.clone(),
            })
            .collect()
    }
}

impl Agent for ScriptedAgent {
    fn propose(&mut self, ctx: &AgentContext<'_>) -> Proposal {
        match ctx.last_observation {
            Some(Observation::Output { output, action, .. }) => {
                self.last_output = Some(output.clone());
                self.last_error = None;
                self.last_cites = vec![EvidenceRef::Action { action: *action }];
            }
            Some(Observation::Delegated { results }) => {
                match results
                    .iter()
                    .find_map(|r| r.outcome.as_ref().err().map(|e| (r, e)))
                {
                    Some((r, e)) => self.last_error = Some(format!("sub-task {}: {e}", r.name)),
                    None => {
                        let answers: serde_json::Map<String, Value> = results
                            .iter()
                            .filter_map(|r| {
                                r.outcome
                                    .as_ref()
                                    .ok()
                                    .map(|v| (r.name.clone(), v.value().clone()))
                            })
                            .collect();
                        self.last_output = Some(Value::Object(answers).into());
                        self.last_error = None;
                        self.last_cites = results
                            .iter()
                            .flat_map(|r| r.evidence.iter().cloned())
                            .collect();
                    }
                }
            }
            Some(other) => self.last_error = Some(other.to_string()),
            None => {}
        }
        let Some(item) = self.items.get(self.next) else {
            return match (&self.last_error, &self.last_output) {
                (Some(error), _) => Proposal::Fail {
                    observation: error.clone(),
                },
                (None, Some(output)) => Proposal::Finish {
                    kind: ResultKind::VerifiedConclusion,
                    value: output.clone(),
                    evidence: self.citations(ctx),
                },
                (None, None) => Proposal::Fail {
                    observation: "script exhausted".to_owned(),
                },
            };
        };
        self.next += 1;
        match item {
            Item::Call(call) => {
                let action = ActionId::new(ctx.task, ctx.step, 0);
                self.world.plan_call(
                    action,
                    super::PlannedCall {
                        outcome: call.outcome,
                        output: call.output.clone(),
                        cost: call.cost,
                        latency: std::time::Duration::from_millis(call.latency_ms),
                    },
                );
                Proposal::CallTool {
                    tool: call.tool.clone(),
                    params: call.params.clone(),
                    intent_version: 0,
                    needs_approval: call.needs_approval,
                }
            }
            Item::Finish { kind, value } => Proposal::Finish {
                kind: *kind,
                value: value.clone(),
                evidence: self.citations(ctx),
            },
            Item::Fail(observation) => Proposal::Fail {
                observation: observation.clone(),
            },
            Item::Delegate(subtasks) => Proposal::Delegate {
                subtasks: subtasks.clone(),
            },
        }
    }

    fn faults(&self) -> Faults {
        self.faults
    }
}

/// Scripts per plan node, sharing one [`World`]: builds the agent factory and the tools a
/// worker needs to play a scripted plan.
///
/// ```
/// use quorate_protocols::NodeId;
/// use quorate_workers::{AgentRegistry, Script, ScriptBook, World};
///
/// let script: Script = serde_json::from_value(serde_json::json!([
///     { "do": "call", "tool": "db.save", "params": { "id": 7 } },
///     { "do": "answer", "value": "saved" },
/// ])).unwrap();
/// let mut book = ScriptBook::new(World::new());
/// book.insert(NodeId::new("save").unwrap(), script).unwrap();
/// let tools = book.tools().unwrap();
/// assert_eq!(tools.names().collect::<Vec<_>>(), ["db.save"]);
/// let agents = AgentRegistry::new().with_fallback(book.factory());
/// # let _ = agents;
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScriptBook {
    scripts: HashMap<NodeId, Script>,
    world: World,
}

impl ScriptBook {
    /// An empty book over `world`.
    #[must_use]
    pub fn new(world: World) -> Self {
        Self {
            scripts: HashMap::new(),
            world,
        }
    }

    /// The shared world.
    #[must_use]
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Adds (or replaces) the script of `node` after checking it.
    ///
    /// The scripts of delegated sub-tasks are registered too, under `<node>.<name>`.
    pub fn insert(&mut self, node: NodeId, script: Script) -> Result<(), ScriptError> {
        script.tools()?;
        for step in &script.steps {
            if let Step::Delegate(d) = step {
                for sub in &d.subtasks {
                    let child = NodeId::new(format!("{node}.{}", sub.name)).map_err(|_| {
                        ScriptError::BadSubtaskName {
                            name: sub.name.clone(),
                        }
                    })?;
                    self.insert(child, sub.script.clone())?;
                }
            }
        }
        self.scripts.insert(node, script);
        Ok(())
    }

    /// One [`ScriptedTool`] per tool named in any script.
    pub fn tools(&self) -> Result<ToolRegistry, ScriptError> {
        let mut all: Vec<(Capability, SideEffect)> = Vec::new();
        let mut nodes: Vec<&NodeId> = self.scripts.keys().collect();
        nodes.sort();
        for node in nodes {
            for (name, side_effect) in self.scripts[node].tools()? {
                merge_tool(&mut all, name, side_effect)?;
            }
        }
        let mut registry = ToolRegistry::new();
        for (name, side_effect) in all {
            let tool = ScriptedTool::new(name, side_effect, self.world.clone());
            // Names are unique after merging.
            let _unique = registry.register(Arc::new(tool));
        }
        Ok(registry)
    }

    /// A factory creating a [`ScriptedAgent`] for the assignment's node; a node without a
    /// script gets an agent that fails with "no script for node ...".
    #[must_use]
    pub fn factory(&self) -> impl AgentFactory + 'static {
        let scripts = Arc::new(self.scripts.clone());
        let world = self.world.clone();
        move |assignment: &Assignment| -> Box<dyn Agent> {
            let script = scripts.get(&assignment.node).cloned().unwrap_or_else(|| {
                Script::new(vec![Step::Fail(super::FailStep {
                    observation: format!("no script for node {}", assignment.node),
                })])
            });
            Box::new(ScriptedAgent::new(&script, world.clone()))
        }
    }
}
