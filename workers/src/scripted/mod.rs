//! The built-in scripted agent and its simulated tools, driven by a plan file.
//!
//! A plan node carries `script = [ ... ]`: a list of [`Step`]s, each an inline TOML table whose
//! `do` key names the step. The [`ScriptedAgent`] proposes the steps in order; the
//! [`ScriptedTool`]s answer as the steps say, applying effects to a shared in-memory [`World`]
//! that records every committed effect per `ActionId`.
//!
//! ```toml
//! [[tasks]]
//! id = "save"
//! capabilities = ["db.save"]
//! budget = { steps = 10, tool_calls = 5 }
//! script = [
//!   { do = "call", tool = "db.save", params = { id = 7 }, outcome = "timeout-after-commit" },
//!   { do = "answer", value = "saved" },
//! ]
//! ```
//!
//! TOML inline tables must fit on one line; a long step can be written as an array of tables
//! instead (`[[tasks.script]]` followed by `do = "call"`, `tool = ...` lines).
//!
//! Every tool named in a script is a [`ScriptedTool`] whose capability is its own name: tool
//! `db.save` needs capability `db.save`. Tool names must therefore be valid capability names
//! (`a-z 0-9 . _ - :`, at most 64 bytes).
//!
//! Steps:
//!
//! * `call` — propose a tool call ([`CallStep`]):
//!   * `tool` (string, required): the tool name, also its capability.
//!   * `params` (table, default `{}`): the parameters (their digest binds the `ActionId`).
//!   * `outcome` (default `"ok"`): how the tool answers the first call of this action —
//!     `"ok"` (commits one effect, answers `output`, changed), `"error"` (commits nothing,
//!     answers error class `scripted` with `output` as the message), `"timeout-after-commit"`
//!     (commits the effect, never answers; a query then reports it), `"timeout-before-commit"`
//!     (commits nothing, never answers; a query reports nothing), `"ok-but-unchanged"` (answers
//!     ok, commits nothing, `changed = false`). A second call with the same `ActionId` (a retry)
//!     answers ok.
//!   * `output` (any value, default none/null): what the tool answers.
//!   * `cost` (budget table, default `{}`): tokens and cost the call reports
//!     (`{ tokens = 10, cost = 2 }`); steps and tool calls are counted by the runtime.
//!   * `needs-approval` (bool, default `false`): park for human approval before the call runs.
//!   * `repeat` (integer >= 1, default `1`): propose the same call this many times (each at its
//!     own step, so with its own `ActionId`).
//!   * `side-effect` (`"read-only"`, `"idempotent-write"` or `"non-idempotent-write"`, default
//!     `"idempotent-write"`): the tool's class. All steps naming one tool must agree.
//!   * `latency-ms` (integer, default `0`; `latency_ms` is taken too): how long the tool takes
//!     to answer the first call of this action (a tokio sleep in the tool's future). The
//!     effect, if any, commits when the call starts; only the answer waits. A latency above the
//!     run's `call_timeout_ms` makes the call's outcome unknown: the worker's query then finds
//!     the effect (recovered) or nothing. A retry answers at once.
//! * `answer` — finish ([`AnswerStep`]): `kind` (`"suggestion"`, `"verified-conclusion"`,
//!   `"execution-proposal"`, `"execution-receipt"`; default `"verified-conclusion"`) and
//!   `value` (any value, required).
//! * `fail` — fail the task: `observation` (string, required).
//! * `duplicate-reply` — fault: the worker sends its final reply twice, same dedupe key.
//! * `late-reply` — fault: after a cancel the worker still sends an answer (after the
//!   `Cancelled` reply), so a supervisor can prove it rejects it.
//!
//! When the steps run out the agent answers the last tool output (as a verified conclusion: it
//! was observed by the runtime), or fails with the last error, or with `"script exhausted"`.
//!
//! Every answer cites what it rests on (the reply's `evidence`): the call whose output came
//! last (or what the sub-tasks gathered by the last `delegate` cited), or, when no call
//! answered, the task's inputs. An answer with neither cites nothing, and acceptance takes a
//! `verified-conclusion` that cites nothing as a suggestion (docs/reliability.md).

mod agent;
mod world;

pub use agent::{ScriptBook, ScriptedAgent};
pub use world::{CommittedEffect, EffectStore, PlannedCall, ScriptedTool, World};

use quorate_protocols::{Budget, Capability, CapabilityError, ResultKind};
use serde::{Deserialize, Serialize};

use crate::tool::SideEffect;

/// A node's script: the steps in order. Serialized as a plain list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Script {
    /// The steps.
    pub steps: Vec<Step>,
}

/// One step of a [`Script`], tagged by its `do` key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Step {
    /// Propose a tool call.
    Call(CallStep),
    /// Finish with an answer.
    Answer(AnswerStep),
    /// Fail.
    Fail(FailStep),
    /// Delegate sub-tasks (each with its own script) and wait for all of them.
    Delegate(DelegateStep),
    /// Fault: send the final reply twice with the same dedupe key.
    DuplicateReply {},
    /// Fault: after a cancel, still send an answer.
    LateReply {},
}

/// How a scripted tool answers the first call of an action.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallOutcome {
    /// Commit and answer ok.
    #[default]
    Ok,
    /// Commit nothing, answer an error.
    Error,
    /// Commit, then never answer.
    TimeoutAfterCommit,
    /// Commit nothing and never answer.
    TimeoutBeforeCommit,
    /// Commit nothing, answer ok with `changed = false`.
    OkButUnchanged,
}

/// A `call` step. See the [module docs](self) for each field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CallStep {
    /// Tool name (also its capability).
    pub tool: String,
    /// Parameters (shared by every proposal of the step).
    #[serde(default = "empty_object")]
    pub params: quorate_protocols::Payload,
    /// How the tool answers.
    #[serde(default)]
    pub outcome: CallOutcome,
    /// What it answers (shared by every answer of the step).
    #[serde(default)]
    pub output: quorate_protocols::Payload,
    /// Reported cost.
    #[serde(default)]
    pub cost: Budget,
    /// Ask for approval first.
    #[serde(default)]
    pub needs_approval: bool,
    /// How many times to propose it.
    #[serde(default = "one")]
    pub repeat: u32,
    /// The tool's side-effect class.
    #[serde(default)]
    pub side_effect: SideEffect,
    /// How long the tool takes to answer the first call, in milliseconds (0: at once).
    #[serde(default, alias = "latency_ms", skip_serializing_if = "is_zero")]
    pub latency_ms: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An `answer` step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct AnswerStep {
    /// What the answer claims to be.
    #[serde(default = "verified")]
    pub kind: ResultKind,
    /// The answer.
    pub value: serde_json::Value,
}

/// A `delegate` step: sub-tasks carved from this task's slice, each played by its own script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct DelegateStep {
    /// The sub-tasks.
    pub subtasks: Vec<ScriptedSubtask>,
}

/// One sub-task of a `delegate` step. Its node id is `<parent node>.<name>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ScriptedSubtask {
    /// Unique among its siblings.
    pub name: String,
    /// Role (the scripted agent serves every role).
    #[serde(default = "default_role")]
    pub role: String,
    /// Capabilities it asks for (must be within the parent task's).
    #[serde(default)]
    pub capabilities: quorate_protocols::Capabilities,
    /// Its slice, carved out of the parent task's.
    #[serde(default)]
    pub budget: Budget,
    /// Its input.
    #[serde(default)]
    pub input: serde_json::Value,
    /// What its agent does.
    #[serde(default)]
    pub script: Script,
}

fn default_role() -> String {
    "worker".to_string()
}

/// A `fail` step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FailStep {
    /// The failing observation.
    pub observation: String,
}

fn empty_object() -> quorate_protocols::Payload {
    serde_json::Value::Object(serde_json::Map::new()).into()
}

const fn one() -> u32 {
    1
}

const fn verified() -> ResultKind {
    ResultKind::VerifiedConclusion
}

/// A script is not usable. The variants name the step (0-based) or tool at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// A delegated sub-task's name does not make a valid node id.
    #[error("sub-task name {name:?} does not make a valid node id (A-Z a-z 0-9 _ - .)")]
    BadSubtaskName {
        /// The name.
        name: String,
    },
    /// A tool name is not a valid capability name.
    #[error("step {step}: tool name {tool:?} is not a valid capability name: {source}")]
    BadToolName {
        /// The step.
        step: usize,
        /// The tool name.
        tool: String,
        /// Why.
        source: CapabilityError,
    },
    /// `repeat = 0`.
    #[error("step {step}: repeat must be at least 1")]
    ZeroRepeat {
        /// The step.
        step: usize,
    },
    /// Two steps give one tool different side-effect classes.
    #[error("tool {tool:?} is declared both {first:?} and {second:?}")]
    ConflictingSideEffect {
        /// The tool.
        tool: String,
        /// The class seen first.
        first: SideEffect,
        /// The other class.
        second: SideEffect,
    },
}

impl Script {
    /// The steps as a script.
    #[must_use]
    pub fn new(steps: Vec<Step>) -> Self {
        Self { steps }
    }

    /// Checks tool names and repeats, and returns each tool with its side-effect class.
    pub fn tools(&self) -> Result<Vec<(Capability, SideEffect)>, ScriptError> {
        let mut tools: Vec<(Capability, SideEffect)> = Vec::new();
        for s in &self.steps {
            if let Step::Delegate(d) = s {
                for sub in &d.subtasks {
                    for (name, side_effect) in sub.script.tools()? {
                        merge_tool(&mut tools, name, side_effect)?;
                    }
                }
            }
        }
        for (step, s) in self.steps.iter().enumerate() {
            let Step::Call(call) = s else { continue };
            if call.repeat == 0 {
                return Err(ScriptError::ZeroRepeat { step });
            }
            let name =
                Capability::new(call.tool.clone()).map_err(|source| ScriptError::BadToolName {
                    step,
                    tool: call.tool.clone(),
                    source,
                })?;
            merge_tool(&mut tools, name, call.side_effect)?;
        }
        Ok(tools)
    }
}

/// Adds `name` to `tools`, refusing a second, different side-effect class.
pub(crate) fn merge_tool(
    tools: &mut Vec<(Capability, SideEffect)>,
    name: Capability,
    side_effect: SideEffect,
) -> Result<(), ScriptError> {
    match tools.iter().find(|(n, _)| *n == name) {
        Some((_, first)) if *first != side_effect => Err(ScriptError::ConflictingSideEffect {
            tool: name.to_string(),
            first: *first,
            second: side_effect,
        }),
        Some(_) => Ok(()),
        None => {
            tools.push((name, side_effect));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
