//! Running a plan file end to end on the embedded default (in-memory store, actix, scripted
//! agents), as `quorate run` does.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use quorate_coordinator::chaos::ChaosConfig;
use quorate_coordinator::{
    run_peer, run_star, ApprovalPolicy, RunError, RunOptions, RunOutput, TopUpError, TopUpPolicy,
};
use quorate_workers::{AgentRegistry, World};

use crate::plan_file::{PlanFile, PlanFileError, Topology};

/// How `--approve` answers approval requests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Approve {
    /// Not given: nothing is decided; the run stops with `waiting-approval`.
    #[default]
    Ask,
    /// `all`.
    All,
    /// `none`: every request is rejected (the task is cancelled).
    None,
    /// `ID,...`: approve these tasks, reject the others.
    Tasks(HashSet<String>),
}

/// `all`, `none`, or task ids separated by commas (an empty id, or `all` or `none` among ids, is
/// refused; whether each id names a task is checked against the plan, see [`Approve::check`]).
///
/// ```
/// use quorate::runner::Approve;
/// assert_eq!("all".parse::<Approve>(), Ok(Approve::All));
/// assert_eq!(
///     "refund, ship".parse::<Approve>(),
///     Ok(Approve::Tasks(["refund".to_string(), "ship".to_string()].into())),
/// );
/// assert!("a,,b".parse::<Approve>().unwrap_err().contains("empty task id"));
/// assert!("none,refund".parse::<Approve>().unwrap_err().contains("not both"));
/// ```
impl FromStr for Approve {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "all" => return Ok(Approve::All),
            "none" => return Ok(Approve::None),
            "" => return Err("needs all, none or a comma-separated list of task ids".into()),
            _ => {}
        }
        let mut ids = HashSet::new();
        for id in s.split(',').map(str::trim) {
            match id {
                "" => return Err(format!("empty task id in {s:?}")),
                "all" | "none" => return Err(format!("{s:?}: all or none, or task ids, not both")),
                id => ids.insert(id.to_string()),
            };
        }
        Ok(Approve::Tasks(ids))
    }
}

impl Approve {
    /// Refuses a task id that names no task of any of `files` (a plan file's plan or its
    /// `[fallback]`): a typo would otherwise reject the approval it meant to give.
    ///
    /// # Errors
    /// [`RunFileError::UnknownApproval`] naming the first such id (in sorted order).
    pub fn check(&self, files: &[(&Path, &PlanFile)]) -> Result<(), RunFileError> {
        let Approve::Tasks(ids) = self else {
            return Ok(());
        };
        let unknown = ids
            .iter()
            .filter(|id| !files.iter().any(|(_, f)| f.has_task(id)))
            .min();
        match unknown {
            Some(id) => {
                let mut tasks: Vec<String> = files
                    .iter()
                    .flat_map(|(_, f)| f.sorted_task_ids())
                    .collect();
                tasks.sort();
                tasks.dedup();
                Err(RunFileError::UnknownApproval {
                    plans: files
                        .iter()
                        .map(|(p, _)| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    id: id.clone(),
                    tasks,
                })
            }
            None => Ok(()),
        }
    }

    /// The same answers, for a run of `file` only: listed ids it has no task for are dropped
    /// (`quorate eval` checks its list against all its plans, then runs each with its part).
    #[must_use]
    pub fn for_file(&self, file: &PlanFile) -> Approve {
        match self {
            Approve::Tasks(ids) => {
                Approve::Tasks(ids.iter().filter(|id| file.has_task(id)).cloned().collect())
            }
            other => other.clone(),
        }
    }
}

impl From<Approve> for ApprovalPolicy {
    fn from(a: Approve) -> Self {
        match a {
            Approve::Ask => ApprovalPolicy::Ask,
            Approve::All => ApprovalPolicy::All,
            Approve::None => ApprovalPolicy::None,
            Approve::Tasks(ids) => ApprovalPolicy::Nodes(ids),
        }
    }
}

/// Everything `quorate run` takes besides the file.
#[derive(Clone, Debug, Default)]
pub struct RunArgs {
    /// Chaos seed.
    pub seed: u64,
    /// Chaos settings.
    pub chaos: Option<ChaosConfig>,
    /// Approval answers.
    pub approve: Approve,
    /// Cancel after this many supervisor steps.
    pub cancel_after_steps: Option<u64>,
    /// JSONL trace path.
    pub trace: Option<PathBuf>,
    /// Threads for the workers besides the supervisor's (star topology; see
    /// [`RunOptions::worker_threads`](crate::coordinator::RunOptions::worker_threads)).
    pub worker_threads: usize,
    /// Keep the run in a store file (`--store`), or continue one kept there.
    pub durable: Option<DurableArgs>,
    /// Answers to top-up requests (`resume --grant`, `--reject`).
    pub top_ups: TopUpPolicy,
}

/// A run kept in a store file: new (`resume: None`) or resumed from what the file holds.
#[derive(Clone, Debug)]
pub struct DurableArgs {
    /// The file.
    pub store: crate::durable::RunStore,
    /// The run's id.
    pub run: quorate_protocols::RunId,
    /// The log and results to resume from.
    pub resume: Option<quorate_coordinator::ResumeFrom>,
    /// The actions the run's workers sent to tools before.
    pub intents: Vec<quorate_workers::ActionIntent>,
    /// The effects the run's world committed before.
    pub effects: Vec<quorate_workers::scripted::CommittedEffect>,
}

impl DurableArgs {
    /// The runtime's side of this kept run: one journal on the store for the supervisor's
    /// events and results, the workers' action intents and the effects `world` commits (it
    /// starts from those committed before).
    pub(crate) fn journaled(&self, world: &World) -> quorate_coordinator::Durable {
        let journal = std::sync::Arc::new(self.store.journal(self.run));
        world.set_journal(journal.clone(), self.effects.clone());
        quorate_coordinator::Durable {
            run: self.run,
            journal: journal.clone(),
            actions: journal,
            restored_actions: std::sync::Arc::new(self.intents.clone()),
            resume: self.resume.clone(),
        }
    }
}

/// A plan file could not be run.
#[derive(Debug, thiserror::Error)]
pub enum RunFileError {
    /// The plan file was refused.
    #[error(transparent)]
    PlanFile(#[from] PlanFileError),
    /// `--approve` names a task the plan files do not have.
    #[error("--approve names {id:?}, which is not a task of {plans} (tasks: {})", tasks.join(", "))]
    UnknownApproval {
        /// The plan files, as given.
        plans: String,
        /// The id given.
        id: String,
        /// The task ids of every plan file given, sorted, each once.
        tasks: Vec<String>,
    },
    /// The runtime failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The store file (`--store`) could not be used.
    #[error(transparent)]
    Durable(#[from] crate::durable::DurableError),
    /// `--grant` asks more than the run has left.
    #[error(transparent)]
    TopUp(#[from] TopUpError),
    /// `--grant` or `--reject` names a task the plan file does not have, or names it twice.
    #[error("{flag} names {id:?}, which is not a task of {plan} (tasks: {})", tasks.join(", "))]
    UnknownTopUpTask {
        /// The flag (`--grant` or `--reject`).
        flag: &'static str,
        /// The plan file, as given.
        plan: String,
        /// The id given.
        id: String,
        /// The task ids of the plan file, sorted.
        tasks: Vec<String>,
    },
    /// A task uses a model, but this build has no model client (cargo feature `llm`).
    #[error(
        "the plan's tasks use a model (agent = \"llm\"), but this quorate was built without \
         the model client: build with --features llm"
    )]
    NoModelClient,
    /// A `model.NAME` tool could not be built (its API key variable is not set...).
    #[cfg(feature = "llm")]
    #[error(transparent)]
    ModelTool(#[from] quorate_llm::ModelToolError),
    /// A task is given two top-up answers.
    #[error("task {id:?} is given two answers (--grant and --reject, or one of them twice)")]
    TwoTopUpAnswers {
        /// The task.
        id: String,
    },
}

/// What a run of a plan file leaves: the runtime's output and the scripted tools' world.
#[derive(Debug)]
pub struct FileRun {
    /// Report, log, results, chaos counters.
    pub output: RunOutput,
    /// Every effect the scripted tools committed.
    pub world: World,
}

/// The run's options as the plan file and the command line give them (no durable store, no
/// shared store): what an in-process run and a supervisor process over NATS both start from.
pub(crate) fn run_options(file: &PlanFile, args: &RunArgs) -> RunOptions {
    let mut supervisor = file.supervisor_config(args.approve.clone().into());
    supervisor.cancel_after_steps = args.cancel_after_steps;
    supervisor.top_ups = args.top_ups.clone();
    RunOptions {
        supervisor,
        worker: file.worker_config(),
        chaos: args.chaos,
        seed: args.seed,
        trace: args.trace.clone(),
        evidence_text: file.evidence_text(),
        data: file
            .data
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        fallback: file.fallback_spec(),
        worker_threads: args.worker_threads,
        durable: None,
        store: None,
    }
}

/// Loads, checks and runs `path`.
pub fn run_file(path: &Path, args: &RunArgs) -> Result<FileRun, RunFileError> {
    let file = PlanFile::load(path)?;
    run_plan_file(path, &file, args)
}

/// Checks and runs a plan file already parsed from `path` (which names it in errors), as it
/// is: a caller may have changed it (`quorate eval` sets `run.topology`).
pub fn run_plan_file(
    path: &Path,
    file: &PlanFile,
    args: &RunArgs,
) -> Result<FileRun, RunFileError> {
    let compiled = file.compile(path)?;
    run_compiled(path, file, compiled, args)
}

/// Runs `file`, loaded from `path` and compiled by [`PlanFile::compile`] (`quorate run` prints
/// the file's [warnings](PlanFile::warnings) in between).
pub fn run_compiled(
    path: &Path,
    file: &PlanFile,
    (plan, book): (quorate_protocols::Plan, quorate_workers::ScriptBook),
    args: &RunArgs,
) -> Result<FileRun, RunFileError> {
    args.approve.check(&[(path, file)])?;
    let mut options = run_options(file, args);
    let world = book.world().clone();
    options.durable = args.durable.as_ref().map(|d| d.journaled(&world));
    let models = model_tools(file)?;
    let model_agents = std::sync::Arc::new(file.model_agents());
    let parts = || {
        let mut tools = book.tools().expect("scripts were checked by compile");
        for (name, config) in &file.tools {
            let name = quorate_protocols::Capability::new(name.clone())
                .expect("tool names were checked by compile");
            let tool = quorate_llm::FixedTool::new(name, config, world.clone());
            tools
                .register(std::sync::Arc::new(tool))
                .expect("tool names were checked by compile");
        }
        for tool in &models {
            tools
                .register(tool.clone())
                .expect("model names were checked by compile");
        }
        let scripts = book.factory();
        let agents = model_agents.clone();
        let factory = move |a: &quorate_workers::Assignment| -> Box<dyn quorate_workers::Agent> {
            match agents.get(&a.node) {
                Some(config) => Box::new(quorate_llm::LlmAgent::new(config.clone())),
                None => quorate_workers::AgentFactory::create(&scripts, a),
            }
        };
        (AgentRegistry::new().with_fallback(factory), tools)
    };
    let output = match file.run.topology {
        Topology::Star => run_star(plan, options, parts)?,
        Topology::Peer => run_peer(plan, options, parts)?,
    };
    Ok(FileRun { output, world })
}

/// The `model.NAME` tools of the file's `[models]` that its tasks use (each reads its API key
/// variable now).
#[cfg(feature = "llm")]
fn model_tools(
    file: &PlanFile,
) -> Result<Vec<std::sync::Arc<dyn quorate_workers::Tool>>, RunFileError> {
    let mut tools: Vec<std::sync::Arc<dyn quorate_workers::Tool>> = Vec::new();
    for (name, config) in &file.models {
        let tool = quorate_llm::ModelTool::new(name, config.clone())?;
        tools.push(std::sync::Arc::new(tool));
    }
    Ok(tools)
}

/// Without the feature `llm` there is no model client: a file whose tasks use a model is
/// refused before anything runs.
#[cfg(not(feature = "llm"))]
fn model_tools(
    file: &PlanFile,
) -> Result<Vec<std::sync::Arc<dyn quorate_workers::Tool>>, RunFileError> {
    if file.uses_models() {
        return Err(RunFileError::NoModelClient);
    }
    Ok(Vec::new())
}

/// The top-up answers `grants` and `rejects` (`--grant TASK=BUDGET`, `--reject TASK`) for a run
/// of `file` (loaded from `path`), as one policy.
///
/// # Errors
/// [`RunFileError::UnknownTopUpTask`]: an id names no task of the file;
/// [`RunFileError::TwoTopUpAnswers`]: a task is named twice.
pub fn top_up_policy(
    path: &Path,
    file: &PlanFile,
    grants: &[Grant],
    rejects: &[String],
) -> Result<TopUpPolicy, RunFileError> {
    use quorate_coordinator::TopUp;
    let answers = grants
        .iter()
        .map(|g| ("--grant", g.task.clone(), TopUp::Grant(g.budget)))
        .chain(
            rejects
                .iter()
                .map(|t| ("--reject", t.clone(), TopUp::Reject)),
        );
    let mut policy = TopUpPolicy::default();
    for (flag, id, answer) in answers {
        if !file.has_task(&id) {
            return Err(RunFileError::UnknownTopUpTask {
                flag,
                plan: path.display().to_string(),
                id,
                tasks: file.sorted_task_ids(),
            });
        }
        if policy.0.insert(id.clone(), answer).is_some() {
            return Err(RunFileError::TwoTopUpAnswers { id });
        }
    }
    Ok(policy)
}

/// Checks `answers` against the run that `from` resumes (the file's plan, replayed from its
/// log), changing nothing: the pure check of
/// [`SupervisorCore::check_top_ups`](quorate_coordinator::SupervisorCore::check_top_ups).
/// Returns the tasks `answers` names that are not waiting for a top-up.
///
/// # Errors
/// [`RunFileError::TopUp`]: a grant is more than the run has left; or the log does not replay.
pub fn check_top_ups(
    path: &Path,
    file: &PlanFile,
    from: &quorate_coordinator::ResumeFrom,
    answers: &TopUpPolicy,
) -> Result<Vec<String>, RunFileError> {
    use quorate_protocols::{Role, Sender};
    let (plan, _) = file.compile(path)?;
    let config = file.supervisor_config(ApprovalPolicy::Ask);
    // A throwaway core that only replays the log: its own ids are never sent anywhere, so a
    // fixed seed serves.
    let mut ids = quorate_protocols::IdSource::seeded(0);
    let mut sender = |role| Sender {
        agent: ids.agent_id(),
        role,
    };
    let me = sender(Role::Supervisor);
    let workers = (0..config.workers.max(1))
        .map(|_| sender(Role::Worker))
        .collect();
    let run = from
        .events
        .first()
        .map_or_else(|| ids.run_id(), |e| e.run_id);
    let mut core =
        quorate_coordinator::SupervisorCore::new(run, plan, config, me, workers, ids.fork());
    if let Some(fallback) = file.fallback_spec() {
        core.set_fallback_plan(fallback);
    }
    let results: std::collections::HashMap<&str, &serde_json::Value> =
        from.results.iter().map(|(k, v)| (k.as_str(), v)).collect();
    core.replay(&from.events, |key| {
        results.get(key).map(|v| (*v).clone().into())
    })
    .map_err(RunError::from)?;
    Ok(core.check_top_ups(answers)?)
}

/// `--grant TASK=COMPONENT:N[,COMPONENT:N...]`: a top-up for a task that ran out of its slice.
/// Components: `steps`, `tool_calls`, `tokens`, `cost`; those not named are 0.
///
/// ```
/// use quorate::runner::Grant;
/// use quorate::protocols::Budget;
/// let g: Grant = "enrich=steps:5,tokens:2000".parse().unwrap();
/// assert_eq!((g.task.as_str(), g.budget), ("enrich", Budget::new(5, 0, 2000, 0)));
/// assert!("enrich".parse::<Grant>().unwrap_err().contains("TASK=COMPONENT:N"));
/// assert!("enrich=hours:5".parse::<Grant>().unwrap_err().contains("hours"));
/// assert!("enrich=steps:0".parse::<Grant>().unwrap_err().contains("nothing"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The task's id.
    pub task: String,
    /// The top-up.
    pub budget: quorate_protocols::Budget,
}

impl FromStr for Grant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage = || {
            format!("{s:?}: expected TASK=COMPONENT:N[,COMPONENT:N...], e.g. enrich=steps:5,tokens:2000")
        };
        let (task, amounts) = s.split_once('=').ok_or_else(usage)?;
        let task = task.trim();
        if task.is_empty() {
            return Err(usage());
        }
        let mut budget = quorate_protocols::Budget::ZERO;
        for part in amounts.split(',') {
            let (name, n) = part.split_once(':').ok_or_else(usage)?;
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|e| format!("{s:?}: {:?} is not a count: {e}", n.trim()))?;
            let slot = match name.trim() {
                "steps" => &mut budget.steps,
                "tool_calls" => &mut budget.tool_calls,
                "tokens" => &mut budget.tokens,
                "cost" => &mut budget.cost,
                other => {
                    return Err(format!(
                    "{s:?}: {other:?} is not a budget component (steps, tool_calls, tokens, cost)"
                ))
                }
            };
            *slot = n;
        }
        if budget.is_zero() {
            return Err(format!("{s:?}: grants nothing"));
        }
        Ok(Grant {
            task: task.to_string(),
            budget,
        })
    }
}
