//! Fuzz harnesses for quorate, called by the cargo-fuzz targets in `fuzz_targets/`.
//!
//! * [`decode`]: `prescan` and `decode_envelope` on arbitrary bytes, with arbitrary limits and
//!   an arbitrary authenticated sender; checks prescan/decode agreement and a re-encode round
//!   trip.
//! * [`plan_file`]: `PlanFile::parse` + `compile` (+ the settings getters) on arbitrary text.
//! * [`supervisor_core`]: a `SupervisorCore` over a small fixed plan fed an arbitrary sequence
//!   of reports (mutated run / task / attempt / version / sender / kind / outcome / spent /
//!   dedupe reuse), ticks, cancels and approvals; checks the invariants after every input.

use std::collections::HashMap;
use std::path::Path;

use arbitrary::Arbitrary;
use quorate_coordinator::drive::{drive, Answer, Flow, SupervisorEnv};
use quorate_coordinator::{
    ApprovalPolicy, CommitOutcome, CommitTicket, EventKind, Record, SupervisorConfig,
    SupervisorCore,
};
use quorate_protocols::wire::{
    ActionCounts, Assignment, Control, Outcome, ProgressSignature, Report,
};
use quorate_protocols::{
    decode_envelope, encode_envelope, prescan, ActionId, AgentId, Budget, Component, DedupeKey,
    Envelope, Limits, NodeSpec, ParamDigest, PlanSpec, ResultKind, Role, RunId, Sender, TaskState,
    Version,
};

// ----- (a) envelopes -----

/// `prescan` + `decode_envelope` on arbitrary bytes.
pub fn decode(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let limits = if mode & 1 == 0 {
        Limits::default()
    } else {
        // Tight caps, so the cap paths are exercised by small inputs too.
        Limits {
            max_bytes: 256 + usize::from(mode >> 4) * 64,
            max_evidence: usize::from(mode >> 5),
            max_string: 8 + usize::from(mode >> 3),
            max_depth: 1 + usize::from(mode >> 4),
        }
    };
    let sender = Sender {
        agent: AgentId::from_u128(u128::from(mode >> 2 & 1)),
        role: if mode & 2 == 0 {
            Role::Worker
        } else {
            Role::Supervisor
        },
    };
    let scanned = prescan(bytes, &limits).is_ok();
    match (mode >> 2) % 4 {
        0 => {
            let decoded = decode_envelope::<serde_json::Value>(bytes, &limits, sender);
            if let Ok(env) = &decoded {
                assert!(scanned, "decode accepted what prescan refused");
                assert!(env.evidence.len() <= limits.max_evidence);
                assert_eq!(env.sender, sender);
                // What we accept, we can write back and read again identically.
                let again = encode_envelope(env);
                let back: Envelope<serde_json::Value> =
                    decode_envelope(&again, &Limits::default(), sender)
                        .or_else(|_| {
                            decode_envelope(
                                &again,
                                &Limits {
                                    max_bytes: usize::MAX,
                                    max_evidence: usize::MAX,
                                    max_string: usize::MAX,
                                    max_depth: usize::MAX,
                                },
                                sender,
                            )
                        })
                        .expect("re-encoded envelope decodes");
                assert_eq!(&back, env, "round trip");
            }
        }
        1 => check_decoded(decode_envelope::<Report>(bytes, &limits, sender), scanned),
        2 => check_decoded(
            decode_envelope::<Assignment>(bytes, &limits, sender),
            scanned,
        ),
        _ => check_decoded(decode_envelope::<Control>(bytes, &limits, sender), scanned),
    }
}

fn check_decoded<P>(decoded: Result<Envelope<P>, quorate_protocols::DecodeError>, scanned: bool) {
    match decoded {
        Ok(_) => assert!(scanned, "decode accepted what prescan refused"),
        // Every refusal renders (Display must not panic).
        Err(e) => drop(e.to_string()),
    }
}

// ----- (b) plan files -----

/// `PlanFile::parse` + `compile` on arbitrary text.
pub fn plan_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let file = match quorate::plan_file::PlanFile::parse(path, text) {
        Ok(f) => f,
        Err(e) => return drop(e.to_string()),
    };
    let _ = file.spec();
    let _ = file.fallback_spec();
    let _ = file.supervisor_config(ApprovalPolicy::None);
    let _ = file.worker_config();
    let _ = file.evidence_text();
    match file.compile(path) {
        Ok((plan, _book)) => {
            assert_eq!(plan.topological_order().len(), plan.len());
            for &i in plan.topological_order() {
                for &d in plan.deps(i) {
                    assert!((d as usize) < plan.len());
                }
            }
        }
        Err(e) => drop(e.to_string()),
    }
}

// ----- (c) the supervisor core -----

/// A fuzzed run: settings and the input sequence.
#[derive(Arbitrary, Debug)]
pub struct CoreInput {
    workers: u8,
    approvals: u8,
    deadline: Option<u16>,
    attempt_timeout: u16,
    max_attempts: u8,
    cancel_after: Option<u8>,
    ops: Vec<Op>,
}

/// One input to the core.
#[derive(Arbitrary, Debug)]
pub enum Op {
    /// A reply, built from the node's latest assignment and then mutated.
    Report(ReportOp),
    /// Time passes.
    Tick(u16),
    /// The user cancels.
    Cancel,
    /// A human decides (node index taken modulo the plan size: out-of-range indices panic by
    /// contract, see the report in docs/reliability.md).
    Approval { node: u8, approved: bool },
}

/// How a reply is forged.
#[derive(Arbitrary, Debug)]
pub struct ReportOp {
    advance: u8,
    node: u8,
    wrong_run: bool,
    unknown_task: bool,
    attempt_delta: i8,
    version_delta: i8,
    sender: u8,
    kind: Option<u8>,
    outcome: OutcomeOp,
    spent: [u8; 4],
    huge_spent: bool,
    /// Reuse the dedupe key of an earlier reply (index into those sent).
    reuse_dedupe: Option<u8>,
    evidence: u8,
}

/// The reply's outcome.
#[derive(Arbitrary, Debug)]
pub enum OutcomeOp {
    /// An answer: null, empty string, a number or a string.
    Answer(u8),
    /// Ask for approval of an action.
    ApprovalRequested(u8),
    /// Failure.
    Failed,
    /// No progress.
    NoProgress(u8),
    /// A limit.
    LimitReached(u8),
    /// The attempt was cancelled.
    Cancelled,
}

const NODES: [(&str, &[&str]); 4] = [("a", &[]), ("b", &[]), ("c", &["a", "b"]), ("d", &["c"])];

fn limit() -> Budget {
    Budget::new(60, 12, 600, 60)
}

/// Runs `input` against a 4-node plan and checks the invariants after every input.
pub fn supervisor_core(input: CoreInput) {
    let spec = PlanSpec {
        budget: limit(),
        reserve: Budget::steps(4),
        nodes: NODES
            .iter()
            .map(|(id, deps)| {
                NodeSpec::named(id)
                    .after(deps)
                    .with_budget(Budget::new(10, 2, 100, 10))
            })
            .collect(),
        ..PlanSpec::default()
    };
    let plan = spec.validate().expect("the fixed plan is valid");
    let n = plan.len() as u32;
    let workers: Vec<Sender> = (0..1 + input.workers % 3)
        .map(|i| Sender {
            agent: AgentId::from_u128(100 + u128::from(i)),
            role: Role::Worker,
        })
        .collect();
    let me = Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    };
    let config = SupervisorConfig {
        workers: workers.len(),
        deadline_ms: input.deadline.map(u64::from),
        attempt_timeout_ms: 1 + u64::from(input.attempt_timeout % 5_000),
        max_attempts: 1 + u32::from(input.max_attempts % 6),
        approvals: match input.approvals % 4 {
            0 => ApprovalPolicy::All,
            1 => ApprovalPolicy::None,
            2 => ApprovalPolicy::Nodes(["b".to_string()].into_iter().collect()),
            _ => ApprovalPolicy::Ask,
        },
        cancel_after_steps: input.cancel_after.map(u64::from),
        top_ups: Default::default(),
    };
    let run = RunId::from_u128(7);
    // Seeded ids: a crash replays exactly.
    let mut ids = quorate_protocols::IdSource::seeded(7);
    let mut core = SupervisorCore::new(run, plan, config, me, workers.clone(), ids.fork());
    let mut st = Observed::new(n);
    let mut now = 0u64;
    core.start(now);
    st.drain(&mut core, now);
    for op in input.ops.into_iter().take(256) {
        match op {
            Op::Tick(dt) => {
                now += u64::from(dt);
                core.handle_tick(now);
            }
            // Refusals are expected here (forged replies, cancels of a stopping run); the
            // checks below judge what every input changed.
            Op::Cancel => {
                let _refused = core.handle_cancel(now);
            }
            Op::Approval { node, approved } => {
                let _refused = core.handle_approval(now, u32::from(node) % n, approved);
            }
            Op::Report(r) => {
                now += u64::from(r.advance);
                let env = forge(&r, &st, &workers, me, run, &core, n, &mut ids);
                st.sent_dedupe.push(env.dedupe);
                let _refused = core.handle_report(now, env);
            }
        }
        st.drain(&mut core, now);
        st.check(&core, n);
    }
}

/// What the harness saw so far.
struct Observed {
    assignments: HashMap<u32, (usize, Envelope<Assignment>)>,
    sent_dedupe: Vec<DedupeKey>,
    states: Vec<TaskState>,
    stops: usize,
}

/// [`Observed`] at a time: the environment of its drain.
struct At<'a> {
    seen: &'a mut Observed,
    now: u64,
}

impl SupervisorEnv for At<'_> {
    fn now(&self) -> u64 {
        self.now
    }
    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
        assert_eq!(self.seen.stops, 0, "dispatch after the run stopped");
        let node = NODES
            .iter()
            .position(|(id, _)| *id == envelope.payload.node.as_str())
            .expect("a plan node") as u32;
        self.seen.assignments.insert(node, (worker, *envelope));
    }
    fn commit_result(
        &mut self,
        _: CommitTicket,
        _: String,
        _: quorate_protocols::Payload,
    ) -> Answer<CommitOutcome> {
        Answer::Now(CommitOutcome::Committed)
    }
    fn record(&mut self, _: &SupervisorCore, record: Record) {
        if let EventKind::Transition { from, to } = record.kind {
            assert!(!from.is_terminal(), "transition {from:?} -> {to:?}");
        }
    }
    fn stop(&mut self, _: &SupervisorCore, _: quorate_coordinator::StopReason) -> Flow {
        self.seen.stops += 1;
        Flow::Continue
    }
}

impl Observed {
    fn new(n: u32) -> Self {
        Self {
            assignments: HashMap::new(),
            sent_dedupe: Vec::new(),
            states: vec![TaskState::Pending; n as usize],
            stops: 0,
        }
    }

    /// Carries out the core's effects: every result commit succeeds, answered at once (at
    /// `now`).
    fn drain(&mut self, core: &mut SupervisorCore, now: u64) {
        let drained = drive(core, &mut At { seen: self, now });
        assert!(
            drained.refused.is_empty(),
            "a commit the core asked for: {:?}",
            drained.refused
        );
    }

    fn check(&mut self, core: &SupervisorCore, n: u32) {
        assert!(self.stops <= 1, "{} stop effects", self.stops);
        assert_eq!(self.stops == 1, core.stop_reason().is_some());
        for i in 0..n {
            let now = core.task_state(i);
            let before = self.states[i as usize];
            if before.is_terminal() {
                assert_eq!(now, before, "terminal task {i} changed");
            }
            self.states[i as usize] = now;
        }
        let report = core.snapshot();
        let b = &report.budget;
        assert!(
            b.spent.fits_within(&b.limit),
            "spent {:?} exceeds the limit {:?}",
            b.spent,
            b.limit
        );
        let outstanding = b.granted.saturating_sub(&b.returned);
        let held = b.reserve.saturating_add(&outstanding);
        assert!(
            held.fits_within(&b.limit),
            "reserve + outstanding {held:?} > {:?}",
            b.limit
        );
    }
}

fn forge(
    r: &ReportOp,
    st: &Observed,
    workers: &[Sender],
    me: Sender,
    run: RunId,
    core: &SupervisorCore,
    n: u32,
    ids: &mut quorate_protocols::IdSource,
) -> Envelope<Report> {
    let node = u32::from(r.node) % n;
    let sender = match r.sender % 8 {
        // Mostly the assigned worker.
        0..=4 => st
            .assignments
            .get(&node)
            .map_or(workers[0], |(w, _)| workers[*w]),
        5 => workers[usize::from(r.sender) % workers.len()],
        6 => me,
        _ => Sender {
            agent: AgentId::from_u128(666),
            role: Role::Worker,
        },
    };
    let task = core.task_id(node);
    let spent = if r.huge_spent {
        Budget::new(u64::MAX, u64::MAX, u64::MAX, u64::MAX)
    } else {
        Budget::new(
            u64::from(r.spent[0] % 16),
            u64::from(r.spent[1] % 4),
            u64::from(r.spent[2]),
            u64::from(r.spent[3] % 16),
        )
    };
    let outcome = match r.outcome {
        OutcomeOp::Answer(v) => Outcome::Answer {
            value: match v % 4 {
                0 => serde_json::Value::Null,
                1 => serde_json::json!(""),
                2 => serde_json::json!(v),
                _ => serde_json::json!(format!("v{v}")),
            }
            .into(),
            receipts: vec![],
        },
        OutcomeOp::ApprovalRequested(s) => Outcome::ApprovalRequested {
            action: ActionId::new(task, u32::from(s), 1),
            reason: "fuzz".into(),
        },
        OutcomeOp::Failed => Outcome::Failed {
            observation: "fuzz".into(),
        },
        OutcomeOp::NoProgress(t) => Outcome::NoProgress {
            signature: ProgressSignature {
                tool: "t".into(),
                digest: ParamDigest::of(&serde_json::json!(t)),
                environment: 0,
                error_class: None,
            },
            times: u32::from(t),
        },
        OutcomeOp::LimitReached(c) => Outcome::LimitReached {
            component: match c % 4 {
                0 => Component::Steps,
                1 => Component::ToolCalls,
                2 => Component::Tokens,
                _ => Component::Cost,
            },
            needed: 1,
        },
        OutcomeOp::Cancelled => Outcome::Cancelled,
    };
    let kind = r.kind.map(|k| match k % 4 {
        0 => ResultKind::Suggestion,
        1 => ResultKind::VerifiedConclusion,
        2 => ResultKind::ExecutionProposal,
        _ => ResultKind::ExecutionReceipt,
    });
    let report = Report {
        outcome,
        spent,
        actions: ActionCounts::default(),
        calls: vec![],
    };
    let mut env = match st.assignments.get(&node) {
        Some((_, a)) => {
            let mut e = a.reply(
                sender,
                kind.unwrap_or(ResultKind::VerifiedConclusion),
                report,
                ids,
            );
            e.result_kind = kind;
            e
        }
        None => Envelope::new(run, task, sender, report, ids),
    };
    if r.wrong_run {
        env.run = RunId::from_u128(8);
    }
    if r.unknown_task {
        env.task = quorate_protocols::TaskId::from_u128(u128::from(r.node) + 1_000);
    }
    env.attempt = env.attempt.wrapping_add_signed(i32::from(r.attempt_delta));
    let v = i64::try_from(env.state_version.raw()).unwrap_or(i64::MAX);
    env.state_version = Version::new(v.saturating_add(i64::from(r.version_delta)).max(0) as u64);
    if let Some(k) = r.reuse_dedupe {
        if !st.sent_dedupe.is_empty() {
            env.dedupe = st.sent_dedupe[usize::from(k) % st.sent_dedupe.len()];
        }
    }
    env.evidence = (0..r.evidence % 4)
        .map(|i| quorate_protocols::EvidenceRef::Record {
            key: format!("doc/{i}"),
            version: Version::new(u64::from(i)),
        })
        .collect();
    env
}

#[cfg(test)]
mod tests {
    use arbitrary::{Arbitrary, Unstructured};

    /// The supervisor-core harness over inputs made from seeded bytes (what `cargo test` can
    /// run without cargo-fuzz): its drive and its invariant checks hold.
    #[test]
    fn the_supervisor_core_harness_holds_on_seeded_inputs() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut ran = 0;
        for _ in 0..300 {
            let bytes: Vec<u8> = (0..2048)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            if let Ok(input) = super::CoreInput::arbitrary(&mut Unstructured::new(&bytes)) {
                super::supervisor_core(input);
                ran += 1;
            }
        }
        assert!(ran > 100, "only {ran} inputs were made");
    }
}
