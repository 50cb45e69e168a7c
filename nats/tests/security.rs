//! TLS and least-privilege users on a real nats-server (spawned per test on loopback, with
//! certificates made at test time): the users and permissions of `quorate_nats::access`, the
//! connection options of `quorate_nats::secure`.
//!
//! Worker A, connected over TLS with its own user, reads its assignment and replies as itself;
//! its reply in worker B's name is refused by the server and the stream stores nothing of it.
//! Without a user, with a wrong password, or without TLS, the connection is refused.

#[path = "../../shared-state/tests/support/certs.rs"]
mod certs;

use std::time::Duration;

use certs::TestCerts;
use quorate_nats::access::{authorization, AccessRole, NatsOptions, NatsUser, Secret, TlsFiles};
use quorate_nats::codec::{outgoing, Directory};
use quorate_nats::secure::{connect_with, SecureConnectError};
use quorate_nats::server::NatsServer;
use quorate_nats::transport::{publish_all, Inbox, RunStream, Settings};
use quorate_protocols::{AgentId, Envelope, IdSource, Limits, Role, RunId, Sender, TaskId};

const RUN: RunId = RunId::from_u128(0x21);

fn sender(id: u128, role: Role) -> Sender {
    Sender {
        agent: AgentId::from_u128(id),
        role,
    }
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

/// A supervisor and workers `a` and `b`, their users (random passwords), the certificates and a
/// TLS-only server with those users.
struct Setup {
    sup: Sender,
    a: Sender,
    b: Sender,
    users: Vec<NatsUser>,
    certs: TestCerts,
    server: NatsServer,
}

fn password() -> Secret {
    Secret::new(format!("pw-{:032x}", fastrand::u128(..)))
}

fn setup() -> Option<Setup> {
    let (sup, a, b) = (
        sender(1, Role::Supervisor),
        sender(2, Role::Worker),
        sender(3, Role::Worker),
    );
    let worker = AccessRole::Worker {
        supervisor: sup.agent,
    };
    let users = vec![
        NatsUser {
            user: "sup".into(),
            password: password(),
            agent: sup.agent,
            role: AccessRole::Supervisor,
        },
        NatsUser {
            user: "a".into(),
            password: password(),
            agent: a.agent,
            role: worker,
        },
        NatsUser {
            user: "b".into(),
            password: password(),
            agent: b.agent,
            role: worker,
        },
    ];
    let certs = TestCerts::make(&[]);
    let config = format!(
        "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  timeout: 2\n}}\n{}",
        certs.server_cert(),
        certs.server_key(),
        certs.ca(),
        authorization(&users),
    );
    let server = NatsServer::start_with_config_or_skip(&config)?;
    Some(Setup {
        sup,
        a,
        b,
        users,
        certs,
        server,
    })
}

impl Setup {
    fn tls(&self) -> TlsFiles {
        TlsFiles {
            ca: self.certs.ca(),
            identity: None,
        }
    }

    fn options(&self, user: usize) -> NatsOptions {
        NatsOptions::for_user(&self.users[user], self.tls())
    }
}

#[tokio::test]
async fn over_tls_a_worker_replies_only_as_itself() {
    let Some(s) = setup() else { return };
    let url = s.server.url();
    let js = connect_with(&url, &s.options(0))
        .await
        .expect("the supervisor connects over TLS");
    let stream = RunStream::create(
        &js,
        RUN,
        &[s.sup.agent, s.a.agent, s.b.agent],
        Settings::default(),
    )
    .await
    .expect("stream");
    publish_all(&js, vec![outgoing(&envelope(s.sup, 1), s.a.agent)])
        .await
        .expect("assignment");

    let mut js_a = connect_with(&url, &s.options(1))
        .await
        .expect("worker a connects over TLS");
    js_a.set_timeout(Duration::from_millis(1500));
    let directory = Directory::new([s.sup, s.a, s.b]);
    let mut inbox: Inbox<String> =
        Inbox::bind(&js_a, RUN, s.a.agent, directory.clone(), Limits::default())
            .await
            .expect("a binds to its own consumer");
    let got = inbox
        .next(Duration::from_secs(5))
        .await
        .expect("read")
        .expect("delivered");
    assert_eq!(got.envelope.as_ref().expect("accepted").payload, "from 1");
    got.ack().await.expect("a acks its own delivery");
    publish_all(&js_a, vec![outgoing(&envelope(s.a, 2), s.sup.agent)])
        .await
        .expect("a replies as itself");

    // In b's name: refused by the server's permissions, nothing stored.
    let forged = publish_all(&js_a, vec![outgoing(&envelope(s.b, 3), s.sup.agent)]).await;
    assert!(forged.is_err(), "{forged:?}");
    // To b, as itself: a worker sends only to its supervisor.
    let sideways = publish_all(&js_a, vec![outgoing(&envelope(s.a, 4), s.b.agent)]).await;
    assert!(sideways.is_err(), "{sideways:?}");
    let theirs = Inbox::<String>::bind(&js_a, RUN, s.b.agent, directory, Limits::default()).await;
    assert!(theirs.is_err(), "{theirs:?}");

    let counts = stream.counts().await.expect("counts");
    assert_eq!(counts.stored, 2, "the assignment and a's reply: {counts:?}");
}

#[tokio::test]
async fn without_credentials_or_with_a_wrong_password_the_connection_is_refused() {
    let Some(s) = setup() else { return };
    let url = s.server.url();
    let anonymous = NatsOptions {
        tls: Some(s.tls()),
        ..NatsOptions::default()
    };
    let refused = connect_with(&url, &anonymous).await;
    assert!(
        matches!(refused, Err(SecureConnectError::Connect { .. })),
        "{refused:?}"
    );
    let mut wrong = s.options(1);
    wrong.user = Some(("a".into(), Secret::new("not-a's-password")));
    let refused = connect_with(&url, &wrong).await;
    assert!(
        matches!(refused, Err(SecureConnectError::Connect { .. })),
        "{refused:?}"
    );
    // The same user with its own password gets in (so the refusals above are the credentials').
    connect_with(&url, &s.options(1))
        .await
        .expect("a's own credentials");
}

#[tokio::test]
async fn without_tls_the_client_refuses_and_so_does_the_server() {
    // No TLS and plaintext not allowed: refused before any I/O (nothing listens on port 9).
    let plain = NatsOptions::default();
    let refused = connect_with("nats://127.0.0.1:9", &plain).await;
    assert!(
        matches!(refused, Err(SecureConnectError::Plaintext { .. })),
        "{refused:?}"
    );

    let Some(s) = setup() else { return };
    // Plaintext allowed on the client, with a's valid credentials: the TLS-only server still
    // refuses (the client has no CA to trust its certificate).
    let mut plain = s.options(1);
    plain.tls = None;
    plain.allow_plaintext = true;
    let refused = connect_with(&s.server.url(), &plain).await;
    assert!(
        matches!(refused, Err(SecureConnectError::Connect { .. })),
        "{refused:?}"
    );
}
