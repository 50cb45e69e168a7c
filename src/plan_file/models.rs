//! Model agents in plan files: the `[models.NAME]` and `[tools.NAME]` sections, the task
//! fields `agent = "llm"`, `model`, `tools`, `tool_choice`, `max_tokens`, `tool_rounds` and
//! `memory_scope` (the memory itself is in [`super::memory`]),
//! their checks, and what a run builds from them (the agents' configurations, the fixed tools,
//! and with the cargo feature `llm` the `model.NAME` tools).

use std::collections::BTreeMap;
use std::path::Path;

use quorate_llm::{LlmAgentConfig, ToolChoice};
use quorate_protocols::{Capability, CapabilityError, NodeId};
use serde::{Deserialize, Serialize};

use super::{PlanFile, PlanFileError, TaskSection};

/// Which built-in agent plays a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    /// The scripted agent (the task's `script`).
    #[default]
    Scripted,
    /// A model agent ([`quorate_llm::LlmAgent`]) over the task's `model`.
    Llm,
}

/// What is wrong with a model task or section.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// `agent = "llm"` without `model`.
    #[error("agent = \"llm\" needs model = \"NAME\" (a [models.NAME] section)")]
    NoModel,
    /// `model` names no `[models.NAME]` section.
    #[error("model {model:?} has no [models.{model}] section (models: {})", known.join(", "))]
    UnknownModel {
        /// The name given.
        model: String,
        /// The sections there are, sorted.
        known: Vec<String>,
    },
    /// The task does not hold the model's capability.
    #[error("it uses model {model:?} but its capabilities lack {capability:?}")]
    NoModelCapability {
        /// The model.
        model: String,
        /// `model.NAME`.
        capability: String,
    },
    /// `tools` names no `[tools.NAME]` section.
    #[error("tools names {tool:?}, which has no [tools.\"{tool}\"] section (tools: {})", known.join(", "))]
    UnknownTool {
        /// The name given.
        tool: String,
        /// The sections there are, sorted.
        known: Vec<String>,
    },
    /// `tool_choice` names a tool the task does not offer.
    #[error("tool_choice {choice:?} is not auto, none or a tool the task offers")]
    BadToolChoice {
        /// As given.
        choice: String,
    },
    /// A model task with a script, or model fields on a scripted task.
    #[error("{field} is for agent = \"llm\" tasks only; a model task has no script")]
    MixedAgent {
        /// The field out of place.
        field: &'static str,
    },
    /// The task asks for more tokens per answer than its model takes.
    #[error("max_tokens = {max_tokens} is over model {model:?}'s max_tokens ({limit})")]
    MaxTokens {
        /// Asked.
        max_tokens: u64,
        /// The model.
        model: String,
        /// Its limit.
        limit: u64,
    },
    /// The run's attempt timeout does not cover one call of the model.
    #[error(
        "model {model:?} has timeout_ms = {timeout_ms}, but run.attempt_timeout_ms is \
         {attempt_timeout_ms}: it must be longer, or the task is dispatched again while its \
         model call still runs"
    )]
    AttemptTimeout {
        /// The model.
        model: String,
        /// Its call timeout.
        timeout_ms: u64,
        /// The run's attempt timeout.
        attempt_timeout_ms: u64,
    },
    /// A `[tools.NAME]` has the name of a scripted tool or of a model's tool.
    #[error("[tools.\"{tool}\"] has the name of a script's tool or of a model (model.NAME)")]
    ToolClash {
        /// The name.
        tool: String,
    },
    /// `memory_scope` names a scope no `[[memory.records]]` entry has.
    #[error("memory_scope {scope:?} has no [[memory.records]] entry (scopes: {})", known.join(", "))]
    UnknownMemoryScope {
        /// The name given.
        scope: String,
        /// The scopes there are, sorted.
        known: Vec<String>,
    },
    /// A `[[memory.records]]` entry was refused by the memory's write path.
    #[error("[[memory.records]] entry {index} (counting from 0): {source}")]
    MemoryRecord {
        /// Its index in the file.
        index: usize,
        /// Why the memory refused it.
        source: quorate_memory::WriteError,
    },
    /// A `[models.NAME]` or `[tools.NAME]` name is not a valid capability.
    #[error("{section} name {name:?}: {source}")]
    BadName {
        /// `models` or `tools`.
        section: &'static str,
        /// The name.
        name: String,
        /// Why not.
        source: CapabilityError,
    },
}

impl PlanFile {
    /// Checks every model section, tool section and model task (the module docs list them).
    pub(super) fn check_models(&self, path: &Path) -> Result<(), PlanFileError> {
        let err = |task: Option<&NodeId>, source| PlanFileError::Model {
            path: path.to_path_buf(),
            task: task.cloned().map(Box::new),
            source,
        };
        for name in self.models.keys() {
            quorate_llm::model_tool_name(name).map_err(|source| {
                err(
                    None,
                    ModelError::BadName {
                        section: "models",
                        name: name.clone(),
                        source,
                    },
                )
            })?;
        }
        for name in self.tools.keys() {
            Capability::new(name.clone()).map_err(|source| {
                err(
                    None,
                    ModelError::BadName {
                        section: "tools",
                        name: name.clone(),
                        source,
                    },
                )
            })?;
        }
        self.memory
            .view()
            .map_err(|(index, source)| err(None, ModelError::MemoryRecord { index, source }))?;
        for t in self.all_tasks() {
            self.check_task(t).map_err(|e| err(Some(&t.id), e))?;
        }
        Ok(())
    }

    fn check_task(&self, t: &TaskSection) -> Result<(), ModelError> {
        if t.agent == AgentKind::Scripted {
            let misplaced = [
                ("model", t.model.is_some()),
                ("tools", t.tools.is_some()),
                ("tool_choice", t.tool_choice.is_some()),
                ("max_tokens", t.max_tokens.is_some()),
                ("tool_rounds", t.tool_rounds.is_some()),
                ("memory_scope", t.memory_scope.is_some()),
            ];
            return match misplaced.into_iter().find(|(_, set)| *set) {
                Some((field, _)) => Err(ModelError::MixedAgent { field }),
                None => Ok(()),
            };
        }
        if !t.script.steps.is_empty() {
            return Err(ModelError::MixedAgent { field: "script" });
        }
        let model = t.model.as_ref().ok_or(ModelError::NoModel)?;
        let config = self
            .models
            .get(model)
            .ok_or_else(|| ModelError::UnknownModel {
                model: model.clone(),
                known: self.models.keys().cloned().collect(),
            })?;
        let capability = format!("model.{model}");
        if !t.capabilities.iter().any(|c| c.as_str() == capability) {
            return Err(ModelError::NoModelCapability {
                model: model.clone(),
                capability,
            });
        }
        for tool in t.tools.iter().flatten() {
            if !self.tools.contains_key(tool) {
                return Err(ModelError::UnknownTool {
                    tool: tool.clone(),
                    known: self.tools.keys().cloned().collect(),
                });
            }
        }
        if let Some(max_tokens) = t.max_tokens.filter(|&m| m > config.max_tokens) {
            return Err(ModelError::MaxTokens {
                max_tokens,
                model: model.clone(),
                limit: config.max_tokens,
            });
        }
        if self.run.attempt_timeout_ms <= config.timeout_ms {
            return Err(ModelError::AttemptTimeout {
                model: model.clone(),
                timeout_ms: config.timeout_ms,
                attempt_timeout_ms: self.run.attempt_timeout_ms,
            });
        }
        self.agent_config(t).map(|_| ())
    }

    /// The tools a model task offers: its `tools`, or by default every `[tools.NAME]` whose
    /// capability it holds.
    fn offered(&self, t: &TaskSection) -> Vec<String> {
        match &t.tools {
            Some(tools) => tools.clone(),
            None => self
                .tools
                .keys()
                .filter(|name| t.capabilities.iter().any(|c| c.as_str() == name.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// The agent configuration of a checked model task.
    fn agent_config(&self, t: &TaskSection) -> Result<LlmAgentConfig, ModelError> {
        let model = t.model.clone().ok_or(ModelError::NoModel)?;
        let config = &self.models[&model];
        let mut agent = LlmAgentConfig::new(model, t.max_tokens.unwrap_or(config.max_tokens));
        agent.context_tokens = config.context_tokens;
        let offered = self.offered(t);
        agent.tools = offered
            .iter()
            .map(|name| self.tools[name].spec(name))
            .collect();
        agent.first_tool_choice = match t.tool_choice.as_deref() {
            None | Some("auto") => ToolChoice::Auto,
            Some("none") => ToolChoice::None,
            Some(name) if offered.iter().any(|o| o == name) => ToolChoice::Tool(name.to_owned()),
            Some(other) => {
                return Err(ModelError::BadToolChoice {
                    choice: other.to_owned(),
                })
            }
        };
        agent.tool_rounds = t.tool_rounds.unwrap_or(1);
        if let Some(scope) = &t.memory_scope {
            let scopes = self.memory.scopes();
            if !scopes.contains(scope.as_str()) {
                return Err(ModelError::UnknownMemoryScope {
                    scope: scope.clone(),
                    known: scopes.into_iter().map(str::to_owned).collect(),
                });
            }
            let view = self
                .memory
                .view()
                .map_err(|(index, source)| ModelError::MemoryRecord { index, source })?;
            // The query is the goal the agent is given (its default when the task has none).
            let goal = t.goal.as_deref().unwrap_or(quorate_llm::DEFAULT_GOAL);
            agent.memory = super::memory::recall(&view, scope, &t.id, goal, agent.context_tokens);
        }
        Ok(agent)
    }

    /// The model agents' configurations by task (the plan's and the `[fallback]`'s), for a
    /// file [`compile`](Self::compile) accepted.
    #[must_use]
    pub fn model_agents(&self) -> BTreeMap<NodeId, LlmAgentConfig> {
        self.all_tasks()
            .filter(|t| t.agent == AgentKind::Llm)
            .filter_map(|t| Some((t.id.clone(), self.agent_config(t).ok()?)))
            .collect()
    }

    /// Whether any task is played by a model.
    #[must_use]
    pub fn uses_models(&self) -> bool {
        self.all_tasks().any(|t| t.agent == AgentKind::Llm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
[run]
budget = { steps = 10, tool_calls = 4, tokens = 2000 }
capabilities = ["model.local", "docs.read"]
attempt_timeout_ms = 90000

[models.local]
base_url = "http://127.0.0.1:8077/v1"
model = "m"
timeout_ms = 60000

[tools."docs.read"]
side_effect = "read-only"
output = "x"

[[tasks]]
id = "ask"
agent = "llm"
MODEL
capabilities = CAPS
budget = { steps = 10, tool_calls = 4, tokens = 2000 }
"#;

    fn compile(model: &str, caps: &str) -> Result<PlanFile, PlanFileError> {
        let text = PLAN.replace("MODEL", model).replace("CAPS", caps);
        let file = PlanFile::parse(Path::new("p.toml"), &text)?;
        file.compile(Path::new("p.toml")).map(|_| file)
    }

    fn model_error(e: PlanFileError) -> (Option<NodeId>, ModelError) {
        match e {
            PlanFileError::Model { task, source, .. } => (task.map(|t| *t), source),
            other => panic!("expected a model error, got {other}"),
        }
    }

    #[test]
    fn a_model_task_compiles_into_an_agent_offered_its_tools() {
        let file = compile("model = \"local\"", r#"["model.local", "docs.read"]"#).unwrap();
        let agents = file.model_agents();
        let agent = &agents[&NodeId::new("ask").unwrap()];
        assert_eq!(agent.model_tool(), "model.local");
        assert_eq!(agent.max_tokens, 256);
        assert_eq!(agent.tools.len(), 1);
        assert_eq!(agent.tools[0].name, "docs.read");
        assert!(file.uses_models());
    }

    #[test]
    fn an_unknown_model_is_refused_naming_the_task_and_the_model() {
        let e = compile("model = \"gpt\"", r#"["model.local"]"#).unwrap_err();
        let text = e.to_string();
        let (task, source) = model_error(e);
        assert_eq!(task.unwrap().as_str(), "ask");
        assert_eq!(
            source,
            ModelError::UnknownModel {
                model: "gpt".into(),
                known: vec!["local".into()],
            }
        );
        assert!(
            text.contains("task ask: model \"gpt\" has no [models.gpt]"),
            "{text}"
        );
    }

    #[test]
    fn model_tasks_need_a_model_its_capability_and_a_long_enough_attempt() {
        let (_, e) = model_error(compile("", r#"["model.local"]"#).unwrap_err());
        assert_eq!(e, ModelError::NoModel);
        let (_, e) = model_error(compile("model = \"local\"", r#"["docs.read"]"#).unwrap_err());
        assert!(matches!(e, ModelError::NoModelCapability { .. }), "{e}");
        let short = PLAN.replace("attempt_timeout_ms = 90000", "attempt_timeout_ms = 60000");
        let text = short
            .replace("MODEL", "model = \"local\"")
            .replace("CAPS", r#"["model.local"]"#);
        let file = PlanFile::parse(Path::new("p.toml"), &text).unwrap();
        let (_, e) = model_error(file.compile(Path::new("p.toml")).unwrap_err());
        assert!(matches!(e, ModelError::AttemptTimeout { .. }), "{e}");
        let bad_choice = "model = \"local\"\ntool_choice = \"db.delete\"";
        let (_, e) = model_error(compile(bad_choice, r#"["model.local"]"#).unwrap_err());
        assert!(matches!(e, ModelError::BadToolChoice { .. }), "{e}");
    }

    #[cfg(not(feature = "llm"))]
    #[test]
    fn without_the_feature_a_model_plan_is_refused_before_it_runs() {
        let file = compile("model = \"local\"", r#"["model.local"]"#).unwrap();
        let e = crate::runner::run_plan_file(Path::new("p.toml"), &file, &Default::default())
            .unwrap_err();
        assert!(
            matches!(e, crate::runner::RunFileError::NoModelClient),
            "{e}"
        );
    }
}
