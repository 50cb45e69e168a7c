//! The subject layout lets NATS permissions pin a worker to its own traffic (docs/distributed.md,
//! "Permissions"): with a user allowed only its own reply subject, its own consumer and its own
//! inbox prefix, worker A reads and acks its assignment and replies as itself, but cannot publish
//! a reply in worker B's name (the stream stores nothing) nor read B's consumer.

use std::time::Duration;

use quorate_nats::access::{authorization, AccessRole, NatsUser, Secret};
use quorate_nats::async_nats::{jetstream, ConnectOptions};
use quorate_nats::codec::{outgoing, Directory};
use quorate_nats::secure::connect_with;
use quorate_nats::server::NatsServer;
use quorate_nats::subject::{consumer_name, envelope_subject, stream_name};
use quorate_nats::transport::{publish_all, Inbox, RunStream, Settings};
use quorate_protocols::{AgentId, Envelope, IdSource, Limits, Role, RunId, Sender, TaskId};

const RUN: RunId = RunId::from_u128(0x51);

fn sender(id: u128, role: Role) -> Sender {
    Sender {
        agent: AgentId::from_u128(id),
        role,
    }
}

/// The permissions docs/distributed.md gives worker `a` (user `a`), and an unrestricted
/// supervisor.
fn config(sup: AgentId, a: AgentId) -> String {
    let s = stream_name(RUN);
    let c = consumer_name(a);
    let reply = envelope_subject(RUN, sup, a);
    format!(
        r#"
authorization {{
  users = [
    {{ user: sup, password: sup }}
    {{ user: a, password: a, permissions: {{
        publish: {{ allow: ["{reply}", "$JS.API.CONSUMER.INFO.{s}.{c}", "$JS.API.CONSUMER.MSG.NEXT.{s}.{c}", "$JS.ACK.{s}.{c}.>"] }}
        subscribe: {{ allow: ["_INBOX_A.>"] }}
    }} }}
  ]
}}
"#
    )
}

fn envelope(from: Sender, seed: u64) -> Envelope<String> {
    Envelope::new(
        RUN,
        TaskId::from_u128(1),
        from,
        format!("from {seed}"),
        &mut IdSource::seeded(seed),
    )
}

#[tokio::test]
async fn a_worker_user_reads_only_its_consumer_and_publishes_only_as_itself() {
    let (sup, a, b) = (
        sender(1, Role::Supervisor),
        sender(2, Role::Worker),
        sender(3, Role::Worker),
    );
    let Some(server) = NatsServer::start_with_config_or_skip(&config(sup.agent, a.agent)) else {
        return;
    };
    let url = server.url();
    let js = jetstream::new(
        ConnectOptions::with_user_and_password("sup".into(), "sup".into())
            .connect(&url)
            .await
            .expect("supervisor connects"),
    );
    let stream = RunStream::create(
        &js,
        RUN,
        &[sup.agent, a.agent, b.agent],
        Settings::default(),
    )
    .await
    .expect("stream");
    publish_all(
        &js,
        vec![
            outgoing(&envelope(sup, 1), a.agent),
            outgoing(&envelope(sup, 2), b.agent),
        ],
    )
    .await
    .expect("assignments");

    let client = ConnectOptions::with_user_and_password("a".into(), "a".into())
        .custom_inbox_prefix("_INBOX_A")
        .connect(&url)
        .await
        .expect("worker a connects");
    let js_a = jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(1500))
        .build(client);
    let directory = Directory::new([sup, a, b]);
    let mut inbox: Inbox<String> =
        Inbox::bind(&js_a, RUN, a.agent, directory.clone(), Limits::default())
            .await
            .expect("a binds to its own consumer");
    let got = inbox
        .next(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered");
    assert_eq!(got.envelope.as_ref().expect("accepted").payload, "from 1");
    got.ack().await.expect("a acks its own delivery");
    publish_all(&js_a, vec![outgoing(&envelope(a, 3), sup.agent)])
        .await
        .expect("a replies as itself");

    // In b's name: the server refuses the publish, the stream stores nothing.
    let forged = publish_all(&js_a, vec![outgoing(&envelope(b, 4), sup.agent)]).await;
    assert!(forged.is_err(), "{forged:?}");
    // b's consumer: a cannot even look it up.
    let theirs = Inbox::<String>::bind(&js_a, RUN, b.agent, directory, Limits::default()).await;
    assert!(theirs.is_err(), "{theirs:?}");

    let counts = stream.counts().await.expect("counts");
    assert_eq!(
        counts.stored, 3,
        "two assignments and a's one reply: {counts:?}"
    );
    assert_eq!(
        counts.delivered, 1,
        "b's assignment was never delivered: {counts:?}"
    );
}

/// A peer's connection options as its user of `quorate_nats::access` (plaintext: this test's
/// server has no TLS; tests/processes_peer_secure.rs runs peers over TLS).
fn peer_options(agent: AgentId) -> quorate_nats::access::NatsOptions {
    quorate_nats::access::NatsOptions {
        user: Some((agent.to_string(), peer_password(agent))),
        inbox_prefix: Some(quorate_nats::access::inbox_prefix(agent)),
        allow_plaintext: true,
        ..Default::default()
    }
}

/// The test password of peer `agent`'s user.
fn peer_password(agent: AgentId) -> Secret {
    Secret::new(format!("pw-{agent}"))
}

/// A server whose users are `peers`, each with the permissions of [`AccessRole::Peer`];
/// `None` if nats-server is not installed (and services are not required).
fn peer_server(peers: &[Sender]) -> Option<NatsServer> {
    let users: Vec<NatsUser> = peers
        .iter()
        .map(|p| NatsUser {
            user: p.agent.to_string(),
            password: peer_password(p.agent),
            agent: p.agent,
            role: AccessRole::Peer,
        })
        .collect();
    NatsServer::start_with_config_or_skip(&authorization(&users))
}

/// Three peers with the permissions of `quorate_nats::access` (as `scripts/credentials.sh
/// nats-users --peers` writes them): the first opens the run (stream and every consumer), each
/// reads its own consumer and broadcasts as itself; a peer cannot publish as another (the
/// server refuses), an envelope claiming another peer on its own subject is refused as
/// unauthorized by the receiving inbox, and no peer may delete the stream, read another's
/// consumer or make a consumer of its own choosing.
#[tokio::test]
async fn peer_users_open_a_run_and_broadcast_only_as_themselves() {
    let peers = [
        sender(0xa, Role::Peer),
        sender(0xb, Role::Peer),
        sender(0xc, Role::Peer),
    ];
    let (a, b, c) = (peers[0], peers[1], peers[2]);
    let Some(server) = peer_server(&peers) else {
        return;
    };
    let url = server.url();
    let ids = peers.map(|p| p.agent);
    let js = |agent: AgentId| {
        let url = url.clone();
        async move {
            let js = connect_with(&url, &peer_options(agent))
                .await
                .expect("a peer connects");
            jetstream::ContextBuilder::new()
                .timeout(Duration::from_millis(1500))
                .build(js.client())
        }
    };
    let (js_a, js_b, js_c) = (js(a.agent).await, js(b.agent).await, js(c.agent).await);
    // Any peer may be the first to join: a opens the run here.
    let stream = RunStream::open_or_create(&js_a, RUN, &ids, Settings::default())
        .await
        .expect("a peer opens the run");
    RunStream::check_layout(&js_c, RUN, &ids)
        .await
        .expect("c finds the run laid out as it must be");
    let directory = Directory::new(peers);
    let mut inbox_c: Inbox<String> =
        Inbox::bind(&js_c, RUN, c.agent, directory.clone(), Limits::default())
            .await
            .expect("c binds to its own consumer");
    publish_all(&js_b, vec![outgoing(&envelope(b, 1), c.agent)])
        .await
        .expect("b broadcasts as itself");
    let got = inbox_c
        .next(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered");
    assert_eq!(got.envelope.as_ref().expect("accepted").payload, "from 1");
    got.ack().await.expect("c acks its own delivery");

    // As c, on c's subject: the server refuses a's publish; nothing is stored.
    let sideways = publish_all(&js_a, vec![outgoing(&envelope(c, 2), b.agent)]).await;
    assert!(sideways.is_err(), "{sideways:?}");
    // Claiming c on a's own subject: stored, refused by the recipient as unauthorized.
    let mut forged = outgoing(&envelope(b, 3), c.agent);
    forged.subject = envelope_subject(RUN, c.agent, a.agent);
    publish_all(&js_a, vec![forged])
        .await
        .expect("a may publish on its own subject");
    let got = inbox_c
        .next(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("delivered");
    let (checked, acker) = got.split();
    let refused = checked.expect_err("a forged sender");
    assert!(refused.is_unauthorized(), "{refused}");
    acker.ack().await.expect("acked");

    // No peer reads another's consumer, deletes the stream or makes a consumer of its own.
    // (Looking c's consumer up is allowed: the peer that opens a run looks every consumer up.
    // Pulling from it is not: a gets nothing, c still gets its message.)
    publish_all(&js_b, vec![outgoing(&envelope(b, 4), c.agent)])
        .await
        .expect("b broadcasts as itself");
    let mut theirs = Inbox::<String>::bind(&js_a, RUN, c.agent, directory, Limits::default())
        .await
        .expect("a looks c's consumer up");
    match theirs.next(Duration::from_secs(2)).await {
        Ok(None) | Err(_) => {}
        Ok(Some(d)) => panic!("a pulled c's message: {:?}", d.envelope),
    }
    let got = inbox_c
        .next(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("still delivered to c");
    assert_eq!(got.envelope.as_ref().expect("accepted").payload, "from 4");
    got.ack().await.expect("c acks");
    let deleted = js_b.delete_stream(stream_name(RUN)).await.map(|_| ());
    assert!(deleted.is_err(), "the stream deleted by a peer");
    let any = js_b
        .create_consumer_on_stream(
            jetstream::consumer::pull::Config {
                durable_name: Some(consumer_name(b.agent) + "-all"),
                ..Default::default()
            },
            stream_name(RUN),
        )
        .await;
    assert!(any.is_err(), "an unfiltered consumer: {any:?}");

    let counts = stream.counts().await.expect("counts");
    assert_eq!(
        counts.delivered, 3,
        "b's two broadcasts and a's forgery, not the sideways publish: {counts:?}"
    );
}

/// Any peer's user may create a stream and consumers filtered to run subjects: a rogue peer
/// that makes run 2's stream itself, with its own consumer filtered to another peer's subjects,
/// is found out by `RunStream::check_layout`, which every peer runs before it sends.
#[tokio::test]
async fn a_run_laid_out_by_a_rogue_peer_is_found_out() {
    use jetstream::consumer::pull;
    use jetstream::stream::{Config, RetentionPolicy};
    use quorate_nats::subject::{inbox_filter, run_subjects};
    let peers = [sender(0xa, Role::Peer), sender(0xc, Role::Peer)];
    let Some(server) = peer_server(&peers) else {
        return;
    };
    let ids = peers.map(|p| p.agent);
    let (a, c) = (ids[0], ids[1]);
    let rogue = connect_with(&server.url(), &peer_options(a))
        .await
        .expect("a connects");
    let honest = connect_with(&server.url(), &peer_options(c))
        .await
        .expect("c connects");
    for (run, retention, filter_of_a, why) in [
        // The run's subjects and retention, but a's consumer reads c's messages.
        (
            RunId::from_u128(0x52),
            RetentionPolicy::WorkQueue,
            c,
            "filtered to",
        ),
        // a's own filter, but limits retention (a could later add a consumer on c's subjects).
        (
            RunId::from_u128(0x53),
            RetentionPolicy::Limits,
            a,
            "retention",
        ),
    ] {
        rogue
            .create_stream(Config {
                name: stream_name(run),
                subjects: vec![run_subjects(run)],
                retention,
                ..Default::default()
            })
            .await
            .expect("a peer may create a stream");
        rogue
            .create_consumer_on_stream(
                pull::Config {
                    durable_name: Some(consumer_name(a)),
                    filter_subject: inbox_filter(run, filter_of_a),
                    ..Default::default()
                },
                stream_name(run),
            )
            .await
            .expect("a consumer filtered to a run subject");
        let checked = RunStream::check_layout(&honest, run, &[a]).await;
        let refused = checked.expect_err("a rogue layout").to_string();
        assert!(refused.contains(why), "{retention:?}: {refused}");
    }
}
