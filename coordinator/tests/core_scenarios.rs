//! The supervisor core driven directly, with hand-made worker replies: scheduling, reply
//! rejection, acceptance, failure, approvals, lost replies and deadlines.

use quorate_coordinator::{
    ApprovalPolicy, Effect, EventKind, StopReason, SupervisorConfig, SupervisorCore,
};
use quorate_protocols::{
    ActionId, AgentId, Budget, Envelope, NodeSpec, PlanSpec, ResultKind, Role, RunId, Sender,
    TaskState,
};
use quorate_workers::messages::{ActionCounts, Assignment, Control, Outcome, Report};
use serde_json::json;

struct Harness {
    core: SupervisorCore,
    workers: Vec<Sender>,
    dispatched: Vec<(usize, Envelope<Assignment>)>,
    controls: Vec<(usize, Envelope<Control>)>,
    events: Vec<EventKind>,
    commits: Vec<String>,
    stops: Vec<StopReason>,
    checks: Vec<u32>,
    log: Vec<quorate_coordinator::Event>,
    results: std::collections::HashMap<String, serde_json::Value>,
}

impl Harness {
    fn new(nodes: Vec<NodeSpec>, config: SupervisorConfig) -> Self {
        let spec = PlanSpec {
            budget: Budget::new(100, 20, 1000, 100),
            reserve: Budget::steps(4),
            nodes,
            ..PlanSpec::default()
        };
        let plan = spec.validate().expect("valid plan");
        let workers: Vec<Sender> = (0..2)
            .map(|i| Sender {
                agent: AgentId::from_u128(100 + i),
                role: Role::Worker,
            })
            .collect();
        let me = Sender {
            agent: AgentId::from_u128(1),
            role: Role::Supervisor,
        };
        let core = SupervisorCore::new(RunId::from_u128(7), plan, config, me, workers.clone());
        let mut h = Self {
            core,
            workers,
            dispatched: vec![],
            controls: vec![],
            events: vec![],
            commits: vec![],
            stops: vec![],
            checks: vec![],
            log: vec![],
            results: Default::default(),
        };
        h.core.start(0);
        h.drain();
        h
    }

    fn drain(&mut self) {
        while let Some(e) = self.core.poll_effect() {
            match e {
                Effect::Dispatch { worker, envelope } => self.dispatched.push((worker, envelope)),
                Effect::Control { worker, envelope } => self.controls.push((worker, envelope)),
                Effect::CommitResult { key, value } => {
                    self.results.insert(key.clone(), value);
                    self.commits.push(key);
                }
                Effect::Record(ev) => {
                    self.log.push(ev.clone());
                    self.events.push(ev.kind);
                }
                Effect::Stop(r) => self.stops.push(r),
                Effect::CheckPreconditions { node, .. } => self.checks.push(node),
            }
        }
    }

    /// The latest assignment of `node`.
    fn assignment(&self, node: &str) -> (usize, Envelope<Assignment>) {
        self.dispatched
            .iter()
            .rev()
            .find(|(_, e)| e.payload.node.as_str() == node)
            .cloned()
            .expect("dispatched")
    }

    fn reply(&self, node: &str, kind: ResultKind, outcome: Outcome) -> Envelope<Report> {
        let (w, a) = self.assignment(node);
        a.reply(
            self.workers[w],
            kind,
            Report {
                outcome,
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                rejected_calls: vec![],
            },
        )
    }

    fn answer(&self, node: &str, value: serde_json::Value) -> Envelope<Report> {
        self.reply(
            node,
            ResultKind::VerifiedConclusion,
            Outcome::Answer {
                value,
                receipts: vec![],
            },
        )
    }

    fn send(&mut self, now: u64, r: Envelope<Report>) {
        self.core.handle_report(now, r);
        self.drain();
    }

    fn state(&self, i: u32) -> TaskState {
        self.core.task_state(i)
    }
}

fn node(id: &str, deps: &[&str]) -> NodeSpec {
    NodeSpec::named(id)
        .after(deps)
        .with_budget(Budget::new(10, 2, 100, 10))
}

#[test]
fn dependencies_gate_dispatch_and_results_flow_downstream() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[]), node("c", &["a", "b"])],
        SupervisorConfig::default(),
    );
    assert_eq!(h.dispatched.len(), 2, "a and b are dispatched, c waits");
    h.send(1, h.answer("a", json!("A")));
    assert_eq!(h.dispatched.len(), 2, "c still waits for b");
    h.send(2, h.answer("b", json!("B")));
    let (_, c) = h.assignment("c");
    let inputs: Vec<_> = c
        .payload
        .inputs
        .iter()
        .map(|i| (i.node.to_string(), i.value.clone()))
        .collect();
    assert_eq!(
        inputs,
        vec![("a".into(), json!("A")), ("b".into(), json!("B"))]
    );
    h.send(3, h.answer("c", json!("C")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.commits.len(), 3);
    let report = h.core.snapshot();
    assert_eq!(report.budget.granted, Budget::new(30, 6, 300, 30));
    assert_eq!(report.budget.spent, Budget::steps(3));
    assert_eq!(report.budget.returned, Budget::new(27, 6, 300, 30));
}

#[test]
fn duplicate_late_stale_and_forged_replies_are_rejected_and_counted() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"])],
        SupervisorConfig::default(),
    );
    let good = h.answer("a", json!(1));
    let mut stale = good.clone();
    stale.dedupe = quorate_protocols::DedupeKey::new();
    stale.state_version = quorate_protocols::Version::new(99);
    h.send(1, stale);
    assert_eq!(h.state(0), TaskState::Running);
    let mut forged = h.answer("a", json!("evil"));
    forged.sender = Sender {
        agent: AgentId::from_u128(666),
        role: Role::Worker,
    };
    h.send(1, forged);
    h.send(2, good.clone());
    assert_eq!(h.state(0), TaskState::Completed);
    // The same envelope again: its dedupe key was seen, so it is a duplicate (and changes
    // nothing), even though the task is terminal now.
    h.send(3, good);
    let mut late = h.answer("a", json!(2));
    late.dedupe = quorate_protocols::DedupeKey::new();
    h.send(4, late);
    assert_eq!(h.state(0), TaskState::Completed);
    let m = h.core.snapshot().messages;
    assert_eq!(
        (m.rejected_stale, m.rejected_unauthorized, m.rejected_late),
        (1, 1, 1)
    );
    assert_eq!(m.rejected_duplicate, 1);
    // A duplicate of a live task's reply.
    let b = h.reply(
        "b",
        ResultKind::Suggestion,
        Outcome::ApprovalRequested {
            action: ActionId::new(h.core.task_id(1), 0, 0),
            reason: "x".into(),
        },
    );
    let _ = b;
}

#[test]
fn a_duplicate_of_a_live_reply_is_rejected() {
    let cfg = SupervisorConfig {
        approvals: ApprovalPolicy::All,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[])], cfg);
    let action = ActionId::new(h.core.task_id(0), 0, 0);
    let ask = h.reply(
        "a",
        ResultKind::Suggestion,
        Outcome::ApprovalRequested {
            action,
            reason: "delete rows".into(),
        },
    );
    h.send(1, ask.clone());
    assert_eq!(h.state(0), TaskState::Running, "approved at once");
    assert!(matches!(
        h.controls.last().unwrap().1.payload,
        Control::Approve { .. }
    ));
    h.send(2, ask);
    assert_eq!(h.core.snapshot().messages.rejected_duplicate, 1);
    h.send(3, h.answer("a", json!("done")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn a_suggestion_does_not_complete_a_task() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    h.send(
        1,
        h.reply(
            "a",
            ResultKind::Suggestion,
            Outcome::Answer {
                value: json!("I think it worked"),
                receipts: vec![],
            },
        ),
    );
    assert_eq!(h.state(0), TaskState::Failed);
    assert!(
        matches!(&h.stops[..], [StopReason::Failed { observation, .. }] if observation.contains("suggestion"))
    );
}

#[test]
fn a_failure_stops_the_run_and_cancels_running_tasks() {
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[]), node("c", &["a"])],
        SupervisorConfig::default(),
    );
    h.send(
        1,
        h.reply(
            "a",
            ResultKind::Suggestion,
            Outcome::Failed {
                observation: "input missing: orders.csv".into(),
            },
        ),
    );
    assert_eq!(h.state(0), TaskState::Failed);
    assert_eq!(h.state(1), TaskState::Cancelled);
    assert_eq!(h.state(2), TaskState::Cancelled);
    assert!(h.controls.iter().any(|(_, c)| c.payload == Control::Cancel));
    assert!(h.stops.is_empty(), "waits for b's worker to acknowledge");
    // b's answer arrives after the cancel: late, counted, nothing changes.
    h.send(2, h.answer("b", json!("B")));
    assert_eq!(h.state(1), TaskState::Cancelled);
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
    // The acknowledgement (also late) ends the drain; the run stops at the next tick.
    h.send(3, h.reply("b", ResultKind::Suggestion, Outcome::Cancelled));
    assert_eq!(h.core.poll_timeout(), Some(3));
    h.core.handle_tick(3);
    h.drain();
    assert_eq!(
        h.stops,
        vec![StopReason::Failed {
            node: "a".into(),
            observation: "input missing: orders.csv".into()
        }]
    );
    assert_eq!(h.core.snapshot().messages.rejected_late, 2);
    assert_eq!(h.stops.len(), 1, "exactly one stop reason");
}

#[test]
fn approval_rejected_cancels_and_unanswered_waits() {
    let mut h = Harness::new(vec![node("a", &[])], SupervisorConfig::default());
    let action = ActionId::new(h.core.task_id(0), 0, 0);
    h.send(
        1,
        h.reply(
            "a",
            ResultKind::Suggestion,
            Outcome::ApprovalRequested {
                action,
                reason: "r".into(),
            },
        ),
    );
    assert_eq!(h.state(0), TaskState::Cancelled);
    assert!(
        h.stops.is_empty(),
        "waits for the worker to acknowledge the rejection"
    );
    h.send(2, h.reply("a", ResultKind::Suggestion, Outcome::Cancelled));
    h.core.handle_tick(2);
    h.drain();
    assert_eq!(h.stops, vec![StopReason::Cancelled]);

    let cfg = SupervisorConfig {
        approvals: ApprovalPolicy::Ask,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[])], cfg);
    let action = ActionId::new(h.core.task_id(0), 0, 0);
    h.send(
        1,
        h.reply(
            "a",
            ResultKind::Suggestion,
            Outcome::ApprovalRequested {
                action,
                reason: "r".into(),
            },
        ),
    );
    assert_eq!(h.state(0), TaskState::WaitingApproval);
    assert_eq!(
        h.stops,
        vec![StopReason::WaitingApproval { node: "a".into() }]
    );
}

#[test]
fn lost_replies_lead_to_a_new_attempt_and_the_old_attempt_is_late() {
    let cfg = SupervisorConfig {
        attempt_timeout_ms: 100,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[])], cfg);
    let first = h.answer("a", json!(1));
    assert_eq!(h.core.poll_timeout(), Some(100));
    h.core.handle_tick(100);
    h.drain();
    let (_, second) = h.assignment("a");
    assert_eq!(second.attempt, 2);
    h.send(101, first);
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
    h.send(102, h.answer("a", json!(2)));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    assert_eq!(h.core.snapshot().tasks[0].attempts, 2);
}

#[test]
fn deadline_and_limits_stop_the_run() {
    let cfg = SupervisorConfig {
        deadline_ms: Some(50),
        attempt_timeout_ms: 1_000,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[]), node("b", &["a"])], cfg);
    h.core.handle_tick(50);
    h.drain();
    // a was running: its worker never acknowledges the cancel, so the drain ends at its bound.
    assert!(h.stops.is_empty());
    assert_eq!(h.core.poll_timeout(), Some(1_050));
    h.core.handle_tick(1_049);
    h.drain();
    assert!(h.stops.is_empty());
    h.core.handle_tick(1_050);
    h.drain();
    assert_eq!(h.stops, vec![StopReason::Deadline]);
    assert!(h
        .core
        .snapshot()
        .tasks
        .iter()
        .all(|t| t.state.is_terminal()));

    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    h.send(1, h.answer("a", json!(1)));
    h.send(
        2,
        h.reply(
            "b",
            ResultKind::Suggestion,
            Outcome::LimitReached {
                component: quorate_protocols::Component::ToolCalls,
            },
        ),
    );
    assert_eq!(
        h.stops,
        vec![StopReason::StoppedLimit {
            component: quorate_protocols::Component::ToolCalls
        }]
    );
    assert_eq!(
        h.state(0),
        TaskState::Completed,
        "completed results are kept"
    );
    assert_eq!(h.state(1), TaskState::StoppedLimit);
}

#[test]
fn cancel_after_steps_cancels_everything_once() {
    let cfg = SupervisorConfig {
        cancel_after_steps: Some(2),
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &["a"]), node("c", &["b"])],
        cfg,
    );
    h.send(1, h.answer("a", json!(1)));
    assert_eq!(h.stops, vec![StopReason::Cancelled]);
    assert_eq!(h.state(0), TaskState::Completed);
    assert_eq!(h.state(1), TaskState::Cancelled);
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, EventKind::CancelRequested)));
}

#[test]
fn an_empty_input_fails_the_dependent_and_names_the_input() {
    let mut b = node("b", &["a"]);
    b.preconditions = vec![quorate_protocols::Precondition::InputsNonEmpty];
    let mut h = Harness::new(vec![node("a", &[]), b], SupervisorConfig::default());
    h.send(1, h.answer("a", json!([])));
    assert_eq!(h.state(0), TaskState::Completed);
    assert_eq!(h.state(1), TaskState::Failed);
    assert_eq!(h.core.snapshot().tasks[1].attempts, 0, "never dispatched");
    assert_eq!(
        h.stops,
        vec![StopReason::Failed {
            node: "b".into(),
            observation: "precondition does not hold: empty input from a".into()
        }]
    );
}

fn spec_of(nodes: Vec<NodeSpec>) -> PlanSpec {
    PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        nodes,
        ..PlanSpec::default()
    }
}

#[test]
fn precondition_failure_switches_to_the_fallback_plan_without_rerunning_completed_tasks() {
    use quorate_protocols::Precondition;
    let mut publish = node("publish", &["load"]);
    publish.preconditions = vec![Precondition::KeyExists {
        key: "config/channel".into(),
    }];
    let mut h = Harness::new(
        vec![node("load", &[]), publish],
        SupervisorConfig::default(),
    );
    // Fallback: same load, and a draft instead of publish.
    h.core
        .set_fallback_plan(spec_of(vec![node("load", &[]), node("draft", &["load"])]));
    h.send(1, h.answer("load", json!("rows")));
    assert_eq!(
        h.checks,
        vec![1],
        "publish's store precondition goes to the shell"
    );
    assert_eq!(h.state(1), TaskState::Pending, "not ready until checked");
    h.core
        .handle_preconditions(2, 1, Err("config/channel does not exist".into()));
    h.drain();
    let report = h.core.snapshot();
    assert_eq!(report.plan_version, 2);
    let ids: Vec<_> = report
        .tasks
        .iter()
        .map(|t| (t.id.as_str(), t.state))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("load", TaskState::Completed),
            ("draft", TaskState::Running)
        ]
    );
    assert_eq!(
        h.dispatched
            .iter()
            .filter(|(_, e)| e.payload.node.as_str() == "load")
            .count(),
        1,
        "load is not re-run"
    );
    let (_, draft) = h.assignment("draft");
    assert_eq!(
        draft.payload.inputs.len(),
        1,
        "the carried-over result is the draft's input"
    );
    assert!(h.events.iter().any(|e| matches!(
        e,
        EventKind::Replanned {
            plan_version: 2,
            ..
        }
    )));
    h.send(3, h.answer("draft", json!("draft")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn replanning_cannot_widen_authority_and_cancels_dropped_tasks() {
    use quorate_coordinator::ReplanError;
    let mut h = Harness::new(
        vec![node("a", &[]), node("b", &[])],
        SupervisorConfig::default(),
    );
    let mut wider = spec_of(vec![node("a", &[])]);
    wider.budget.steps = 101;
    assert!(matches!(
        h.core.handle_replan(1, wider),
        Err(ReplanError::WidensBudget {
            old: 100,
            new: 101,
            ..
        })
    ));
    let mut caps = spec_of(vec![node("a", &[])]);
    caps.capabilities = quorate_protocols::Capabilities::parse(["db.delete"]).unwrap();
    assert!(matches!(
        h.core.handle_replan(1, caps),
        Err(ReplanError::WidensCapabilities { .. })
    ));
    assert_eq!(
        h.core.snapshot().plan_version,
        1,
        "refused replans change nothing"
    );
    let old_b = h.answer("b", json!("late"));
    h.core
        .handle_replan(2, spec_of(vec![node("a", &[])]))
        .unwrap();
    h.drain();
    assert!(
        h.controls.iter().any(|(_, c)| c.payload == Control::Cancel),
        "running b is told to stop"
    );
    h.send(3, old_b);
    assert_eq!(
        h.core.snapshot().messages.rejected_late,
        1,
        "b's reply is late after the replan"
    );
    h.send(4, h.answer("a", json!(1)));
    // The run waits (bounded) for b's worker to acknowledge the cancel, then stops.
    h.core.handle_tick(10_000);
    h.drain();
    assert_eq!(h.stops, vec![StopReason::Completed]);
}

#[test]
fn a_crashed_supervisor_resumes_from_its_log_without_rerunning_completed_work() {
    let nodes = || vec![node("a", &[]), node("b", &[]), node("c", &["a", "b"])];
    let mut h = Harness::new(nodes(), SupervisorConfig::default());
    h.send(1, h.answer("a", json!("A")));
    let b_old = h.answer("b", json!("B-late"));
    let b_task = h.core.task_id(1);
    // Crash: only the log, the result store and the workers survive.
    let log = h.log.clone();
    let results = h.results.clone();
    let plan = PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        nodes: nodes(),
        ..PlanSpec::default()
    }
    .validate()
    .unwrap();
    let me = Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    };
    let core = SupervisorCore::resume(
        RunId::from_u128(7),
        plan,
        SupervisorConfig::default(),
        me,
        h.workers.clone(),
        &log,
        |k| results.get(k).cloned(),
    )
    .unwrap();
    h.core = core;
    h.dispatched.clear();
    h.core.start_resumed(10);
    h.drain();
    // b was in flight: dispatched again, same task id, same worker, new attempt. a is not re-run.
    assert_eq!(h.dispatched.len(), 1);
    let (w, again) = h.dispatched[0].clone();
    assert_eq!(
        (again.payload.node.as_str(), again.task, again.attempt),
        ("b", b_task, 2)
    );
    assert_eq!(w, 1);
    assert!(
        h.log
            .last()
            .is_some_and(|e| e.seq > log.last().unwrap().seq),
        "seq keeps increasing"
    );
    // The reply of the attempt from before the crash is late now.
    h.send(11, b_old);
    assert_eq!(h.core.snapshot().messages.rejected_late, 1);
    h.send(12, h.answer("b", json!("B")));
    let (_, c) = h.assignment("c");
    assert_eq!(
        c.payload.inputs[0].value,
        json!("A"),
        "a's result is read back from the store"
    );
    h.send(13, h.answer("c", json!("C")));
    assert_eq!(h.stops, vec![StopReason::Completed]);
    let r = h.core.snapshot();
    assert!(r.tasks.iter().all(|t| t.state == TaskState::Completed));
    assert_eq!(r.tasks[0].attempts, 1);
    assert_eq!(
        r.budget.granted,
        Budget::new(30, 6, 300, 30),
        "slices are not granted twice"
    );
}

#[test]
fn an_approval_for_an_unknown_node_is_ignored() {
    let cfg = SupervisorConfig {
        approvals: ApprovalPolicy::Ask,
        ..SupervisorConfig::default()
    };
    let mut h = Harness::new(vec![node("a", &[])], cfg);
    h.core.handle_approval(1, 99, true);
    h.drain();
    assert_eq!(h.state(0), TaskState::Running);
    assert!(h.stops.is_empty());
}

/// How a driven run ended: final task states, results by node, task ids seen, stop reason.
type Ending = (
    Vec<TaskState>,
    Vec<(String, serde_json::Value)>,
    Vec<u32>,
    Option<StopReason>,
);

/// Drives a core to its stop with workers that answer every assignment with the node's name;
/// `executions` has one entry per task id the workers saw. With `crash_after = Some(k)`, the supervisor
/// crashes after its k-th input (a dispatch batch or a reply) and is rebuilt from its log and
/// the result store. Returns the final task states, the results and the executions.
fn drive_with_crash(nodes: fn() -> Vec<NodeSpec>, crash_after: Option<usize>) -> Ending {
    let mut h = Harness::new(nodes(), SupervisorConfig::default());
    let mut executions: std::collections::HashMap<quorate_protocols::TaskId, u32> =
        Default::default();
    let mut inputs = 0usize;
    let mut queue: std::collections::VecDeque<(usize, Envelope<Assignment>)> =
        h.dispatched.drain(..).collect();
    let mut crashed = false;
    let mut now = 1;
    while h.stops.is_empty() {
        let Some((w, a)) = queue.pop_front() else {
            // Nothing in flight: let time pass (re-dispatch or stop).
            now += 10_000;
            h.core.handle_tick(now);
            h.drain();
            queue.extend(h.dispatched.drain(..));
            if queue.is_empty() && h.stops.is_empty() {
                panic!("stuck");
            }
            continue;
        };
        // One entry per task id; a re-dispatched attempt of the same task adds nothing.
        executions.entry(a.task).or_insert(1);
        let value = json!(a.payload.node.as_str());
        let reply = a.reply(
            h.workers[w],
            ResultKind::VerifiedConclusion,
            Report {
                outcome: Outcome::Answer {
                    value,
                    receipts: vec![],
                },
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                rejected_calls: vec![],
            },
        );
        now += 1;
        h.core.handle_report(now, reply);
        h.drain();
        queue.extend(h.dispatched.drain(..));
        inputs += 1;
        if !crashed && crash_after == Some(inputs) && h.stops.is_empty() {
            crashed = true;
            let plan = spec_of(nodes()).validate().unwrap();
            let me = Sender {
                agent: AgentId::from_u128(1),
                role: Role::Supervisor,
            };
            let results = h.results.clone();
            h.core = SupervisorCore::resume(
                RunId::from_u128(7),
                plan,
                SupervisorConfig::default(),
                me,
                h.workers.clone(),
                &h.log,
                |k| results.get(k).cloned(),
            )
            .unwrap();
            // Envelopes in flight to the old supervisor are lost with it.
            queue.clear();
            h.core.start_resumed(now);
            h.drain();
            queue.extend(h.dispatched.drain(..));
        }
    }
    let r = h.core.snapshot();
    let states = r.tasks.iter().map(|t| t.state).collect();
    let mut results: Vec<(String, serde_json::Value)> = h
        .results
        .iter()
        .map(|(k, v)| (k.rsplit('/').next().unwrap().to_string(), v.clone()))
        .collect();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut execs: Vec<u32> = executions.values().copied().collect();
    execs.sort_unstable();
    (states, results, execs, h.stops.first().cloned())
}

#[test]
fn resuming_at_any_point_ends_like_the_uncrashed_run() {
    fn nodes() -> Vec<NodeSpec> {
        vec![
            node("a", &[]),
            node("b", &[]),
            node("c", &["a", "b"]),
            node("d", &["c"]),
            node("e", &["a"]),
        ]
    }
    let uncrashed = drive_with_crash(nodes, None);
    assert_eq!(uncrashed.3, Some(StopReason::Completed));
    assert_eq!(uncrashed.1.len(), 5);
    for k in 1..=5 {
        let resumed = drive_with_crash(nodes, Some(k));
        assert_eq!(
            resumed.0, uncrashed.0,
            "task states after a crash at input {k}"
        );
        assert_eq!(resumed.1, uncrashed.1, "results after a crash at input {k}");
        assert_eq!(
            resumed.3, uncrashed.3,
            "stop reason after a crash at input {k}"
        );
        // Five task ids in all: a task re-dispatched after the resume keeps its id, so a worker's
        // action records (keyed by task, step, intent) recognise its actions and repeat none.
        assert_eq!(
            resumed.2.len(),
            5,
            "no task id changed across the resume (crash at {k})"
        );
    }
}
