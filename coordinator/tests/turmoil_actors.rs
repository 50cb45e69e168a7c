//! The real actix shells (`SupervisorActor`, `WorkerActor`) under turmoil's simulated network.
//!
//! Each participant is its own turmoil host (its own tokio current-thread runtime and
//! `LocalSet`; no actix `System`, no arbiter): actix 0.13 actors start with
//! `actix_rt::spawn` = `tokio::task::spawn_local`, which is all they need. The supervisor and
//! the workers talk over turmoil UDP: every datagram is one tag byte plus one envelope encoded
//! with `encode_envelope`; the receiving bridge decodes it with `decode_envelope`, authenticating
//! the sender by the datagram's source host. Faults: partitions, hold / release, crash and
//! bounce of worker hosts (a bounced worker restarts with an empty `WorkerCore`), a rogue host
//! sending garbage and forged envelopes, and a user cancel.
//!
//! Clock: the shells read `std::time::Instant` (wall time) while turmoil advances tokio's paused
//! clock, so the driver paces the simulation to wall time (it sleeps whenever simulated time
//! runs ahead). Core timeouts and network faults then line up, at the price of bit-exact
//! determinism.
//!
//! Invariants checked after each run: exactly one `run-stopped` event and a stop reason; no
//! transition out of a terminal state; at most one accepted reply per task; at most one world
//! effect per `ActionId`; one committed result per completed task; spent <= limit and
//! reserve + granted within the limit.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use quorate_coordinator::{
    CancelRun, Event, RunReport, StopReason, SupervisorActor, SupervisorConfig, SupervisorCore,
    WorkerLink,
};
use quorate_protocols::wire::{Assignment, Control, Report};
use quorate_protocols::{
    decode_envelope, encode_envelope, AgentId, Budget, Capabilities, Envelope, Limits, NodeSpec,
    Plan, PlanSpec, Role, RunId, Sender,
};
use quorate_state::{MemoryStore, PackedLog};
use quorate_workers::edge::random_ids;
use quorate_workers::{
    AgentRegistry, AssignBatch, AssignMsg, ControlMsg, ReportMsg, Script, ScriptBook, WorkerActor,
    WorkerConfig, World,
};
use turmoil::net::UdpSocket;

#[path = "turmoil_actors/invariants.rs"]
mod invariants;
use invariants::check_invariants;

const PORT: u16 = 7000;
const TAG_ASSIGN: u8 = b'A';
const TAG_CONTROL: u8 = b'C';
const TAG_REPORT: u8 = b'R';
const NODES: [(&str, &[&str]); 5] = [
    ("a", &[]),
    ("b", &[]),
    ("c", &["a", "b"]),
    ("d", &["c"]),
    ("e", &["a"]),
];

fn worker_host(w: usize) -> String {
    format!("worker{w}")
}

fn frame(tag: u8, body: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 1);
    out.push(tag);
    out.extend(body);
    out
}

/// Outbound bridge: actix messages in, datagrams out.
struct NetOut {
    sock: Rc<UdpSocket>,
    to: SocketAddr,
}

impl Actor for NetOut {
    type Context = Context<Self>;
}

impl NetOut {
    fn send(&self, bytes: Vec<u8>) {
        let (sock, to) = (self.sock.clone(), self.to);
        actix::spawn(async move {
            // A send into a partition or a crashed host is a lost envelope, nothing more.
            let _ = sock.send_to(&bytes, to).await;
        });
    }
}

impl Handler<AssignBatch> for NetOut {
    type Result = ();
    fn handle(&mut self, msg: AssignBatch, _: &mut Context<Self>) {
        // One datagram per envelope: each is lost, delayed or duplicated on its own.
        for envelope in &msg.0 {
            self.send(frame(TAG_ASSIGN, encode_envelope(envelope)));
        }
    }
}

impl Handler<ControlMsg> for NetOut {
    type Result = ();
    fn handle(&mut self, msg: ControlMsg, _: &mut Context<Self>) {
        self.send(frame(TAG_CONTROL, encode_envelope(&msg.0)));
    }
}

impl Handler<ReportMsg> for NetOut {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, _: &mut Context<Self>) {
        self.send(frame(TAG_REPORT, encode_envelope(&msg.0)));
    }
}

/// Everything a run shares with the test driver (the "durable" side: log, results, world).
#[derive(Clone)]
struct Shared {
    run: RunId,
    plan: Plan,
    config: SupervisorConfig,
    me: Sender,
    workers: Vec<Sender>,
    log: Arc<PackedLog<Event>>,
    results: Arc<MemoryStore<quorate_protocols::Payload>>,
    world: World,
    report: Arc<Mutex<Option<RunReport>>>,
    refused: Arc<Mutex<u64>>,
    /// Supervisor-side cancel at this many simulated ms.
    cancel_at: Option<u64>,
    starts: Arc<Mutex<HashMap<String, u32>>>,
}

fn plan_and_book(world: &World) -> (Plan, ScriptBook) {
    let mut book = ScriptBook::new(world.clone());
    let nodes = NODES
        .iter()
        .map(|(id, deps)| {
            let script: Script = serde_json::from_value(serde_json::json!([
                { "do": "call", "tool": "db.put", "params": { "node": id }, "output": "ok" },
                { "do": "answer", "value": id.to_uppercase() },
            ]))
            .expect("script");
            book.insert(quorate_protocols::NodeId::new(*id).expect("id"), script)
                .expect("insert");
            NodeSpec::named(id)
                .after(deps)
                .with_budget(Budget::new(10, 2, 100, 10))
                .with_capabilities(Capabilities::parse(["db.put"]).expect("caps"))
        })
        .collect();
    let spec = PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        capabilities: Capabilities::parse(["db.put"]).expect("caps"),
        nodes,
    };
    (spec.validate().expect("valid plan"), book)
}

fn shared(workers: usize, max_attempts: u32, cancel_at: Option<u64>) -> Shared {
    let world = World::new();
    let (plan, _) = plan_and_book(&world);
    Shared {
        run: random_ids().run_id(),
        plan,
        config: SupervisorConfig {
            workers,
            attempt_timeout_ms: 250,
            max_attempts,
            ..SupervisorConfig::default()
        },
        me: Sender {
            agent: random_ids().agent_id(),
            role: Role::Supervisor,
        },
        workers: (0..workers)
            .map(|_| Sender {
                agent: random_ids().agent_id(),
                role: Role::Worker,
            })
            .collect(),
        log: Arc::new(PackedLog::new()),
        results: Arc::new(MemoryStore::new()),
        world,
        report: Arc::new(Mutex::new(None)),
        refused: Arc::new(Mutex::new(0)),
        cancel_at,
        starts: Arc::new(Mutex::new(HashMap::new())),
    }
}

fn any_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), PORT)
}

async fn supervisor_software(s: Shared) -> turmoil::Result {
    let sock = Rc::new(UdpSocket::bind(any_addr()).await?);
    let worker_ips: Vec<IpAddr> = (0..s.workers.len())
        .map(|w| turmoil::lookup(worker_host(w)))
        .collect();
    let links = worker_ips
        .iter()
        .map(|&ip| {
            let out = NetOut {
                sock: sock.clone(),
                to: SocketAddr::new(ip, PORT),
            }
            .start();
            WorkerLink {
                assign: out.clone().recipient(),
                control: out.recipient(),
            }
        })
        .collect();
    // A bounced supervisor finds the run's log in the (surviving) store and resumes from it.
    let logged: Vec<Event> = s
        .log
        .read_now(s.run, Default::default(), usize::MAX)
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    *s.starts
        .lock()
        .unwrap()
        .entry("supervisor".into())
        .or_default() += 1;
    let (done, wait) = tokio::sync::oneshot::channel();
    let ctx = Context::<SupervisorActor>::new();
    let supervisor = ctx.address();
    let actor = if logged.is_empty() {
        let core = SupervisorCore::new(
            s.run,
            s.plan.clone(),
            s.config.clone(),
            s.me,
            s.workers.clone(),
            random_ids(),
        );
        SupervisorActor::new(core, links, s.results.clone(), s.log.clone(), None, done)
    } else {
        let results = s.results.clone();
        let core = SupervisorCore::resume(
            s.run,
            s.plan.clone(),
            s.config.clone(),
            s.me,
            s.workers.clone(),
            random_ids(),
            &logged,
            |k| results.get_now(k).map(|v| v.value),
        )
        .expect("the log replays");
        SupervisorActor::new(core, links, s.results.clone(), s.log.clone(), None, done)
    };
    ctx.run(actor);
    if let Some(at) = s.cancel_at {
        let supervisor = supervisor.clone();
        actix::spawn(async move {
            tokio::time::sleep(Duration::from_millis(at)).await;
            supervisor.do_send(CancelRun);
        });
    }
    let limits = Limits::default();
    let inbound = async {
        let mut buf = vec![0u8; 128 * 1024];
        loop {
            let (n, from) = match sock.recv_from(&mut buf).await {
                Ok(got) => got,
                Err(e) => break e,
            };
            // The transport authenticates: the sender is whoever owns the source host.
            let sender = match worker_ips.iter().position(|&ip| ip == from.ip()) {
                Some(w) => s.workers[w],
                None => Sender {
                    agent: AgentId::from_u128(666),
                    role: Role::Worker,
                },
            };
            let decoded = match buf[..n].split_first() {
                Some((&TAG_REPORT, body)) => decode_envelope::<Report>(body, &limits, sender).ok(),
                _ => None,
            };
            match decoded {
                Some(env) => supervisor.do_send(ReportMsg(env)),
                None => *s.refused.lock().unwrap() += 1,
            }
        }
    };
    tokio::select! {
        report = wait => {
            *s.report.lock().unwrap() = report.ok();
        }
        e = inbound => return Err(e.into()),
    }
    Ok(())
}

async fn worker_software(s: Shared, w: usize) -> turmoil::Result {
    *s.starts.lock().unwrap().entry(worker_host(w)).or_default() += 1;
    let sock = Rc::new(UdpSocket::bind(any_addr()).await?);
    let sup_ip = turmoil::lookup("supervisor");
    let out = NetOut {
        sock: sock.clone(),
        to: SocketAddr::new(sup_ip, PORT),
    }
    .start();
    // A bounced worker comes back empty (volatile action book): the tools are idempotent, so
    // re-running an action cannot commit a second effect.
    let (_, book) = plan_and_book(&s.world);
    let worker = WorkerActor::new(
        s.workers[w].agent,
        WorkerConfig::default(),
        AgentRegistry::new().with_fallback(book.factory()),
        book.tools().expect("tools"),
        out.recipient(),
    )
    .start();
    let limits = Limits::default();
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        let (n, from) = sock.recv_from(&mut buf).await?;
        if from.ip() != sup_ip {
            *s.refused.lock().unwrap() += 1;
            continue;
        }
        match buf[..n].split_first() {
            Some((&TAG_ASSIGN, body)) => {
                if let Ok(env) = decode_envelope::<Assignment>(body, &limits, s.me) {
                    worker.do_send(AssignMsg(env));
                }
            }
            Some((&TAG_CONTROL, body)) => {
                if let Ok(env) = decode_envelope::<Control>(body, &limits, s.me) {
                    worker.do_send(ControlMsg(env));
                }
            }
            _ => *s.refused.lock().unwrap() += 1,
        }
    }
}

/// A host that sends garbage and forged reports (claiming to be worker 0) to the supervisor.
async fn mallory_software(s: Shared) -> turmoil::Result {
    let sock = UdpSocket::bind(any_addr()).await?;
    let to = SocketAddr::new(turmoil::lookup("supervisor"), PORT);
    let task = s.plan.len(); // not a real task index; forged ids below are random anyway
    for i in 0..20u32 {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let bytes = if i % 2 == 0 {
            let forged: Envelope<Report> = Envelope::new(
                s.run,
                random_ids().task_id(),
                s.workers[0],
                Report {
                    outcome: quorate_protocols::wire::Outcome::Failed {
                        observation: format!("forged {task}"),
                    },
                    spent: Budget::ZERO,
                    actions: Default::default(),
                    calls: vec![],
                },
                &mut random_ids(),
            );
            frame(TAG_REPORT, encode_envelope(&forged))
        } else {
            frame(TAG_REPORT, vec![b'{'; (i as usize) * 7])
        };
        sock.send_to(&bytes, to).await?;
    }
    Ok(())
}

/// A fault at a simulated time.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Partition(usize),
    Repair(usize),
    Hold(usize),
    Release(usize),
    Crash(usize),
    Bounce(usize),
    CrashSupervisor,
    BounceSupervisor,
}

struct Outcome {
    report: RunReport,
    events: Vec<Event>,
    refused: u64,
    starts: HashMap<String, u32>,
    wall: Duration,
}

fn simulate(seed: u64, s: &Shared, faults: &[(u64, Fault)], mallory: bool) -> Outcome {
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(2))
        .max_message_latency(Duration::from_millis(30))
        .simulation_duration(Duration::from_secs(60))
        .build();
    let sup = s.clone();
    sim.host("supervisor", move || supervisor_software(sup.clone()));
    for w in 0..s.workers.len() {
        let sw = s.clone();
        sim.host(worker_host(w), move || worker_software(sw.clone(), w));
    }
    if mallory {
        let sm = s.clone();
        sim.host("mallory", move || mallory_software(sm.clone()));
    }
    let started = Instant::now();
    let mut applied = 0usize;
    while s.report.lock().unwrap().is_none() {
        sim.step().expect("simulation step");
        let now = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
        while let Some(&(at, fault)) = faults.get(applied) {
            if at > now {
                break;
            }
            applied += 1;
            match fault {
                Fault::Partition(w) => sim.partition("supervisor", worker_host(w)),
                Fault::Repair(w) => sim.repair("supervisor", worker_host(w)),
                Fault::Hold(w) => sim.hold("supervisor", worker_host(w)),
                Fault::Release(w) => sim.release("supervisor", worker_host(w)),
                Fault::Crash(w) => sim.crash(worker_host(w)),
                Fault::Bounce(w) => sim.bounce(worker_host(w)),
                Fault::CrashSupervisor => sim.crash("supervisor"),
                Fault::BounceSupervisor => sim.bounce("supervisor"),
            }
        }
        // Pace: the shells read the wall clock, so simulated time must not run ahead of it.
        let ahead = sim.elapsed().saturating_sub(started.elapsed());
        if !ahead.is_zero() {
            std::thread::sleep(ahead);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "seed {seed}: the run did not stop within 20 s"
        );
    }
    let report = s.report.lock().unwrap().clone().expect("report");
    Outcome {
        report,
        events: s
            .log
            .read_now(s.run, Default::default(), usize::MAX)
            .into_iter()
            .map(|(_, e)| e)
            .collect(),
        refused: *s.refused.lock().unwrap(),
        starts: s.starts.lock().unwrap().clone(),
        wall: started.elapsed(),
    }
}

#[test]
fn partitions_hold_and_worker_bounce_keep_the_invariants() {
    let s = shared(3, 40, None);
    let faults = [
        (5, Fault::Partition(0)),
        (10, Fault::Hold(1)),
        (40, Fault::Crash(2)),
        (400, Fault::Release(1)),
        (600, Fault::Bounce(2)),
        (700, Fault::Repair(0)),
        (720, Fault::Partition(1)),
        (1_100, Fault::Repair(1)),
    ];
    let o = simulate(1, &s, &faults, true);
    eprintln!(
        "bounce run: {:?} in {:?}, refused {}, starts {:?}, messages {:?}",
        o.report.stop, o.wall, o.refused, o.starts, o.report.messages
    );
    check_invariants(&s, &o);
    // Faults heal by 1.1 s, so the run completes.
    assert_eq!(o.report.stop, Some(StopReason::Completed));
    assert_eq!(o.starts.get("worker2"), Some(&2), "worker2 was bounced");
    assert!(
        o.refused >= 20,
        "mallory's datagrams are refused at the bridge"
    );
    assert_eq!(o.report.messages.rejected_unauthorized, 0);
}

#[test]
fn cancel_during_a_hold_stops_once() {
    let s = shared(2, 40, Some(150));
    let faults = [(1, Fault::Hold(0)), (600, Fault::Release(0))];
    let o = simulate(2, &s, &faults, false);
    eprintln!(
        "cancel run: {:?} in {:?}, messages {:?}",
        o.report.stop, o.wall, o.report.messages
    );
    check_invariants(&s, &o);
    assert_eq!(o.report.stop, Some(StopReason::Cancelled));
}

/// Re-dispatch is sticky (a new attempt goes to the worker that had the task, for its action
/// book), so a worker that never comes back fails the tasks pinned to it after `max_attempts`
/// timeouts: the run still ends with exactly one stop reason and the invariants hold.
#[test]
fn a_worker_lost_for_good_fails_its_tasks_cleanly() {
    let s = shared(2, 4, None);
    let faults = [(3, Fault::Crash(1))];
    let o = simulate(3, &s, &faults, false);
    eprintln!(
        "crash run: {:?} in {:?}, messages {:?}",
        o.report.stop, o.wall, o.report.messages
    );
    check_invariants(&s, &o);
    match &o.report.stop {
        Some(StopReason::Failed { observation, .. }) => {
            assert!(
                observation.contains("no reply after 4 attempts"),
                "{observation}"
            )
        }
        other => panic!("expected a failure on the lost worker, got {other:?}"),
    }
}

/// The supervisor host crashes mid-run and comes back: it rebuilds its core from the run log in
/// the store (which survives it) and continues; the workers keep their action records, so the
/// re-dispatched attempts repeat no effect.
#[test]
fn a_supervisor_crash_and_bounce_resumes_from_the_log() {
    let s = shared(2, 40, None);
    let faults = [(12, Fault::CrashSupervisor), (200, Fault::BounceSupervisor)];
    let o = simulate(4, &s, &faults, false);
    eprintln!(
        "supervisor bounce run: {:?} in {:?}, starts {:?}, messages {:?}",
        o.report.stop, o.wall, o.starts, o.report.messages
    );
    check_invariants(&s, &o);
    assert_eq!(o.report.stop, Some(StopReason::Completed));
    assert_eq!(
        o.starts.get("supervisor"),
        Some(&2),
        "the supervisor was bounced"
    );
    let resumed = o
        .events
        .iter()
        .filter(|e| matches!(e.kind, quorate_coordinator::EventKind::RunResumed { .. }))
        .count();
    assert_eq!(resumed, 1, "the second incarnation resumed from the log");
}
