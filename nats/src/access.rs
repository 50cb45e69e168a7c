//! Who may do what on NATS: the subject permissions of each agent's user, the nats-server
//! `authorization` block that grants them, and the connection options a process connects with
//! ([`NatsOptions`]: TLS, its user, its inbox prefix).
//!
//! Permissions hold for every run (the run token is a wildcard), so one set of credentials per
//! agent serves a deployment; the sender token of a subject is always the agent's own id, so the
//! sender the server authenticated is the subject's last token (see [`crate::subject`]).
//!
//! | role | may publish | may subscribe |
//! |---|---|---|
//! | worker `A` (supervisor `P`) | `quorate.*.P.A`; `quorate.register.*.A`; `$JS.API.CONSUMER.INFO.*.to-A`, `$JS.API.CONSUMER.MSG.NEXT.*.to-A`; `$JS.ACK.*.to-A.>` | `_INBOX_A.>`; `quorate.welcome.*.A`, `quorate.end.*` |
//! | peer `A` | `quorate.*.*.A`; the same three consumer subjects for `to-A`; to open a run: `$JS.API.STREAM.INFO.*`, `$JS.API.STREAM.CREATE.*`, `$JS.API.CONSUMER.INFO.*.*`, `$JS.API.CONSUMER.CREATE.*.*.quorate.*.*.*` | `_INBOX_A.>` |
//! | supervisor `P` | `quorate.*.*.P`; `$JS.API.>` (streams and consumers); `quorate.welcome.>`, `quorate.end.>`; `$JS.ACK.*.to-P.>` | `_INBOX_P.>`; `quorate.register.>` |
//!
//! The `register`, `welcome` and `end` subjects are the process split's plain NATS subjects
//! (outside every run's stream): a worker registers only as itself (the subject's last token,
//! which its permissions fix, is the worker the supervisor records), hears only its own welcome
//! and the end of runs.
//!
//! A peer's run has no owner: the first peer to join the run's roster (decided on etcd at run
//! time, not by its credentials) creates the stream and every peer's consumer. Permissions are
//! fixed per user before any run, so every peer's user may open a run: look streams and
//! consumers up, create a stream, and create a consumer whose filter is a run subject
//! (`quorate.<run>.<to>.*`; the filter is the subject's last tokens, and the server checks it
//! against the consumer's configuration). No peer may delete, purge or update a stream or a
//! consumer, nor pull from or ack on another agent's consumer. A stream's subjects and a
//! consumer's name-to-filter pairing are beyond subject permissions (the name `to-A` and the
//! filter's `A` are separate tokens): a peer could make a run's stream itself, before the run,
//! with its own consumer filtered to another peer's subjects. So every peer checks the layout
//! before it sends (`transport::RunStream::check_layout`: the run's subjects,
//! work-queue retention, each `to-A` filtered to `A`) and refuses to run otherwise; once the
//! layout is right, work-queue retention makes the server refuse any other consumer on a
//! peer's subjects. What remains is denial: a stream made on a run's subjects in advance stops
//! that run.

use std::path::PathBuf;

use quorate_protocols::AgentId;

use crate::subject::{consumer_name, PREFIX};

/// A secret string (a password): `Debug` prints `<redacted>` (one type for every crate).
pub use quorate_protocols::Secret;

/// What an agent's NATS user is for: it decides the user's [`Permissions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessRole {
    /// The run's owner: publishes as itself to anyone, creates and deletes streams and
    /// consumers.
    Supervisor,
    /// A star worker: reads its own consumer, replies to its supervisor as itself.
    Worker {
        /// The only agent it may send to.
        supervisor: AgentId,
    },
    /// A peer: reads its own consumer, sends to any agent as itself, and may open a run (create
    /// its stream and consumers: whichever peer joins the roster first does).
    Peer,
}

/// The JetStream API subjects with which a peer opens a run (`RunStream::open_or_create` of
/// `transport`: stream and consumer lookups, the stream's creation, and consumers
/// filtered to a run subject `quorate.<run>.<to>.*`). No delete, purge or update.
pub const PEER_OPENS_A_RUN: [&str; 4] = [
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.CREATE.*",
    "$JS.API.CONSUMER.INFO.*.*",
    "$JS.API.CONSUMER.CREATE.*.*.quorate.*.*.*",
];

/// The subjects a user may publish and subscribe to (nats-server allow lists).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permissions {
    /// Subjects it may publish to.
    pub publish: Vec<String>,
    /// Subjects it may subscribe to.
    pub subscribe: Vec<String>,
}

/// The inbox prefix of `agent`'s connection (`_INBOX_<agent>`): replies to its requests (its
/// JetStream API calls and publish acks) arrive under it, and no other user may read it.
#[must_use]
pub fn inbox_prefix(agent: AgentId) -> String {
    format!("_INBOX_{agent}")
}

/// The least-privilege permissions of `agent` in `role` (the table of the module docs).
#[must_use]
pub fn permissions(agent: AgentId, role: AccessRole) -> Permissions {
    let consumer = consumer_name(agent);
    let own_consumer = [
        format!("$JS.API.CONSUMER.INFO.*.{consumer}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.*.{consumer}"),
        format!("$JS.ACK.*.{consumer}.>"),
    ];
    let mut subscribe = vec![format!("{}.>", inbox_prefix(agent))];
    let mut publish = match role {
        AccessRole::Supervisor => {
            subscribe.push(format!("{PREFIX}.register.>"));
            vec![
                format!("{PREFIX}.*.*.{agent}"),
                "$JS.API.>".into(),
                format!("{PREFIX}.welcome.>"),
                format!("{PREFIX}.end.>"),
            ]
        }
        AccessRole::Worker { supervisor } => {
            subscribe.push(format!("{PREFIX}.welcome.*.{agent}"));
            subscribe.push(format!("{PREFIX}.end.*"));
            vec![
                format!("{PREFIX}.*.{supervisor}.{agent}"),
                format!("{PREFIX}.register.*.{agent}"),
            ]
        }
        AccessRole::Peer => {
            let mut publish = vec![format!("{PREFIX}.*.*.{agent}")];
            publish.extend(PEER_OPENS_A_RUN.iter().map(|s| (*s).to_string()));
            publish
        }
    };
    publish.extend(own_consumer);
    Permissions { publish, subscribe }
}

/// One NATS user: its name and password, the agent it speaks for and that agent's role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsUser {
    /// The user name.
    pub user: String,
    /// Its password.
    pub password: Secret,
    /// The agent the user speaks for.
    pub agent: AgentId,
    /// What the agent is.
    pub role: AccessRole,
}

/// A nats-server `authorization { users = [...] }` block granting each user its
/// [`permissions`]. Names and passwords are written as JSON strings (nats-server's config
/// syntax accepts them), so no character of theirs can change the block's structure.
#[must_use]
pub fn authorization(users: &[NatsUser]) -> String {
    let list = |subjects: &[String]| {
        let quoted: Vec<String> = subjects.iter().map(|s| quote(s)).collect();
        quoted.join(", ")
    };
    let mut out = String::from("authorization {\n  users = [\n");
    for u in users {
        let p = permissions(u.agent, u.role);
        out.push_str(&format!(
            "    {{ user: {}, password: {}, permissions: {{ publish: {{ allow: [{}] }}, subscribe: {{ allow: [{}] }} }} }}\n",
            quote(&u.user),
            quote(u.password.expose()),
            list(&p.publish),
            list(&p.subscribe),
        ));
    }
    out.push_str("  ]\n}\n");
    out
}

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The TLS side of a connection: the CA that signed the server's certificate, and the client's
/// own certificate and key when the server asks for one (`verify: true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of the CA the server's certificate must chain to.
    pub ca: PathBuf,
    /// PEM files of the client's certificate and private key, if any.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// How a process connects to NATS (see `secure::connect_with`, feature `nats`).
///
/// `Debug` never shows the password.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsOptions {
    /// TLS: required unless [`NatsOptions::allow_plaintext`].
    pub tls: Option<TlsFiles>,
    /// The user name and password, if the server has users.
    pub user: Option<(String, Secret)>,
    /// A `.creds` file (user JWT and nkey seed) instead of a user.
    pub credentials_file: Option<PathBuf>,
    /// An nkey seed instead of a user.
    pub nkey: Option<Secret>,
    /// The connection's inbox prefix (set it to [`inbox_prefix`] of the agent when its user
    /// has the [`permissions`] of this module).
    pub inbox_prefix: Option<String>,
    /// Development only: allow a connection without TLS (anyone on the path reads and forges
    /// the traffic). Off by default.
    pub allow_plaintext: bool,
}

impl NatsOptions {
    /// The options for `user` with TLS from `tls`: its name and password and its agent's inbox
    /// prefix.
    #[must_use]
    pub fn for_user(user: &NatsUser, tls: TlsFiles) -> Self {
        Self {
            tls: Some(tls),
            user: Some((user.user.clone(), user.password.clone())),
            inbox_prefix: Some(inbox_prefix(user.agent)),
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_password() {
        let user = NatsUser {
            user: "w1".into(),
            password: Secret::new("hunter2-sekrit"),
            agent: AgentId::from_u128(2),
            role: AccessRole::Worker {
                supervisor: AgentId::from_u128(1),
            },
        };
        let tls = TlsFiles {
            ca: "ca.pem".into(),
            identity: None,
        };
        let shown = format!("{user:?} {:?}", NatsOptions::for_user(&user, tls));
        assert!(!shown.contains("hunter2-sekrit"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("w1"),
            "{shown}"
        );
        // The server's configuration does carry it.
        assert!(authorization(&[user]).contains("\"hunter2-sekrit\""));
    }

    #[test]
    fn a_worker_publishes_only_its_own_replies_to_its_supervisor() {
        let (p, a) = (AgentId::from_u128(1), AgentId::from_u128(2));
        let w = permissions(a, AccessRole::Worker { supervisor: p });
        assert_eq!(w.publish[0], format!("quorate.*.{p}.{a}"));
        assert!(w.publish.iter().all(|s| !s.starts_with("$JS.API.>")));
        assert_eq!(w.publish[1], format!("quorate.register.*.{a}"));
        assert!(w.publish.iter().skip(2).all(|s| s.contains("to-")));
        assert_eq!(w.subscribe[0], format!("_INBOX_{a}.>"));
        assert_eq!(w.subscribe[1], format!("quorate.welcome.*.{a}"));
        let peer = permissions(a, AccessRole::Peer);
        assert_eq!(peer.publish[0], format!("quorate.*.*.{a}"));
        let sup = permissions(p, AccessRole::Supervisor);
        assert!(sup.publish.contains(&"$JS.API.>".to_string()));
    }

    /// Whether NATS subject `subject` is matched by the allow-list entry `pattern` (`*` one
    /// token, `>` the rest).
    fn matches(pattern: &str, subject: &str) -> bool {
        let (mut p, mut s) = (pattern.split('.'), subject.split('.'));
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    fn allowed(list: &[String], subject: &str) -> bool {
        list.iter().any(|p| matches(p, subject))
    }

    #[test]
    fn a_peer_opens_a_run_and_speaks_only_as_itself() {
        use crate::subject::{envelope_subject, inbox_filter, stream_name};
        let (a, b) = (AgentId::from_u128(0xa), AgentId::from_u128(0xb));
        let run = quorate_protocols::RunId::from_u128(7);
        let p = permissions(a, AccessRole::Peer);
        let stream = stream_name(run);
        // Everything `RunStream::open_or_create` asks, for every peer's consumer.
        let mut needed = vec![
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.STREAM.CREATE.{stream}"),
            envelope_subject(run, b, a),
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.to-{a}"),
            format!("$JS.ACK.{stream}.to-{a}.1.2.3.4.5"),
        ];
        for to in [a, b] {
            let c = consumer_name(to);
            needed.push(format!("$JS.API.CONSUMER.INFO.{stream}.{c}"));
            needed.push(format!(
                "$JS.API.CONSUMER.CREATE.{stream}.{c}.{}",
                inbox_filter(run, to)
            ));
        }
        for s in &needed {
            assert!(allowed(&p.publish, s), "{s} in {:?}", p.publish);
        }
        // Never as another, never another's consumer, never deleting or reconfiguring, never a
        // consumer without a run-subject filter.
        let c = consumer_name(a);
        let refused = [
            envelope_subject(run, a, b),
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.to-{b}"),
            format!("$JS.ACK.{stream}.to-{b}.1.2.3.4.5"),
            format!("$JS.API.STREAM.DELETE.{stream}"),
            format!("$JS.API.STREAM.PURGE.{stream}"),
            format!("$JS.API.STREAM.UPDATE.{stream}"),
            format!("$JS.API.CONSUMER.DELETE.{stream}.{c}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{c}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{c}.quorate.>"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{c}._INBOX_{b}.x"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{c}"),
            format!("{PREFIX}.end.{run}"),
        ];
        for s in &refused {
            assert!(!allowed(&p.publish, s), "{s} allowed: {:?}", p.publish);
        }
        assert_eq!(p.subscribe, [format!("_INBOX_{a}.>")]);
        // A worker may open nothing.
        let w = permissions(a, AccessRole::Worker { supervisor: b });
        assert!(!allowed(
            &w.publish,
            &format!("$JS.API.STREAM.CREATE.{stream}")
        ));
        assert!(!allowed(&w.publish, &needed[8]), "{}", needed[8]);
    }

    #[test]
    fn quoting_keeps_the_block_intact() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(quote("x\ny"), r#""x\u000ay""#);
    }
}
