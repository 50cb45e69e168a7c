//! The simulated world scripted tools act on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use quorate_protocols::{ActionId, Budget, Capability, Payload};
use serde_json::Value;

use super::CallOutcome;
use crate::tool::{SideEffect, Tool, ToolAnswer, ToolFuture};

/// One effect a scripted tool committed.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CommittedEffect {
    /// The action it was committed under.
    pub action: ActionId,
    /// The tool.
    pub tool: String,
    /// The parameters (shared with the call's request).
    pub params: Payload,
    /// What the tool answers for it (shared with the answer).
    pub output: Payload,
}

/// What was planned for an action (unplanned: `ok`, `null`, free, at once), and how many
/// times it was called.
#[derive(Clone, Debug, Default)]
struct Planned {
    call: PlannedCall,
    calls: u32,
}

/// How a scripted tool answers the first call of an action (see [`World::plan`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlannedCall {
    /// The outcome.
    pub outcome: CallOutcome,
    /// What the tool answers (shared with each answer).
    pub output: Payload,
    /// The cost it reports.
    pub cost: Budget,
    /// How long it takes to answer.
    pub latency: Duration,
}

/// Where a world's committed effects live when several processes share it: the store of record
/// (an etcd cluster, for worker processes; see docs/distributed.md). An action commits at most
/// once across every process that uses the store, and a query by action id finds what any of
/// them committed, so a worker that takes a task over from a lost one learns what it did.
///
/// The calls block until the store answered: an implementation that cannot reach its store must
/// not return (it ends the process, as [`crate::ActionJournal`] does), since a tool that acts on
/// an effect it could not record would break exactly-once.
pub trait EffectStore: Send + Sync + std::fmt::Debug {
    /// Commits `effect` under its action unless an effect is committed under that action
    /// already (by any process): `true` if this call committed it.
    fn create(&self, effect: &CommittedEffect) -> bool;
    /// Commits `effect` once more under its action (a non-idempotent tool called again: a
    /// duplicate effect, kept beside the first so a check counts it).
    fn again(&self, effect: &CommittedEffect);
    /// The effect committed under `action`, by any process, if any.
    fn find(&self, action: &ActionId) -> Option<CommittedEffect>;
}

#[derive(Debug, Default)]
struct State {
    planned: HashMap<ActionId, Planned>,
    /// The effects committed by this process's tools.
    effects: Vec<CommittedEffect>,
    /// A durable run's journal: each effect is written to it as it commits.
    journal: Option<std::sync::Arc<dyn crate::ActionJournal>>,
    /// The store of record the effects are committed to, if the world is shared by processes.
    store: Option<Arc<dyn EffectStore>>,
}

/// Shared, in-memory world: what scripted agents planned for each action and what scripted
/// tools committed. Cloning shares it. The lock is never held across an `.await` (tools do
/// their work before returning their future).
#[derive(Clone, Debug, Default)]
pub struct World {
    state: Arc<Mutex<State>>,
}

impl World {
    /// An empty world.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Plans how the tool answers the first call of `action`, at once. The first plan for an
    /// id wins (a later attempt replaying the same script plans the same thing).
    pub fn plan(&self, action: ActionId, outcome: CallOutcome, output: Payload, cost: Budget) {
        self.plan_call(
            action,
            PlannedCall {
                outcome,
                output,
                cost,
                latency: Duration::ZERO,
            },
        );
    }

    /// [`plan`](Self::plan), with every part of the answer, its latency included.
    pub fn plan_call(&self, action: ActionId, call: PlannedCall) {
        self.lock()
            .planned
            .entry(action)
            .or_insert(Planned { call, calls: 0 });
    }

    /// Makes this world durable: every effect committed from now on is written to `journal`
    /// before it counts as committed, and `restored` (the effects a crashed process committed)
    /// are committed already.
    pub fn set_journal(
        &self,
        journal: std::sync::Arc<dyn crate::ActionJournal>,
        restored: Vec<CommittedEffect>,
    ) {
        let mut state = self.lock();
        state.effects.extend(restored);
        state.journal = Some(journal);
    }

    /// Shares this world with other processes through `store`: from now on an effect commits
    /// in the store (at most once per action across the processes; see [`EffectStore`]) and a
    /// query reads the store. [`World::effects`] still lists what this process committed.
    pub fn set_store(&self, store: Arc<dyn EffectStore>) {
        self.lock().store = Some(store);
    }

    /// Every effect committed by this process, in commit order.
    #[must_use]
    pub fn effects(&self) -> Vec<CommittedEffect> {
        self.lock().effects.clone()
    }

    /// How many effects were committed under `action` (more than one is a duplicate effect).
    #[must_use]
    pub fn effects_for(&self, action: &ActionId) -> usize {
        self.lock()
            .effects
            .iter()
            .filter(|e| e.action == *action)
            .count()
    }

    /// How many effects `tool` committed.
    #[must_use]
    pub fn effects_of(&self, tool: &str) -> usize {
        self.lock()
            .effects
            .iter()
            .filter(|e| e.tool == tool)
            .count()
    }
}

/// A tool that answers as the script planned, committing effects to a [`World`].
///
/// Its capability is its name. First call of an action: as planned (unplanned: `ok` with a
/// null output). Later calls of the same action (retries): `ok`; an idempotent tool commits
/// nothing more, a non-idempotent one commits again (that is what the gate must prevent).
/// Read-only tools never commit. [`Tool::query`] reports a committed effect by id.
#[derive(Clone, Debug)]
pub struct ScriptedTool {
    name: Capability,
    side_effect: SideEffect,
    world: World,
}

impl ScriptedTool {
    /// A scripted tool named (and needing capability) `name`.
    #[must_use]
    pub fn new(name: Capability, side_effect: SideEffect, world: World) -> Self {
        Self {
            name,
            side_effect,
            world,
        }
    }

    /// Carries out a call of `action` (its effect commits now) and returns the answer, if
    /// any, with how long to wait before giving it.
    fn answer_now(&self, action: ActionId, params: Payload) -> (Option<ToolAnswer>, Duration) {
        let mut state = self.world.lock();
        let plan = state.planned.entry(action).or_default();
        plan.calls += 1;
        let (outcome, latency) = if plan.calls == 1 {
            (plan.call.outcome, plan.call.latency)
        } else {
            (CallOutcome::Ok, Duration::ZERO)
        };
        let (output, cost) = (plan.call.output.clone(), plan.call.cost);
        let writes = matches!(outcome, CallOutcome::Ok | CallOutcome::TimeoutAfterCommit)
            && self.side_effect.writes();
        let effect = CommittedEffect {
            action,
            tool: self.name.to_string(),
            params,
            output: output.clone(),
        };
        let idempotent = self.side_effect == SideEffect::IdempotentWrite;
        let commit = match &state.store {
            _ if !writes => false,
            // The store of record decides: one effect per action across every process.
            Some(store) => {
                let first = store.create(&effect);
                if !first && !idempotent {
                    store.again(&effect);
                }
                first || !idempotent
            }
            None => !idempotent || !state.effects.iter().any(|e| e.action == action),
        };
        if commit {
            if let Some(journal) = &state.journal {
                journal.effect(&effect);
            }
            state.effects.push(effect);
        }
        let answer = match outcome {
            CallOutcome::Ok => Some(ToolAnswer::Ok {
                output,
                cost,
                changed: commit,
            }),
            CallOutcome::OkButUnchanged => Some(ToolAnswer::Ok {
                output,
                cost,
                changed: false,
            }),
            CallOutcome::Error => Some(ToolAnswer::Err {
                class: "scripted".to_owned(),
                message: match output.value() {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
            }),
            CallOutcome::TimeoutAfterCommit | CallOutcome::TimeoutBeforeCommit => None,
        };
        (answer, latency)
    }
}

impl Tool for ScriptedTool {
    fn name(&self) -> &str {
        self.name.as_str()
    }

    fn capability(&self) -> Capability {
        self.name.clone()
    }

    fn side_effect(&self) -> SideEffect {
        self.side_effect
    }

    fn call(&self, action: ActionId, params: Payload) -> ToolFuture<ToolAnswer> {
        match self.answer_now(action, params) {
            (Some(answer), latency) if latency.is_zero() => Box::pin(std::future::ready(answer)),
            (Some(answer), latency) => Box::pin(async move {
                tokio::time::sleep(latency).await;
                answer
            }),
            (None, _) => Box::pin(std::future::pending()),
        }
    }

    fn query(&self, action: ActionId) -> ToolFuture<Option<ToolAnswer>> {
        let state = self.world.lock();
        let found = match &state.store {
            Some(store) => store.find(&action),
            None => state.effects.iter().find(|e| e.action == action).cloned(),
        };
        let found = found.map(|e| ToolAnswer::Ok {
            output: e.output,
            cost: Budget::ZERO,
            changed: true,
        });
        Box::pin(std::future::ready(found))
    }
}
