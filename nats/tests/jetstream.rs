//! The JetStream transport against a real `nats-server` (spawned per test on loopback): every
//! envelope field survives, a redelivery reaches the supervisor core as a duplicate and is
//! refused as one, a repeated publish with the same `Nats-Msg-Id` is stored once, a forged
//! sender never reaches a core, and an unacked message stops coming after `max_deliver`.

use std::time::{Duration, Instant};

use quorate_coordinator::drive::{drive, Answer, SupervisorEnv};
use quorate_coordinator::{
    CommitOutcome, CommitTicket, InputRefused, ReplyRefusal, SupervisorConfig, SupervisorCore,
};
use quorate_nats::codec::{outgoing, Directory, Refused};
use quorate_nats::server::NatsServer;
use quorate_nats::transport::{ack_all, connect, publish_all, Inbox, RunStream, Settings};
use quorate_protocols::wire::{ActionCounts, Assignment, Outcome, Report};
use quorate_protocols::{
    AgentId, Budget, DecodeError, Envelope, IdSource, Limits, NodeSpec, Payload, PlanSpec,
    ResultKind, Role, RunId, Sender, TaskId,
};

const WAIT: Duration = Duration::from_secs(5);

fn supervisor() -> Sender {
    Sender {
        agent: AgentId::from_u128(1),
        role: Role::Supervisor,
    }
}

fn worker() -> Sender {
    Sender {
        agent: AgentId::from_u128(2),
        role: Role::Worker,
    }
}

fn directory() -> Directory {
    Directory::new([supervisor(), worker()])
}

fn short_redelivery(max_deliver: i64) -> Settings {
    Settings {
        ack_wait: Duration::from_millis(700),
        max_deliver,
        ..Settings::default()
    }
}

/// The drive environment of [`started_core`]: keeps worker 0's assignment.
struct Sent(Option<Envelope<Assignment>>);

impl SupervisorEnv for Sent {
    fn now(&self) -> u64 {
        0
    }
    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
        if worker == 0 {
            self.0 = Some(*envelope);
        }
    }
    fn commit_result(&mut self, _: CommitTicket, _: String, _: Payload) -> Answer<CommitOutcome> {
        Answer::Later
    }
}

/// A one-node run's supervisor core, started: its assignment is the first effect.
fn started_core(run: RunId) -> (SupervisorCore, Envelope<Assignment>) {
    let plan = PlanSpec {
        budget: Budget::new(100, 20, 1000, 100),
        reserve: Budget::steps(4),
        nodes: vec![NodeSpec::named("a").with_budget(Budget::new(10, 2, 100, 10))],
        ..PlanSpec::default()
    }
    .validate()
    .expect("valid plan");
    let mut core = SupervisorCore::new(
        run,
        plan,
        SupervisorConfig::default(),
        supervisor(),
        vec![worker()],
        IdSource::seeded(3),
    );
    core.start(0);
    let mut sent = Sent(None);
    let drained = drive(&mut core, &mut sent);
    assert_eq!(drained.refused, vec![], "nothing answered, nothing refused");
    let assignment = sent.0;
    (core, assignment.expect("the node was dispatched"))
}

#[tokio::test]
async fn a_redelivered_reply_is_refused_by_the_supervisor_core_as_a_duplicate() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let js = connect(&server.url()).await.expect("connect");
    let run = RunId::from_u128(7);
    let (mut core, assignment) = started_core(run);
    let stream = RunStream::create(
        &js,
        run,
        &[supervisor().agent, worker().agent],
        short_redelivery(5),
    )
    .await
    .expect("stream");

    // Supervisor -> worker: the assignment arrives with every field, and is acked.
    publish_all(&js, vec![outgoing(&assignment, worker().agent)])
        .await
        .expect("published");
    let mut worker_inbox: Inbox<Assignment> =
        Inbox::bind(&js, run, worker().agent, directory(), Limits::default())
            .await
            .expect("bind");
    let got = worker_inbox.next(WAIT).await.unwrap().expect("delivered");
    assert_eq!(got.envelope.as_ref().expect("accepted"), &assignment);
    got.ack().await.expect("ack");

    // Worker -> supervisor: the reply is accepted but not acked (as if the supervisor died
    // before its ack): after ack_wait the server delivers it again.
    let reply = assignment.reply(
        worker(),
        ResultKind::VerifiedConclusion,
        Report {
            outcome: Outcome::Answer {
                value: serde_json::json!(42).into(),
                receipts: vec![],
            },
            spent: Budget::steps(1),
            actions: ActionCounts::default(),
            calls: vec![],
        },
        &mut IdSource::seeded(4),
    );
    publish_all(&js, vec![outgoing(&reply, supervisor().agent)])
        .await
        .expect("published");
    let mut inbox: Inbox<Report> =
        Inbox::bind(&js, run, supervisor().agent, directory(), Limits::default())
            .await
            .expect("bind");
    let first = inbox.next(WAIT).await.unwrap().expect("delivered");
    assert_eq!(first.delivered, 1);
    let envelope = first.envelope.as_ref().expect("accepted").clone();
    assert_eq!(envelope, reply);
    assert_eq!(core.handle_report(1, envelope), Ok(()));
    let sequence = first.stream_sequence;
    first.leave();

    let again = inbox.next(WAIT).await.unwrap().expect("redelivered");
    assert_eq!((again.delivered, again.stream_sequence), (2, sequence));
    let copy = again.envelope.as_ref().expect("accepted").clone();
    assert_eq!(copy.dedupe, reply.dedupe);
    assert_eq!(
        core.handle_report(2, copy),
        Err(InputRefused::Reply {
            task: reply.task,
            why: ReplyRefusal::Duplicate {
                dedupe: reply.dedupe
            },
        })
    );
    again.ack().await.expect("ack");
    assert_eq!(core.snapshot().messages.rejected_duplicate, 1);

    let counts = stream.counts().await.expect("counts");
    assert_eq!(counts.stored, 2, "{counts:?}");
    assert_eq!(counts.delivered, 3, "the reply twice: {counts:?}");
    assert_eq!((counts.held, counts.ack_pending), (0, 0), "{counts:?}");
    assert!(inbox
        .next(Duration::from_millis(1500))
        .await
        .unwrap()
        .is_none());
    stream.delete().await.expect("delete");
}

fn note(seed: u64) -> Envelope<String> {
    let mut ids = IdSource::seeded(seed);
    Envelope::new(
        RunId::from_u128(8),
        TaskId::from_u128(9),
        worker(),
        format!("note {seed}"),
        &mut ids,
    )
}

#[tokio::test]
async fn a_publish_repeated_with_the_same_msg_id_is_stored_once() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let js = connect(&server.url()).await.expect("connect");
    let run = RunId::from_u128(8);
    let stream = RunStream::create(&js, run, &[supervisor().agent], Settings::default())
        .await
        .expect("stream");
    let (one, two) = (note(1), note(2));
    let out = outgoing(&one, supervisor().agent);
    let acks = publish_all(
        &js,
        vec![out.clone(), out, outgoing(&two, supervisor().agent)],
    )
    .await
    .expect("published");
    let dup: Vec<bool> = acks.iter().map(|a| a.duplicate).collect();
    assert_eq!(dup, [false, true, false]);
    assert_eq!(acks[0].sequence, acks[1].sequence);
    let counts = stream.counts().await.expect("counts");
    assert_eq!(counts.stored, 2, "{counts:?}");

    let mut inbox: Inbox<String> =
        Inbox::bind(&js, run, supervisor().agent, directory(), Limits::default())
            .await
            .expect("bind");
    let mut got = Vec::new();
    while let Some(d) = inbox.next(Duration::from_millis(800)).await.unwrap() {
        got.push(d.envelope.as_ref().expect("accepted").payload.clone());
        d.ack().await.expect("ack");
    }
    assert_eq!(got, ["note 1", "note 2"]);
    assert_eq!(stream.counts().await.expect("counts").held, 0);
}

#[tokio::test]
async fn a_forged_sender_is_refused_and_not_redelivered() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let js = connect(&server.url()).await.expect("connect");
    let run = RunId::from_u128(8);
    let stream = RunStream::create(&js, run, &[supervisor().agent], short_redelivery(5))
        .await
        .expect("stream");
    // The worker's subject, but bytes that claim the supervisor sent them.
    let mut forged = note(3);
    forged.sender = supervisor();
    let mut out = outgoing(&forged, supervisor().agent);
    out.subject = quorate_nats::subject::envelope_subject(run, supervisor().agent, worker().agent);
    publish_all(&js, vec![out]).await.expect("published");
    let mut inbox: Inbox<String> =
        Inbox::bind(&js, run, supervisor().agent, directory(), Limits::default())
            .await
            .expect("bind");
    let d = inbox.next(WAIT).await.unwrap().expect("delivered");
    assert!(
        matches!(
            d.envelope,
            Err(Refused::Decode(DecodeError::ForgedSender { claimed, actual }))
                if claimed == supervisor() && actual == worker()
        ),
        "{:?}",
        d.envelope
    );
    d.ack().await.expect("terminated");
    assert!(inbox
        .next(Duration::from_millis(1500))
        .await
        .unwrap()
        .is_none());
    assert_eq!(stream.counts().await.expect("counts").delivered, 1);
}

#[tokio::test]
async fn an_unacked_message_stops_coming_after_max_deliver() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let js = connect(&server.url()).await.expect("connect");
    let run = RunId::from_u128(8);
    let stream = RunStream::create(&js, run, &[supervisor().agent], short_redelivery(2))
        .await
        .expect("stream");
    publish_all(&js, vec![outgoing(&note(4), supervisor().agent)])
        .await
        .expect("published");
    let mut inbox: Inbox<String> =
        Inbox::bind(&js, run, supervisor().agent, directory(), Limits::default())
            .await
            .expect("bind");
    let mut deliveries = Vec::new();
    while let Some(d) = inbox.next(Duration::from_millis(2000)).await.unwrap() {
        deliveries.push(d.delivered);
        d.leave();
    }
    assert_eq!(deliveries, [1, 2]);
    assert_eq!(stream.counts().await.expect("counts").delivered, 2);
}

/// `next_batch` waits for the first message only, then takes what has already arrived, up to
/// its maximum; `ack_all` acks a batch together, after which the stream holds nothing.
#[tokio::test]
async fn a_batch_takes_what_arrived_up_to_its_maximum_and_is_acked_together() {
    let Some(server) = NatsServer::start_or_skip() else {
        return;
    };
    let js = connect(&server.url()).await.expect("connect");
    let run = RunId::from_u128(8);
    let stream = RunStream::create(&js, run, &[supervisor().agent], Settings::default())
        .await
        .expect("stream");
    let mut inbox: Inbox<String> =
        Inbox::bind(&js, run, supervisor().agent, directory(), Limits::default())
            .await
            .expect("bind");
    let empty = inbox
        .next_batch(Duration::from_millis(200), 8)
        .await
        .expect("reads");
    assert!(empty.is_empty(), "nothing published yet");
    let notes: Vec<_> = (10..15)
        .map(|i| outgoing(&note(i), supervisor().agent))
        .collect();
    publish_all(&js, notes).await.expect("published");
    // Read only once all five have arrived: the server has sent them all (all five await
    // their ack) and a moment has passed for the client to take them in. On a loaded host the
    // first can arrive alone, and a batch then rightly takes only it.
    let sent = Instant::now();
    while stream.counts().await.expect("counts").ack_pending < 5 {
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "the server sends the five"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut first = inbox.next_batch(WAIT, 3).await.expect("reads");
    let mut batches = vec![first.len()];
    let mut rest = inbox.next_batch(WAIT, 8).await.expect("reads");
    batches.push(rest.len());
    assert_eq!(batches, [3, 2], "at most 3, then the 2 already there");
    first.append(&mut rest);
    let payloads: Vec<String> = first
        .iter()
        .map(|d| d.envelope.as_ref().expect("accepted").payload.clone())
        .collect();
    assert_eq!(
        payloads,
        ["note 10", "note 11", "note 12", "note 13", "note 14"]
    );
    let counts = stream.counts().await.expect("counts");
    assert_eq!((counts.held, counts.ack_pending), (5, 5), "{counts:?}");
    let ackers = first.into_iter().map(|d| d.split().1).collect();
    ack_all(ackers).await.expect("acked");
    let counts = stream.counts().await.expect("counts");
    assert_eq!(counts.ack_pending, 0, "{counts:?}");
}
