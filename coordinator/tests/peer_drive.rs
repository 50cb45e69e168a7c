//! The peer core's drive loop (`quorate_coordinator::peer::drive`): an environment that answers
//! its store calls later (as the etcd shell does) gets, fed with `feed`, exactly the run an
//! environment answering at once gets; a halt leaves the rest queued.

mod support;

use quorate_coordinator::peer::drive::{drive, feed, PeerAnswer, PeerEnv, StoredResult};
use quorate_coordinator::peer::{PeerMsg, PlanVersion, RootUpdate, Terminal, TerminalCommit};
use quorate_coordinator::{EventKind, PeerCore, StopReason, SupervisorConfig};
use quorate_protocols::drive::{Answer, Flow};
use quorate_protocols::wire::{ActionCounts, Assignment, Control, Outcome, Report};
use quorate_protocols::{
    AgentId, Budget, Envelope, Payload, ResultKind, Role, RunId, Sender, TaskId,
};

use support::{node, spec_of};

/// One peer over stores that accept everything; with `later`, every store call is answered
/// later (the driver feeds it) and the loop halts until then.
#[derive(Default)]
struct Env {
    later: bool,
    pending: Option<PeerAnswer>,
    /// The effects carried out, by name, in order.
    log: Vec<String>,
    events: Vec<EventKind>,
    executed: Vec<Envelope<Assignment>>,
    done: Option<StopReason>,
}

impl Env {
    fn answer<T>(&mut self, what: &str, now: T, pending: PeerAnswer) -> Answer<T> {
        self.log.push(what.into());
        if self.later {
            self.pending = Some(pending);
            Answer::Later
        } else {
            Answer::Now(now)
        }
    }
}

impl PeerEnv for Env {
    fn now(&mut self) -> u64 {
        0
    }

    fn go_on(&mut self) -> Flow {
        if self.pending.is_some() {
            Flow::Halt
        } else {
            Flow::Continue
        }
    }

    fn try_claim(&mut self, node: u32, _: &str) -> Answer<bool> {
        self.answer("claim", true, PeerAnswer::Claim { node, won: true })
    }

    fn allocate(&mut self, node: u32, _: TaskId, _: Budget) -> Answer<RootUpdate> {
        let outcome = RootUpdate::Done;
        self.answer(
            "allocate",
            outcome.clone(),
            PeerAnswer::Allocation { node, outcome },
        )
    }

    fn close_slice(&mut self, node: u32, _: TaskId, _: Budget) -> Answer<RootUpdate> {
        let outcome = RootUpdate::Done;
        self.answer(
            "close",
            outcome.clone(),
            PeerAnswer::SliceClosed { node, outcome },
        )
    }

    fn execute(&mut self, envelope: Box<Envelope<Assignment>>) {
        self.log.push("execute".into());
        self.executed.push(*envelope);
    }

    fn control(&mut self, _: Envelope<Control>) {
        self.log.push("control".into());
    }

    fn commit_terminal(
        &mut self,
        _: &str,
        _claimed: bool,
        record: Terminal,
    ) -> Answer<TerminalCommit> {
        let won = TerminalCommit::Won { record, version: 1 };
        self.answer("commit", won.clone(), PeerAnswer::Commit(won))
    }

    fn commit_result(&mut self, node: u32, _: &str, _: Payload) -> Answer<StoredResult> {
        self.answer("result", None, PeerAnswer::Result { node, stored: None })
    }

    fn propose_plan(&mut self, record: PlanVersion) -> Answer<Option<PlanVersion>> {
        let stored = Some(record);
        self.answer("propose", stored.clone(), PeerAnswer::Plan(stored))
    }

    fn read_plan(&mut self) -> Answer<Option<PlanVersion>> {
        self.answer("read plan", None, PeerAnswer::Plan(None))
    }

    fn broadcast(&mut self, _: Box<Envelope<PeerMsg>>) {
        self.log.push("broadcast".into());
    }

    fn record(&mut self, event: quorate_coordinator::Event) {
        self.events.push(event.kind);
    }

    fn done(&mut self, _: &PeerCore, reason: StopReason) {
        self.log.push("done".into());
        self.done = Some(reason);
    }
}

fn core() -> PeerCore {
    let plan = spec_of(vec![node("a", &[]), node("b", &["a"])])
        .validate()
        .expect("valid plan");
    let me = Sender {
        agent: AgentId::from_u128(10),
        role: Role::Peer,
    };
    let worker = Sender {
        agent: AgentId::from_u128(100),
        role: Role::Worker,
    };
    let tasks = vec![TaskId::from_u128(1000), TaskId::from_u128(1001)];
    let mut core = PeerCore::new(
        RunId::from_u128(7),
        plan,
        SupervisorConfig::default(),
        0,
        vec![me],
        worker,
        tasks,
        quorate_protocols::IdSource::seeded(3),
    );
    core.start(0);
    core
}

/// Drives `core` until quiet: a pending answer is fed, then it drives again.
fn settle(core: &mut PeerCore, env: &mut Env) {
    for _ in 0..1000 {
        let flow = drive(core, env);
        match env.pending.take() {
            Some(answer) => {
                assert_eq!(flow, Flow::Halt, "the env halts while an answer is out");
                feed(core, 0, answer);
            }
            None => {
                assert_eq!(flow, Flow::Continue);
                return;
            }
        }
    }
    panic!("the peer did not settle");
}

/// Runs the plan to its end; what the env saw.
fn run(later: bool) -> Env {
    let mut core = core();
    let mut env = Env {
        later,
        ..Env::default()
    };
    settle(&mut core, &mut env);
    for _ in 0..2 {
        let assignment = env.executed.last().expect("a task runs").clone();
        let mut reply = assignment.reply(
            Sender {
                agent: AgentId::from_u128(100),
                role: Role::Worker,
            },
            ResultKind::VerifiedConclusion,
            Report {
                outcome: Outcome::Answer {
                    value: serde_json::json!(assignment.payload.node.as_str()).into(),
                    receipts: vec![],
                },
                spent: Budget::steps(1),
                actions: ActionCounts::default(),
                calls: vec![],
            },
            &mut quorate_protocols::IdSource::seeded(9),
        );
        support::rests_on_a_call(&mut reply);
        core.handle_worker_reply(0, reply);
        settle(&mut core, &mut env);
    }
    env
}

#[test]
fn answers_given_later_and_fed_by_the_driver_make_the_same_run_as_answers_given_at_once() {
    let now = run(false);
    let later = run(true);
    assert_eq!(now.done, Some(StopReason::Completed));
    assert_eq!(later.done, now.done);
    assert_eq!(later.log, now.log, "the same effects in the same order");
    assert_eq!(later.events, now.events, "the same events");
    let ran: Vec<&str> = later
        .executed
        .iter()
        .map(|e| e.payload.node.as_str())
        .collect();
    assert_eq!(ran, ["a", "b"]);
}

#[test]
fn a_store_call_answered_later_halts_the_loop_with_the_rest_queued() {
    let mut core = core();
    let mut env = Env {
        later: true,
        ..Env::default()
    };
    assert_eq!(drive(&mut core, &mut env), Flow::Halt);
    assert_eq!(
        env.log,
        ["claim"],
        "nothing after the claim until it is answered"
    );
    let Some(answer @ PeerAnswer::Claim { won: true, .. }) = env.pending.take() else {
        panic!("the claim is out: {:?}", env.pending)
    };
    feed(&mut core, 0, answer);
    assert_eq!(drive(&mut core, &mut env), Flow::Halt);
    assert_eq!(
        env.log,
        ["claim", "allocate"],
        "the claim won: the slice is next"
    );
}
