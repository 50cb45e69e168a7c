//! The plan file: a TOML document with a `[run]` table and `[[tasks]]`.
//!
//! ```toml
//! [run]
//! topology = "star"                 # star (supervisor + workers) or peer (all-to-all)
//! workers = 2
//! budget = { steps = 40, tool_calls = 6, tokens = 1000, cost = 100 }
//! reserve = { steps = 4 }
//! capabilities = ["db.read", "db.save"]
//! deadline_ms = 10000
//!
//! [[tasks]]
//! id = "load"
//! capabilities = ["db.read"]
//! budget = { steps = 8, tool_calls = 2 }
//! script = [
//!   { do = "call", tool = "db.read", params = { table = "orders" }, output = { rows = 3 } },
//!   { do = "answer", value = { rows = 3 } },
//! ]
//! ```
//!
//! [`PlanFile::load`] reads and checks a file; every refusal is a [`PlanFileError`] naming the
//! file and what was wrong. A file is at most [`MAX_PLAN_FILE_BYTES`]; its integers fit in an
//! `i64` (TOML's integers: up to 2^63-1); its text and values obey the envelope limits
//! ([`Limits::default`]), which they travel under. [`PlanFile::warnings`] lists what is valid
//! but cannot work as written (a task that cannot take a step or make a call its script names).

mod limits;
mod memory;
mod models;
mod syntax;
mod warnings;

pub use memory::{MemoryEntry, MemorySection};
pub use models::{AgentKind, ModelError};
pub use warnings::PlanWarning;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quorate_coordinator::{ApprovalPolicy, SupervisorConfig};
use quorate_protocols::{
    Acceptance, Budget, Capabilities, DecodeError, Limits, NodeId, NodeSpec, OnExhausted, Plan,
    PlanError, PlanSpec, Precondition,
};
use quorate_workers::{Script, ScriptBook, ScriptError, WorkerConfig, World};
use serde::{Deserialize, Serialize};

/// How the participants are connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// A supervisor hub with workers.
    #[default]
    Star,
    /// All-to-all peers without a supervisor.
    Peer,
}

/// The `[run]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    // `budget`, `reserve` and `capabilities` repeat `PlanSpec`'s fields instead of flattening a
    // `PlanSpec` in: serde does not support `#[serde(flatten)]` with `deny_unknown_fields`, which
    // both structs use. The test `sections_take_every_spec_field` keeps the two in step.
    /// `star` or `peer`.
    #[serde(default)]
    pub topology: Topology,
    /// Number of workers (or peers).
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Everything the run may spend.
    #[serde(default)]
    pub budget: Budget,
    /// The coordination reserve, never delegated.
    #[serde(default)]
    pub reserve: Budget,
    /// The run's authority; every task's capabilities must be a subset.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Milliseconds after which the run stops with `deadline`.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Identical (action, parameters, environment, error) repeats that count as no progress.
    #[serde(default = "default_no_progress")]
    pub no_progress_limit: u32,
    /// Per-call timeout in milliseconds (after it the outcome is unknown).
    #[serde(default = "default_call_timeout")]
    pub call_timeout_ms: u64,
    /// Milliseconds without an accepted reply after which an attempt is dispatched again.
    #[serde(default = "default_attempt_timeout")]
    pub attempt_timeout_ms: u64,
    /// Attempts per task before it fails.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
}

fn default_workers() -> usize {
    2
}
fn default_no_progress() -> u32 {
    3
}
fn default_call_timeout() -> u64 {
    100
}
fn default_attempt_timeout() -> u64 {
    5_000
}
fn default_attempts() -> u32 {
    3
}

/// One `[[tasks]]` entry: a plan node plus what the scripted agent does for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSection {
    // The fields up to `acceptance` repeat `NodeSpec`'s instead of flattening a `NodeSpec` in:
    // serde does not support `#[serde(flatten)]` with `deny_unknown_fields`, which both structs
    // use. The test `sections_take_every_spec_field` keeps the two in step.
    /// Unique id.
    pub id: NodeId,
    /// The agent role (the scripted agent serves every role).
    #[serde(default = "default_role")]
    pub role: String,
    /// Ids of tasks that must complete first.
    #[serde(default)]
    pub deps: Vec<NodeId>,
    /// Capabilities the task asks for (intersected with the run's).
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The task's budget slice.
    #[serde(default)]
    pub budget: Budget,
    /// Must hold before the task runs.
    #[serde(default)]
    pub preconditions: Vec<Precondition>,
    /// What the result must show to complete the task.
    #[serde(default)]
    pub acceptance: Acceptance,
    /// What the task is for, in words (handed to the agent; the scripted agent ignores it).
    #[serde(default)]
    pub goal: Option<String>,
    /// Evidence text handed to the task (data: it cannot add a tool call).
    #[serde(default)]
    pub evidence: Vec<String>,
    /// When the task's slice runs out: `"stop"` (the default: the task stops `stopped-limit`,
    /// and the run with it) or `"ask"` (it waits for a person's top-up; star topology).
    #[serde(default)]
    pub on_exhausted: OnExhausted,
    /// What the scripted agent does.
    #[serde(default)]
    pub script: Script,
    /// Which agent plays the task: `"scripted"` (the default) or `"llm"` (a model agent over
    /// `model`; see docs/models.md).
    #[serde(default)]
    pub agent: AgentKind,
    /// A model task's model: a `[models.NAME]` section (the task needs capability
    /// `model.NAME`).
    #[serde(default)]
    pub model: Option<String>,
    /// The `[tools.NAME]` a model task offers the model (default: every one whose capability
    /// the task holds).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// `tool_choice` of the model's first call that offers tools: `"auto"` (the default),
    /// `"none"`, or an offered tool's name (the model must call it).
    #[serde(default)]
    pub tool_choice: Option<String>,
    /// `max_tokens` of the task's model calls (default: the model's; at most the model's).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// How many of the task's model calls may offer tools (default 1).
    #[serde(default)]
    pub tool_rounds: Option<u32>,
    /// A model task's memory scope: its `[[memory.records]]` go in its prompt (docs/models.md).
    #[serde(default)]
    pub memory_scope: Option<String>,
}

fn default_role() -> String {
    "worker".to_string()
}

/// The `[fallback]` table: the plan version to switch to, once, when a task's store
/// precondition fails. It runs under the same `[run]` budget and capabilities (it cannot widen
/// them); tasks with the same id as completed tasks are carried over, not re-run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackSection {
    /// The new version's tasks.
    #[serde(default)]
    pub tasks: Vec<TaskSection>,
}

/// A whole plan file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Run settings.
    pub run: RunSection,
    /// Keys written to the run's store before it starts (what store preconditions check).
    #[serde(default)]
    pub data: std::collections::BTreeMap<String, serde_json::Value>,
    /// The tasks.
    #[serde(default)]
    pub tasks: Vec<TaskSection>,
    /// The plan to switch to when a store precondition fails.
    #[serde(default)]
    pub fallback: Option<FallbackSection>,
    /// Model endpoints by name (`[models.NAME]`).
    #[serde(default)]
    pub models: std::collections::BTreeMap<String, quorate_llm::ModelConfig>,
    /// Tools with a fixed answer that model tasks can call (`[tools.NAME]`).
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, quorate_llm::FixedToolConfig>,
    /// Memory records for model tasks (`[[memory.records]]`).
    #[serde(default)]
    pub memory: MemorySection,
}

/// The largest plan file `quorate` reads, in bytes (1 MiB).
pub const MAX_PLAN_FILE_BYTES: usize = 1 << 20;

/// A plan file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    /// The file is larger than [`MAX_PLAN_FILE_BYTES`] (checked before it is parsed).
    #[error("{path}: the plan file is {len} bytes; the limit is {max}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least this, if it was not read to the end).
        len: u64,
        /// The cap.
        max: usize,
    },
    /// An integer does not fit in an `i64`, the largest integer a TOML file holds (budgets are
    /// unsigned, but a plan file still takes them only up to 2^63-1).
    #[error(
        "{path}: line {line}: {field} = {literal} is out of range: plan files take integers \
         up to 2^63-1 (9223372036854775807)"
    )]
    IntegerTooLarge {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The key the integer is given for, as written (`a value` if it is not right after
        /// one, say inside an array).
        field: String,
        /// The integer as written.
        literal: String,
    },
    /// A task's text or value, or a `[data]` value, is over an envelope limit
    /// ([`Limits::default`]): the decoder's own error, with where it sits.
    #[error("{path}: {}{field}: {source}", .task.as_ref().map(|t| format!("task {t}: ")).unwrap_or_default())]
    Limit {
        /// The file.
        path: PathBuf,
        /// The task (`None` for a `[data]` value).
        task: Option<NodeId>,
        /// The field, as the file names it: `evidence[2]`, `script[0].params`, `data."k"`.
        field: String,
        /// Which limit, and the value seen.
        source: DecodeError,
    },
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, or a field is unknown, missing or of the wrong type.
    #[error("{path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the field and the line).
        message: String,
    },
    /// The plan is not valid (cycle, budget, capabilities...).
    #[error("{path}: {source}")]
    Plan {
        /// The file.
        path: PathBuf,
        /// What the plan check found.
        source: PlanError,
    },
    /// A `[run]` setting is out of range.
    #[error("{path}: run.{field} is {value}: {reason}")]
    Setting {
        /// The file.
        path: PathBuf,
        /// The setting, as the file names it.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What it must be (naming any other setting it depends on).
        reason: String,
    },
    /// A model task, a `[models.NAME]` or a `[tools.NAME]` section is not valid.
    #[error("{path}: {}{source}", .task.as_ref().map(|t| format!("task {t}: ")).unwrap_or_default())]
    Model {
        /// The file.
        path: PathBuf,
        /// The task (`None` for a section's name), boxed to keep the error small.
        task: Option<Box<NodeId>>,
        /// What is wrong.
        source: ModelError,
    },
    /// A task's script is not valid.
    #[error("{path}: task {task}: {source}")]
    Script {
        /// The file.
        path: PathBuf,
        /// The task.
        task: NodeId,
        /// What is wrong with the script.
        source: ScriptError,
    },
}

impl PlanFile {
    /// Parses `text` (named `path` in errors), and checks its size, integers and values
    /// against the limits the module docs give.
    pub fn parse(path: &Path, text: &str) -> Result<Self, PlanFileError> {
        if text.len() > MAX_PLAN_FILE_BYTES {
            return Err(PlanFileError::TooLarge {
                path: path.to_path_buf(),
                len: text.len() as u64,
                max: MAX_PLAN_FILE_BYTES,
            });
        }
        let file: Self = toml::from_str(text).map_err(|e| syntax::error(path, text, &e))?;
        limits::check(&file, &Limits::default()).map_err(|b| PlanFileError::Limit {
            path: path.to_path_buf(),
            task: b.task,
            field: b.field,
            source: b.source,
        })?;
        Ok(file)
    }

    /// Reads and parses `path` (a file over [`MAX_PLAN_FILE_BYTES`] is refused before more
    /// than that is read).
    pub fn load(path: &Path) -> Result<Self, PlanFileError> {
        let read = |source| PlanFileError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        file.take(MAX_PLAN_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() > MAX_PLAN_FILE_BYTES {
            let len = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
            return Err(PlanFileError::TooLarge {
                path: path.to_path_buf(),
                len,
                max: MAX_PLAN_FILE_BYTES,
            });
        }
        let text = String::from_utf8(bytes)
            .map_err(|e| read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Self::parse(path, &text)
    }

    /// The plan spec (tasks without their scripts).
    #[must_use]
    pub fn spec(&self) -> PlanSpec {
        self.spec_of(&self.tasks)
    }

    /// The fallback plan spec, if the file has one.
    #[must_use]
    pub fn fallback_spec(&self) -> Option<PlanSpec> {
        self.fallback.as_ref().map(|f| self.spec_of(&f.tasks))
    }

    fn spec_of(&self, tasks: &[TaskSection]) -> PlanSpec {
        PlanSpec {
            budget: self.run.budget,
            reserve: self.run.reserve,
            capabilities: self.run.capabilities.clone(),
            nodes: tasks
                .iter()
                .map(|t| NodeSpec {
                    id: t.id.clone(),
                    role: t.role.as_str().into(),
                    deps: t.deps.clone(),
                    capabilities: t.capabilities.clone(),
                    budget: t.budget,
                    preconditions: t.preconditions.clone(),
                    acceptance: t.acceptance.clone(),
                    goal: t.goal.as_deref().map(Into::into),
                    on_exhausted: t.on_exhausted,
                })
                .collect(),
        }
    }

    /// Validates the settings, the plan and the scripts; returns the plan and the script book
    /// over a fresh world.
    pub fn compile(&self, path: &Path) -> Result<(Plan, ScriptBook), PlanFileError> {
        self.check_settings(path)?;
        let plan = self
            .spec()
            .validate()
            .map_err(|source| PlanFileError::Plan {
                path: path.to_path_buf(),
                source,
            })?;
        if let Some(fallback) = self.fallback_spec() {
            fallback.validate().map_err(|source| PlanFileError::Plan {
                path: path.to_path_buf(),
                source,
            })?;
        }
        self.check_models(path)?;
        let mut book = ScriptBook::new(World::new());
        for t in self.all_tasks() {
            book.insert(t.id.clone(), t.script.clone())
                .map_err(|source| PlanFileError::Script {
                    path: path.to_path_buf(),
                    task: t.id.clone(),
                    source,
                })?;
        }
        let scripted = book.tools().map_err(|source| PlanFileError::Script {
            path: path.to_path_buf(),
            task: self.tasks[0].id.clone(),
            source,
        })?;
        let clash = self.tools.keys().find(|name| {
            scripted.get(name).is_some()
                || name
                    .strip_prefix("model.")
                    .is_some_and(|m| self.models.contains_key(m))
        });
        if let Some(tool) = clash {
            return Err(PlanFileError::Model {
                path: path.to_path_buf(),
                task: None,
                source: ModelError::ToolClash { tool: tool.clone() },
            });
        }
        Ok((plan, book))
    }

    /// Refuses `[run]` settings no run can use: no worker (or peer), no attempt, and an attempt
    /// timeout that is not longer than the call timeout (the attempt would be dispatched again
    /// while its call still runs; the new attempt's call is then refused as in flight). A
    /// `no_progress_limit` of 0 is allowed: it turns the no-progress check off.
    fn check_settings(&self, path: &Path) -> Result<(), PlanFileError> {
        let setting = |field, value, reason: String| PlanFileError::Setting {
            path: path.to_path_buf(),
            field,
            value,
            reason,
        };
        let at_least_one = [
            (
                "workers",
                self.run.workers as u64,
                "a run needs at least one worker (or peer)",
            ),
            (
                "max_attempts",
                u64::from(self.run.max_attempts),
                "a task needs at least one attempt",
            ),
        ];
        if let Some((field, value, reason)) =
            at_least_one.into_iter().find(|&(_, value, _)| value == 0)
        {
            return Err(setting(field, value, reason.to_owned()));
        }
        let (attempt, call) = (self.run.attempt_timeout_ms, self.run.call_timeout_ms);
        if attempt <= call {
            return Err(setting(
                "attempt_timeout_ms",
                attempt,
                format!(
                    "it must be longer than run.call_timeout_ms ({call}): an attempt that \
                     times out before its call does is dispatched again while the call still runs"
                ),
            ));
        }
        Ok(())
    }

    /// Every task of the file: the plan's, then those of the `[fallback]` whose id is not
    /// among them.
    fn all_tasks(&self) -> impl Iterator<Item = &TaskSection> {
        let fallback_only = self
            .fallback
            .iter()
            .flat_map(|f| &f.tasks)
            .filter(|f| !self.tasks.iter().any(|t| t.id == f.id));
        self.tasks.iter().chain(fallback_only)
    }

    /// Ids of every task of the file (the plan's and the `[fallback]`'s), each once.
    pub fn task_ids(&self) -> impl Iterator<Item = &NodeId> {
        self.all_tasks().map(|t| &t.id)
    }

    /// [`task_ids`](Self::task_ids) as strings, sorted: what an error about an unknown task
    /// lists.
    #[must_use]
    pub fn sorted_task_ids(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self.task_ids().map(ToString::to_string).collect();
        tasks.sort();
        tasks
    }

    /// Whether `id` names a task of the file (its plan's or its `[fallback]`'s).
    #[must_use]
    pub fn has_task(&self, id: &str) -> bool {
        self.task_ids().any(|t| t.as_str() == id)
    }

    /// The supervisor settings the file asks for, with the given approval policy.
    #[must_use]
    pub fn supervisor_config(&self, approvals: ApprovalPolicy) -> SupervisorConfig {
        SupervisorConfig {
            workers: self.run.workers,
            deadline_ms: self.run.deadline_ms,
            attempt_timeout_ms: self.run.attempt_timeout_ms,
            max_attempts: self.run.max_attempts,
            approvals,
            cancel_after_steps: None,
            top_ups: quorate_coordinator::TopUpPolicy::default(),
        }
    }

    /// The worker settings the file asks for.
    #[must_use]
    pub fn worker_config(&self) -> WorkerConfig {
        WorkerConfig {
            call_timeout: Duration::from_millis(self.run.call_timeout_ms),
            no_progress_limit: self.run.no_progress_limit,
        }
    }

    /// Evidence text by node index.
    #[must_use]
    pub fn evidence_text(&self) -> Vec<(u32, Vec<String>)> {
        self.tasks
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.evidence.is_empty())
            .map(|(i, t)| (i as u32, t.evidence.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use quorate_protocols::{Check, ResultKind};
    use serde_json::json;

    use super::*;

    /// Every field of `PlanSpec` and `NodeSpec`, under its serde name, must be a field of
    /// `RunSection` or `TaskSection` (`deny_unknown_fields` refuses any other) and come back
    /// unchanged from `PlanFile::spec`.
    #[test]
    fn sections_take_every_spec_field() {
        let node = NodeSpec::named("b")
            .after(&["a"])
            .with_role("reviewer")
            .with_capabilities(Capabilities::parse(["db.read"]).unwrap())
            .with_budget(Budget::new(5, 4, 3, 2))
            .with_preconditions(vec![Precondition::KeyExists { key: "k".into() }])
            .with_acceptance(Acceptance {
                kinds: vec![ResultKind::Suggestion],
                checks: vec![Check::NonEmpty],
            })
            .with_goal("review the draft")
            .with_on_exhausted(quorate_protocols::OnExhausted::Ask);
        let spec = PlanSpec {
            budget: Budget::new(50, 40, 30, 20),
            reserve: Budget::steps(1),
            capabilities: Capabilities::parse(["db.read", "db.save"]).unwrap(),
            nodes: vec![node],
        };
        let mut run = serde_json::to_value(&spec).unwrap();
        let tasks = run.as_object_mut().unwrap().remove("nodes").unwrap();
        let file: PlanFile = serde_json::from_value(json!({ "run": run, "tasks": tasks }))
            .expect("the sections take every spec field");
        assert_eq!(file.spec(), spec);
    }
}
