//! TLS-only services with least-privilege users for the process tests, on loopback with
//! certificates made at test time: a nats-server whose users are a supervisor, workers `a` and
//! `b` (named by their agent ids, with the permissions of `quorate_nats::access`) and an
//! `observer` that may read every subject (the test's eyes); an etcd member with client
//! certificate auth and the users `sup`, `a`, `b` (roles of `quorate_state::grants`; the
//! workers' roles are named by their agent ids, as a worker process names its keys). The
//! `*_peers` constructors make the same servers for three peers instead ([`PEERS`], each a
//! peer user on both, named by its agent id). Each process is started with its own
//! credentials as `quorate` flags, passwords in environment variables.

// Each test file uses its own part of this module.
#![allow(dead_code)]

#[path = "../../shared-state/tests/support/certs.rs"]
mod certs;
#[path = "../../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "../support/process.rs"]
mod process;

#[allow(unused_imports)] // each test file uses its own part
pub(crate) use process::{sum_of, Running};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use certs::TestCerts;
use quorate_nats::access::{authorization, AccessRole, NatsOptions, NatsUser, Secret, TlsFiles};
use quorate_nats::server::NatsServer;
use quorate_protocols::AgentId;

/// The client certificate's common name (no etcd user: a certificate alone grants nothing).
pub(crate) const CLIENT_CN: &str = "quorate-client";
/// The variable a process's NATS password is passed in.
pub(crate) const NATS_PASSWORD_ENV: &str = "QUORATE_TEST_NATS_PASSWORD";
/// The variable a process's etcd password is passed in.
pub(crate) const ETCD_PASSWORD_ENV: &str = "QUORATE_TEST_ETCD_PASSWORD";

/// The supervisor's, worker a's and worker b's agent ids (their NATS user names).
pub(crate) const AGENTS: [AgentId; 3] = [
    AgentId::from_u128(0x0192_f4d3_0000_7000_8000_0000_0000_0001),
    AgentId::from_u128(0x0192_f4d3_0000_7000_8000_0000_0000_000a),
    AgentId::from_u128(0x0192_f4d3_0000_7000_8000_0000_0000_000b),
];
/// Their etcd user names.
pub(crate) const ETCD_USERS: [&str; 3] = ["sup", "a", "b"];
/// Three peers' agent ids (their NATS and etcd user names, in `SecureNats::start_peers` and
/// `SecureEtcd::start_peers`).
pub(crate) const PEERS: [AgentId; 3] = [
    AgentId::from_u128(0x0192_f4d3_0000_7000_8000_0000_0000_00e0),
    AgentId::from_u128(0x0192_f4d3_0000_7000_8000_0000_0000_00e1),
    AgentId::from_u128(0x0192_f4d3_0000_7000_8000_0000_0000_00e2),
];
/// Index of the supervisor, worker a, worker b in [`AGENTS`].
pub(crate) const SUP: usize = 0;
/// Worker a.
pub(crate) const A: usize = 1;
/// Worker b.
pub(crate) const B: usize = 2;

pub(crate) fn password(tag: &str) -> Secret {
    Secret::new(format!("{tag}-{:032x}", fastrand::u128(..)))
}

pub(crate) fn quorate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorate"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .env_remove("QUORATE_ALLOW_PLAINTEXT");
    c
}

/// A TLS nats-server with the users of [`AGENTS`] (or [`PEERS`]) and an observer.
pub(crate) struct SecureNats {
    pub(crate) certs: Arc<TestCerts>,
    /// The agents of the users, by index.
    pub(crate) agents: [AgentId; 3],
    pub(crate) passwords: [Secret; 3],
    pub(crate) observer: Secret,
    pub(crate) server: NatsServer,
}

impl SecureNats {
    pub(crate) fn start() -> Option<Self> {
        Self::start_with(Arc::new(TestCerts::make(&[CLIENT_CN])))
    }

    /// [`SecureNats::start`] with the server certificate of `certs` (shared with an etcd).
    pub(crate) fn start_with(certs: Arc<TestCerts>) -> Option<Self> {
        let worker = AccessRole::Worker {
            supervisor: AGENTS[SUP],
        };
        Self::start_cast(certs, AGENTS, [AccessRole::Supervisor, worker, worker])
    }

    /// A server whose users are the three peers of [`PEERS`] (and the observer).
    pub(crate) fn start_peers(certs: Arc<TestCerts>) -> Option<Self> {
        Self::start_cast(certs, PEERS, [AccessRole::Peer; 3])
    }

    fn start_cast(
        certs: Arc<TestCerts>,
        agents: [AgentId; 3],
        roles: [AccessRole; 3],
    ) -> Option<Self> {
        let passwords = [password("nats-0"), password("nats-1"), password("nats-2")];
        let users: Vec<NatsUser> = (0..3)
            .map(|i| NatsUser {
                user: agents[i].to_string(),
                password: passwords[i].clone(),
                agent: agents[i],
                role: roles[i],
            })
            .collect();
        let observer = password("nats-observer");
        // The observer may do anything (no permissions block): it is the test, not a process.
        let users_block = authorization(&users).replace(
            "  ]\n}",
            &format!(
                "    {{ user: \"observer\", password: \"{}\" }}\n  ]\n}}",
                observer.expose()
            ),
        );
        let config = format!(
            "tls {{\n  cert_file: {:?}\n  key_file: {:?}\n  ca_file: {:?}\n  timeout: 2\n}}\n{users_block}",
            certs.server_cert(),
            certs.server_key(),
            certs.ca(),
        );
        let server = NatsServer::start_with_config_or_skip(&config)?;
        Some(Self {
            certs,
            agents,
            passwords,
            observer,
            server,
        })
    }

    pub(crate) fn url(&self) -> String {
        self.server.url()
    }

    fn tls(&self) -> TlsFiles {
        TlsFiles {
            ca: self.certs.ca(),
            identity: None,
        }
    }

    /// The connection options of agent `i` (as a rogue process with its credentials uses them).
    pub(crate) fn options(&self, i: usize) -> NatsOptions {
        NatsOptions {
            tls: Some(self.tls()),
            user: Some((self.agents[i].to_string(), self.passwords[i].clone())),
            inbox_prefix: Some(quorate_nats::access::inbox_prefix(self.agents[i])),
            ..NatsOptions::default()
        }
    }

    /// The observer's options.
    pub(crate) fn observer_options(&self) -> NatsOptions {
        NatsOptions {
            tls: Some(self.tls()),
            user: Some(("observer".into(), self.observer.clone())),
            ..NatsOptions::default()
        }
    }

    /// Adds agent `i`'s TLS and NATS credentials to `cmd`.
    pub(crate) fn as_agent<'c>(&self, cmd: &'c mut Command, i: usize) -> &'c mut Command {
        self.user_of(cmd.arg("--tls-ca").arg(self.certs.ca()), i)
    }

    /// Adds agent `i`'s NATS credentials to `cmd` (no TLS flags: a process that also connects
    /// to a [`SecureEtcd`] of the same certificates gets them from [`SecureEtcd::as_user`]).
    pub(crate) fn user_of<'c>(&self, cmd: &'c mut Command, i: usize) -> &'c mut Command {
        cmd.args(["--nats-user", &self.agents[i].to_string()])
            .args(["--nats-password-env", NATS_PASSWORD_ENV])
            .env(NATS_PASSWORD_ENV, self.passwords[i].expose())
    }

    /// Every secret of this server.
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut all: Vec<String> = self.passwords.iter().map(|p| p.expose().into()).collect();
        all.push(self.observer.expose().into());
        all
    }
}

/// A TLS-only etcd member with client certificate auth, killed by PID on drop.
pub(crate) struct SecureEtcd {
    child: Child,
    port: u16,
    pub(crate) certs: Arc<TestCerts>,
    /// The etcd user names, by index.
    pub(crate) users: [String; 3],
    pub(crate) passwords: [Secret; 3],
    _data: tempfile::TempDir,
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl SecureEtcd {
    /// Starts the member, waits for it over TLS, creates the users `sup`, `a`, `b` and enables
    /// auth.
    pub(crate) fn start() -> Option<Self> {
        Self::start_with(Arc::new(TestCerts::make(&[CLIENT_CN])))
    }

    /// [`SecureEtcd::start`] with the certificates of `certs` (shared with a nats-server).
    pub(crate) fn start_with(certs: Arc<TestCerts>) -> Option<Self> {
        use quorate_state::EtcdRole;
        let roles = [
            EtcdRole::Supervisor,
            EtcdRole::Worker(AGENTS[A].to_string()),
            EtcdRole::Worker(AGENTS[B].to_string()),
        ];
        Self::start_cast(certs, ETCD_USERS.map(String::from), roles)
    }

    /// A member whose users are the three peers of [`PEERS`], each named by its agent id with
    /// the role `quorate-peer-<id>`.
    pub(crate) fn start_peers(certs: Arc<TestCerts>) -> Option<Self> {
        use quorate_state::EtcdRole;
        let ids = PEERS.map(|p| p.to_string());
        Self::start_cast(certs, ids.clone(), ids.map(EtcdRole::Peer))
    }

    fn start_cast(
        certs: Arc<TestCerts>,
        users: [String; 3],
        roles: [quorate_state::EtcdRole; 3],
    ) -> Option<Self> {
        use quorate_state::{EtcdAccount, Store};
        let binary = etcd_cluster::etcd_binary()?;
        let data = tempfile::tempdir().expect("temp dir");
        let (port, peer) = (free_port(), free_port());
        let client = format!("https://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(data.path().join("etcd.log")).expect("log file");
        let child = Command::new(binary)
            .args(["--name", "m0"])
            .arg("--data-dir")
            .arg(data.path().join("m0.etcd"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("m0={peer_url}")])
            .arg("--cert-file")
            .arg(certs.server_cert())
            .arg("--key-file")
            .arg(certs.server_key())
            .arg("--trusted-ca-file")
            .arg(certs.ca())
            .arg("--client-cert-auth")
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        let passwords = [password("etcd-0"), password("etcd-1"), password("etcd-2")];
        let me = Self {
            child,
            port,
            certs,
            users,
            passwords,
            _data: data,
        };
        runtime().block_on(async {
            let admin = me.connect(None).await.expect("a TLS client");
            let probe = admin.store::<u32>("probe");
            let deadline = Instant::now() + Duration::from_secs(20);
            while let Err(e) = probe.get("k").await {
                assert!(Instant::now() < deadline, "etcd over TLS not ready: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let accounts: Vec<EtcdAccount> = roles
                .into_iter()
                .enumerate()
                .map(|(i, role)| EtcdAccount {
                    user: me.users[i].clone(),
                    password: me.passwords[i].clone(),
                    role,
                })
                .collect();
            admin
                .provision(&password("etcd-root"), &accounts)
                .await
                .expect("users, roles, auth enabled");
        });
        Some(me)
    }

    /// `etcd://127.0.0.1:PORT/sec`.
    pub(crate) fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}/sec", self.port)
    }

    fn tls(&self) -> quorate_state::EtcdTls {
        quorate_state::EtcdTls {
            ca: self.certs.ca(),
            identity: Some((
                self.certs.client_cert(CLIENT_CN),
                self.certs.client_key(CLIENT_CN),
            )),
        }
    }

    /// A library connection as user `i` of [`SecureEtcd::users`] (none: anonymous over TLS).
    pub(crate) async fn connect(
        &self,
        user: Option<usize>,
    ) -> Result<quorate_state::Etcd, quorate_state::EtcdConnectError> {
        let security = quorate_state::EtcdSecurity {
            tls: Some(self.tls()),
            user: user.map(|i| (self.users[i].clone(), self.passwords[i].clone())),
            allow_plaintext: false,
        };
        let url = self.url().parse().expect("an etcd URL");
        quorate_state::Etcd::connect_secure(&url, quorate_state::EtcdOptions::default(), &security)
            .await
    }

    /// Adds TLS (with the client certificate) and etcd user `i`'s credentials to `cmd`.
    pub(crate) fn as_user<'c>(&self, cmd: &'c mut Command, i: usize) -> &'c mut Command {
        self.with_tls(cmd)
            .args(["--etcd-user", &self.users[i]])
            .args(["--etcd-password-env", ETCD_PASSWORD_ENV])
            .env(ETCD_PASSWORD_ENV, self.passwords[i].expose())
    }

    /// Adds TLS only (with the client certificate) to `cmd`.
    pub(crate) fn with_tls<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        cmd.arg("--tls-ca")
            .arg(self.certs.ca())
            .arg("--tls-cert")
            .arg(self.certs.client_cert(CLIENT_CN))
            .arg("--tls-key")
            .arg(self.certs.client_key(CLIENT_CN))
    }

    /// Every secret of this member.
    pub(crate) fn secrets(&self) -> Vec<String> {
        self.passwords.iter().map(|p| p.expose().into()).collect()
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Waits for `child` at most `limit`; its output (killed and failed if it did not exit).
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "a process did not exit within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Writes `text` as a plan file in `dir`.
pub(crate) fn plan_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("plan.toml");
    std::fs::write(&path, text).expect("write the plan");
    path
}

/// Fails if any of `secrets` occurs in `text` (named `what`).
#[track_caller]
pub(crate) fn assert_no_secret(what: &str, text: &[u8], secrets: &[String]) {
    let text = String::from_utf8_lossy(text);
    for s in secrets {
        assert!(!s.is_empty());
        assert!(!text.contains(s.as_str()), "{what} shows a secret");
    }
}

/// The environment variable the process tests' plan reads its model API key from.
pub(crate) const API_KEY_ENV: &str = "QUORATE_TEST_MODEL_KEY";

/// The process tests' plan: two staging writes, then a save that depends on both and takes
/// `save_latency_ms` (time for a rogue to act while the run is on). `run_header` opens its `[run]`
/// table (`workers = 2`, or `topology = "peer"` and the peer count). Its `[models.remote]`
/// reads the API key from [`API_KEY_ENV`] (never called: no task is a model task), so the
/// secrets checks can look for it.
pub(crate) fn staged_plan(run_header: &str, save_latency_ms: u64) -> String {
    format!(
        r#"
[run]
{run_header}
budget = {{ steps = 60, tool_calls = 12, tokens = 1000, cost = 50 }}
reserve = {{ steps = 4 }}
capabilities = ["db.stage", "db.save"]
deadline_ms = 30000
call_timeout_ms = 10000
attempt_timeout_ms = 20000

[models.remote]
base_url = "http://127.0.0.1:9/v1"
model = "unused"
api_key_env = "{API_KEY_ENV}"

[[tasks]]
id = "left"
capabilities = ["db.stage"]
budget = {{ steps = 6, tool_calls = 2, tokens = 200, cost = 10 }}
script = [
  {{ do = "call", tool = "db.stage", params = {{ key = "left" }}, output = {{ rows = 1 }}, latency-ms = 300 }},
  {{ do = "answer", value = {{ rows = 1 }} }},
]

[[tasks]]
id = "right"
capabilities = ["db.stage"]
budget = {{ steps = 6, tool_calls = 2, tokens = 200, cost = 10 }}
script = [
  {{ do = "call", tool = "db.stage", params = {{ key = "right" }}, output = {{ rows = 2 }}, latency-ms = 300 }},
  {{ do = "answer", value = {{ rows = 2 }} }},
]

[[tasks]]
id = "save"
deps = ["left", "right"]
capabilities = ["db.save"]
budget = {{ steps = 6, tool_calls = 2, tokens = 200, cost = 10 }}
script = [
  {{ do = "call", tool = "db.save", params = {{ key = "batches/1" }}, output = "saved", latency-ms = {save_latency_ms} }},
  {{ do = "answer", value = "saved" }},
]
"#
    )
}

/// Publishes `payload` on `subject` through JetStream as user `who` of `nats` (with JetStream
/// message id `msg_id`); the server's answer.
pub(crate) fn publish_as(
    nats: &SecureNats,
    who: usize,
    subject: String,
    msg_id: String,
    payload: Vec<u8>,
) -> Result<(), String> {
    use quorate_nats::codec::Outgoing;
    runtime().block_on(async {
        let js = quorate_nats::secure::connect_with(&nats.url(), &nats.options(who))
            .await
            .map_err(|e| e.to_string())?;
        let message = Outgoing {
            subject,
            msg_id,
            payload,
        };
        quorate_nats::transport::publish_all(&js, vec![message])
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}
