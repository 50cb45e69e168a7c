//! Scenarios drawn from a seed: a small random plan DAG, one script per node, the supervisor's
//! settings and the fault schedule.

use quorate_coordinator::{ApprovalPolicy, SupervisorConfig};
use quorate_protocols::{Budget, Capabilities, NodeId, NodeSpec, Plan, PlanSpec, Precondition};
use quorate_workers::scripted::{AnswerStep, CallOutcome, CallStep, FailStep, Step};
use quorate_workers::{Script, ScriptBook, SideEffect, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

/// The tools every scenario knows, with their side-effect class.
pub const TOOLS: [(&str, SideEffect); 3] = [
    ("t.idem", SideEffect::IdempotentWrite),
    ("t.once", SideEffect::NonIdempotentWrite),
    ("t.read", SideEffect::ReadOnly),
];

/// Probabilities of the network and process faults of one schedule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultPlan {
    /// An envelope is lost.
    pub drop: f64,
    /// An envelope is delivered twice.
    pub dup: f64,
    /// An envelope is held back by a short extra delay.
    pub delay: f64,
    /// An envelope is held back long enough to be overtaken (past the attempt timeout).
    pub reorder: f64,
    /// A tool answer arrives only after its call timed out.
    pub late_answer: f64,
    /// A query by action id gets no answer.
    pub query_timeout: f64,
    /// Times (ms) at which a worker crashes, with the worker index.
    pub worker_crashes: [Option<(u64, usize)>; 2],
    /// Times (ms) at which the coordinator crashes (and resumes from the log).
    pub coordinator_crashes: [Option<u64>; 2],
    /// Time (ms) at which the user cancels the run.
    pub cancel_at: Option<u64>,
    /// Time (ms) at which a record that a task's store precondition guards appears in the store
    /// (another writer takes the lock), with the node whose lock it is ([`lock_key`]).
    pub store_change: Option<(u64, usize)>,
    /// A worker that stops at `.0` (ms): worker `.1` goes silent, its lease expires
    /// [`LEASE_MS`] later, and it comes back at `.2` (only slow) or never (lost for good).
    /// Drawn only with two workers or more, from an RNG of its own (the other faults of a seed
    /// are as they were before failover existed).
    pub worker_loss: Option<(u64, usize, Option<u64>)>,
}

/// How long a silent worker keeps its lease in the simulator.
pub const LEASE_MS: u64 = 300;

/// Everything one schedule runs: generated from its seed alone.
#[derive(Debug)]
pub struct Scenario {
    /// The plan.
    pub plan: Plan,
    /// The scripts per node (sharing `world`).
    pub book: ScriptBook,
    /// The world the scripted tools commit to.
    pub world: World,
    /// Supervisor settings.
    pub config: SupervisorConfig,
    /// Faults.
    pub faults: FaultPlan,
    /// The `[fallback]` plan the supervisor switches to (once) when a store precondition fails:
    /// drawn for 60 % of the schedules whose store change takes a guarded node's lock
    /// (`fallback_plan`).
    pub fallback: Option<PlanSpec>,
}

/// Draws a scenario. `liveness_heal` (ms) confines every fault to before that time.
pub fn scenario(rng: &mut ChaCha8Rng, liveness_heal: Option<u64>) -> Scenario {
    let n = rng.gen_range(2..=8usize);
    let world = World::new();
    let mut book = ScriptBook::new(world.clone());
    let run_caps = Capabilities::parse(TOOLS.iter().map(|(t, _)| *t)).expect("valid names");
    let mut nodes = Vec::with_capacity(n);
    let mut total = Budget::ZERO;
    for i in 0..n {
        let name = format!("n{i}");
        let mut deps = Vec::new();
        for d in 0..i {
            if deps.len() < 2 && rng.gen_bool(0.3) {
                deps.push(format!("n{d}"));
            }
        }
        let (script, calls) = script(rng, i, !deps.is_empty());
        let tight = rng.gen_bool(0.15);
        let tool_calls = if tight {
            calls.saturating_sub(1)
        } else {
            2 * calls + 2
        };
        let budget = Budget::new(calls + 6, tool_calls, 100, 10);
        total = total.saturating_add(&budget);
        let dep_refs: Vec<&str> = deps.iter().map(String::as_str).collect();
        let mut node = NodeSpec::named(&name).after(&dep_refs).with_budget(budget);
        node.capabilities = run_caps.clone();
        if rests_on_nothing(calls, !deps.is_empty()) {
            node.acceptance
                .kinds
                .push(quorate_protocols::ResultKind::Suggestion);
        }
        book.insert(NodeId::new(&name).expect("valid id"), script)
            .expect("generated scripts are valid");
        nodes.push(node);
    }
    let reserve = Budget::steps(4);
    let spec = PlanSpec {
        budget: total.saturating_add(&reserve),
        reserve,
        capabilities: run_caps,
        nodes,
    };
    // Store preconditions, drawn from a stream of their own, so the draws above (and every
    // schedule generated before these existed) stay as they were: some nodes are guarded by a
    // lock key that must stay absent, and sometimes another writer takes one of those locks
    // while the run is going.
    let mut guards = ChaCha8Rng::from_seed(rng.get_seed());
    guards.set_stream(1);
    let mut spec = spec;
    let mut guarded = Vec::new();
    for (i, node) in spec.nodes.iter_mut().enumerate() {
        if guards.gen_bool(0.3) {
            node.preconditions = vec![Precondition::KeyAbsent { key: lock_key(i) }];
            guarded.push(i);
        }
    }
    let store_change = (!guarded.is_empty() && guards.gen_bool(0.5)).then(|| {
        let node = guarded[guards.gen_range(0..guarded.len())];
        let latest = liveness_heal.unwrap_or(300).min(300);
        (guards.gen_range(0..latest), node)
    });
    let plan = spec.clone().validate().expect("generated plans are valid");
    // The fallback plan, from a stream of its own as well (the draws above stay as they were).
    let mut alt = ChaCha8Rng::from_seed(rng.get_seed());
    alt.set_stream(2);
    let fallback = store_change
        .filter(|_| alt.gen_bool(0.6))
        .map(|(_, g)| fallback_plan(&mut alt, &spec, g, &mut book));
    let approvals = match (liveness_heal.is_some(), rng.gen_range(0..4)) {
        (_, 0) => ApprovalPolicy::All,
        (_, 1) => ApprovalPolicy::None,
        (true, _) | (false, 2) => ApprovalPolicy::Nodes(
            (0..n)
                .filter(|_| rng.gen_bool(0.5))
                .map(|i| format!("n{i}"))
                .collect(),
        ),
        (false, _) => ApprovalPolicy::Ask,
    };
    let config = SupervisorConfig {
        workers: rng.gen_range(1..=3),
        deadline_ms: rng.gen_bool(0.1).then(|| rng.gen_range(300..3_000)),
        attempt_timeout_ms: 1_000,
        max_attempts: rng.gen_range(3..=6),
        approvals,
        cancel_after_steps: None,
        top_ups: Default::default(),
    };
    let horizon = liveness_heal.unwrap_or(4_000);
    let at = |rng: &mut ChaCha8Rng, p: f64| rng.gen_bool(p).then(|| rng.gen_range(0..horizon));
    let workers = config.workers;
    let crash1 = at(rng, 0.3).map(|t| (t, rng.gen_range(0..workers)));
    let crash2 = at(rng, 0.1).map(|t| (t, rng.gen_range(0..workers)));
    let coord1 = at(rng, 0.25);
    let coord2 = at(rng, 0.08);
    let cancel_at = if liveness_heal.is_some() {
        None
    } else {
        at(rng, 0.1)
    };
    let mut p = |hi: f64| {
        if rng.gen_bool(0.8) {
            rng.gen_range(0.0..hi)
        } else {
            0.0
        }
    };
    let faults = FaultPlan {
        drop: p(0.15),
        dup: p(0.2),
        delay: p(0.3),
        reorder: p(0.15),
        late_answer: p(0.1),
        query_timeout: p(0.1),
        worker_crashes: [crash1, crash2],
        coordinator_crashes: [coord1, coord2],
        cancel_at,
        store_change,
        worker_loss: None,
    };
    Scenario {
        plan,
        book,
        world,
        config,
        faults,
        fallback,
    }
}

/// The `[fallback]` plan of a scenario whose guarded node `g` may find its lock taken: `g` is
/// replaced by `n{g}b`, with `g`'s dependencies and budget, no store precondition and a script
/// of its own, and `g`'s dependents wait for `n{g}b` instead. Every other node, the run's
/// budget and its capabilities stay as they were, so the supervisor accepts the switch (a
/// completed node keeps its dependencies: `g`'s dependents cannot have completed before `g`).
fn fallback_plan(
    rng: &mut ChaCha8Rng,
    spec: &PlanSpec,
    g: usize,
    book: &mut ScriptBook,
) -> PlanSpec {
    let old = NodeId::new(format!("n{g}")).expect("valid id");
    let alt = NodeId::new(format!("n{g}b")).expect("valid id");
    let mut spec = spec.clone();
    let guarded = &mut spec.nodes[g];
    let has_inputs = !guarded.deps.is_empty();
    let (script, calls) = script(rng, 100 + g, has_inputs);
    guarded.id = alt.clone();
    guarded.preconditions.clear();
    guarded.acceptance = quorate_protocols::Acceptance::default();
    if rests_on_nothing(calls, has_inputs) {
        guarded
            .acceptance
            .kinds
            .push(quorate_protocols::ResultKind::Suggestion);
    }
    for node in &mut spec.nodes {
        for dep in &mut node.deps {
            if *dep == old {
                *dep = alt.clone();
            }
        }
    }
    book.insert(alt, script)
        .expect("generated scripts are valid");
    spec
}

/// The store key whose absence node `i`'s precondition asks for, when it has one.
#[must_use]
pub fn lock_key(i: usize) -> String {
    format!("lock/n{i}")
}

/// A node without calls and without inputs has nothing the runtime recorded to cite: its
/// answer is a suggestion, and it accepts one (a verified conclusion from it would be taken as
/// a suggestion anyway and fail its task).
fn rests_on_nothing(calls: u64, has_inputs: bool) -> bool {
    calls == 0 && !has_inputs
}

/// A script for node `i` and the number of tool calls it proposes.
fn script(rng: &mut ChaCha8Rng, i: usize, has_inputs: bool) -> (Script, u64) {
    let calls = rng.gen_range(0..=3u64);
    let mut steps = Vec::new();
    for s in 0..calls {
        let (tool, side_effect) = TOOLS[rng.gen_range(0..TOOLS.len())];
        let outcome = match rng.gen_range(0..100) {
            0..=49 => CallOutcome::Ok,
            50..=59 => CallOutcome::Error,
            60..=74 => CallOutcome::TimeoutAfterCommit,
            75..=89 => CallOutcome::TimeoutBeforeCommit,
            _ => CallOutcome::OkButUnchanged,
        };
        steps.push(Step::Call(CallStep {
            tool: tool.to_owned(),
            params: json!({ "node": i, "step": s }).into(),
            outcome,
            output: json!({ "out": format!("n{i}s{s}") }).into(),
            cost: Budget::ZERO,
            needs_approval: rng.gen_bool(0.1),
            repeat: 1,
            side_effect,
            latency_ms: 0,
        }));
    }
    match rng.gen_range(0..100) {
        0..=84 => steps.push(Step::Answer(AnswerStep {
            kind: if rests_on_nothing(calls, has_inputs) {
                quorate_protocols::ResultKind::Suggestion
            } else {
                quorate_protocols::ResultKind::VerifiedConclusion
            },
            value: json!({ "node": i }),
        })),
        85..=89 => steps.push(Step::Fail(FailStep {
            observation: format!("n{i} gives up"),
        })),
        _ => {}
    }
    if rng.gen_bool(0.1) {
        steps.push(Step::DuplicateReply {});
    }
    if rng.gen_bool(0.1) {
        steps.push(Step::LateReply {});
    }
    (Script::new(steps), calls)
}

/// The worker loss of schedule `seed` ([`FaultPlan::worker_loss`]), with `workers` workers and
/// faults up to `horizon` ms: in about a third of the schedules with two workers or more, half
/// of them lost for good, half only paused past their lease.
#[must_use]
pub fn worker_loss(seed: u64, workers: usize, horizon: u64) -> Option<(u64, usize, Option<u64>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6661_696c_6f76_6572);
    if workers < 2 || !rng.gen_bool(0.35) {
        return None;
    }
    let at = rng.gen_range(0..horizon);
    let worker = rng.gen_range(0..workers);
    let back = rng
        .gen_bool(0.5)
        .then(|| at + LEASE_MS + rng.gen_range(50..1_500));
    Some((at, worker, back))
}
