//! The subject layout lets NATS permissions pin a worker to its own traffic (docs/distributed.md,
//! "Permissions"): with a user allowed only its own reply subject, its own consumer and its own
//! inbox prefix, worker A reads and acks its assignment and replies as itself, but cannot publish
//! a reply in worker B's name (the stream stores nothing) nor read B's consumer.

use std::time::Duration;

use quorate_nats::async_nats::{jetstream, ConnectOptions};
use quorate_nats::codec::{outgoing, Directory};
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
