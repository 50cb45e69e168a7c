//! TLS and least-privilege users on a real etcd member (spawned on loopback with certificates
//! made at test time, client and peer TLS, `--client-cert-auth`, then auth enabled with
//! [`Etcd::provision`]): worker A writes its own book and claims and the tools' world, and reads
//! results, every worker's books and the fences, but writing a result, worker B's book or a fence
//! is denied with nothing changed; a book write guarded by the supervisor's fence is refused once
//! the fence names a newer attempt; a client without a user, with a
//! wrong password, without TLS or without a client certificate is refused.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/etcd_cluster.rs"]
mod etcd_cluster;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use certs::TestCerts;
use quorate_state::{
    CasOutcome, Etcd, EtcdAccount, EtcdConnectError, EtcdOptions, EtcdRole, EtcdSecurity, EtcdTls,
    EtcdUrl, Guarded, Secret, Store, StoreError,
};

/// The client certificate's common name: not an etcd user, so the certificate alone grants
/// nothing once auth is on (etcd takes a certificate's CN as the user when no password is given).
const CLIENT_CN: &str = "quorate-client";

/// One TLS-only etcd member, killed by PID on drop.
struct TlsEtcd {
    child: Child,
    port: u16,
    certs: TestCerts,
    _data: tempfile::TempDir,
}

impl Drop for TlsEtcd {
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

impl TlsEtcd {
    fn start() -> Option<Self> {
        let binary = etcd_cluster::etcd_binary()?;
        let certs = TestCerts::make(&[CLIENT_CN]);
        let data = tempfile::tempdir().expect("temp dir");
        let (port, peer) = (free_port(), free_port());
        let client = format!("https://127.0.0.1:{port}");
        let peer_url = format!("https://127.0.0.1:{peer}");
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
            .arg("--peer-cert-file")
            .arg(certs.server_cert())
            .arg("--peer-key-file")
            .arg(certs.server_key())
            .arg("--peer-trusted-ca-file")
            .arg(certs.ca())
            .arg("--peer-client-cert-auth")
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        Some(Self {
            child,
            port,
            certs,
            _data: data,
        })
    }

    fn url(&self) -> EtcdUrl {
        format!("etcd://127.0.0.1:{}/sec", self.port)
            .parse()
            .expect("a valid URL")
    }

    fn tls(&self) -> EtcdTls {
        EtcdTls {
            ca: self.certs.ca(),
            identity: Some((
                self.certs.client_cert(CLIENT_CN),
                self.certs.client_key(CLIENT_CN),
            )),
        }
    }

    fn security(&self, user: Option<(&str, &Secret)>) -> EtcdSecurity {
        EtcdSecurity {
            tls: Some(self.tls()),
            user: user.map(|(u, p)| (u.to_string(), p.clone())),
            allow_plaintext: false,
        }
    }

    async fn connect(&self, security: &EtcdSecurity) -> Result<Etcd, EtcdConnectError> {
        Etcd::connect_secure(&self.url(), EtcdOptions::default(), security).await
    }
}

/// A running member with auth enabled: users `sup`, `a` and `b` (supervisor, workers).
struct Setup {
    etcd: TlsEtcd,
    passwords: [Secret; 3],
}

fn password() -> Secret {
    Secret::new(format!("pw-{:032x}", fastrand::u128(..)))
}

async fn setup() -> Option<Setup> {
    let etcd = TlsEtcd::start()?;
    let admin = etcd
        .connect(&etcd.security(None))
        .await
        .expect("a TLS client");
    let probe = admin.store::<u32>("probe");
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Err(e) = probe.get("k").await {
        assert!(Instant::now() < deadline, "etcd over TLS not ready: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let passwords = [password(), password(), password()];
    let accounts = [
        ("sup", EtcdRole::Supervisor),
        ("a", EtcdRole::Worker("a".into())),
        ("b", EtcdRole::Worker("b".into())),
    ]
    .into_iter()
    .zip(&passwords)
    .map(|((user, role), password)| EtcdAccount {
        user: user.into(),
        password: password.clone(),
        role,
    })
    .collect::<Vec<_>>();
    admin
        .provision(&password(), &accounts)
        .await
        .expect("users, roles, auth enabled");
    Some(Setup { etcd, passwords })
}

impl Setup {
    async fn as_user(&self, i: usize) -> Etcd {
        let user = ["sup", "a", "b"][i];
        self.etcd
            .connect(&self.etcd.security(Some((user, &self.passwords[i]))))
            .await
            .expect("connects with its own user")
    }
}

fn denied<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    assert!(matches!(r, Err(StoreError::Denied { .. })), "{r:?}");
}

#[test]
fn a_worker_writes_only_its_own_book_and_claims() {
    runtime().block_on(async {
        let Some(s) = setup().await else { return };
        let sup = s.as_user(0).await;
        let results = sup.store::<u32>("results");
        let CasOutcome::Committed(v1) = results.cas("t1", None, 1).await.expect("sup writes")
        else {
            panic!("t1 was absent")
        };

        let a = s.as_user(1).await;
        let read = a.store::<u32>("results").get("t1").await.expect("a reads");
        assert_eq!(read.map(|r| r.value), Some(1));
        assert!(a
            .store::<u32>("book/a")
            .cas("call-1", None, 7)
            .await
            .expect("a writes its book")
            .is_committed());
        assert!(a
            .store::<u32>("claims/a")
            .cas("t1", None, 1)
            .await
            .expect("a writes its claims")
            .is_committed());

        denied(a.store::<u32>("results").cas("t1", Some(v1), 99).await);
        denied(a.store::<u32>("results").cas("t2", None, 99).await);
        denied(a.store::<u32>("book/b").cas("call-1", None, 99).await);
        denied(a.store::<u32>("claims/b").cas("t1", None, 99).await);
        denied(a.store::<u32>("budget").cas("acct", None, 99).await);
        // A worker reads every worker's books (a takeover imports the lost worker's) and the
        // fences, but writes neither another's book nor a fence.
        assert!(a
            .store::<u32>("book/b")
            .get("call-1")
            .await
            .expect("a reads b's books")
            .is_none());
        denied(a.store::<u32>("fence").cas("run/t1", None, 2).await);
        assert!(a
            .store::<u32>("fence")
            .get("run/t1")
            .await
            .expect("a reads the fences")
            .is_none());
        // The tools' world (the external systems they act on) is every worker's to write.
        assert!(a
            .store::<u32>("world")
            .cas("run/t1/effect", None, 1)
            .await
            .expect("a writes the world")
            .is_committed());

        // Read back as the supervisor: nothing changed.
        let t1 = results.get("t1").await.expect("read").expect("present");
        assert_eq!((t1.value, t1.version), (1, v1));
        assert!(results.get("t2").await.expect("read").is_none());
        assert!(sup
            .store::<u32>("book/b")
            .scan("")
            .await
            .expect("scan")
            .is_empty());
        assert_eq!(
            sup.store::<u32>("book/a")
                .get("call-1")
                .await
                .expect("read")
                .map(|r| r.value),
            Some(7)
        );
        // The supervisor writes results but not a worker's book.
        denied(sup.store::<u32>("book/a").cas("call-2", None, 1).await);
    });
}

#[test]
fn a_worker_writes_its_own_book_only_while_the_supervisors_fence_names_its_attempt() {
    runtime().block_on(async {
        let Some(s) = setup().await else { return };
        let (sup, a, b) = (s.as_user(0).await, s.as_user(1).await, s.as_user(2).await);
        let fences = sup.store::<u32>("fence");
        let (a_books, b_books) = (a.store::<u32>("book/a"), b.store::<u32>("book/b"));
        // Attempt 1 writes while there is no fence.
        let Guarded::Held(CasOutcome::Committed(v1)) = a_books
            .cas_guarded(
                "run/t1",
                None,
                1,
                &a.store::<u32>("fence")
                    .guard("run/t1", None)
                    .expect("encodes"),
            )
            .await
            .expect("a writes its book")
        else {
            panic!("a's first write was refused")
        };
        // The supervisor fences attempt 2 in: a's next write is refused, nothing changed.
        assert!(fences
            .cas("run/t1", None, 2)
            .await
            .expect("sup writes")
            .is_committed());
        let none = a
            .store::<u32>("fence")
            .guard("run/t1", None)
            .expect("encodes");
        assert_eq!(
            a_books
                .cas_guarded("run/t1", Some(v1), 11, &none)
                .await
                .expect("answered"),
            Guarded::Unmet
        );
        assert_eq!(
            a_books
                .get("run/t1")
                .await
                .expect("read")
                .map(|r| (r.value, r.version)),
            Some((1, v1))
        );
        // B (attempt 2) reads a's book, and writes the import under its own prefix only.
        let imported = b
            .store::<u32>("book/a")
            .get("run/t1")
            .await
            .expect("b reads a's");
        assert_eq!(imported.map(|r| r.value), Some(1));
        let two = b
            .store::<u32>("fence")
            .guard("run/t1", Some(&2))
            .expect("encodes");
        denied(
            b.store::<u32>("book/a")
                .cas_guarded("run/t1", Some(v1), 2, &two)
                .await,
        );
        assert!(matches!(
            b_books
                .cas_guarded("run/t1", None, 2, &two)
                .await
                .expect("answered"),
            Guarded::Held(CasOutcome::Committed(_))
        ));
        // A guard on a fence that names attempt 2 fails for attempt 1 of a too.
        let one = a
            .store::<u32>("fence")
            .guard("run/t1", Some(&1))
            .expect("encodes");
        assert_eq!(
            a_books
                .cas_guarded("run/t1", Some(v1), 12, &one)
                .await
                .expect("answered"),
            Guarded::Unmet
        );
        denied(b.store::<u32>("fence").cas("run/t1", None, 3).await);
        assert_eq!(
            fences.get("run/t1").await.expect("read").map(|r| r.value),
            Some(2)
        );
    });
}

#[test]
fn without_a_user_or_with_a_wrong_password_the_client_is_refused() {
    runtime().block_on(async {
        let Some(s) = setup().await else { return };
        // No user: the certificate's CN is no etcd user, every request is refused.
        let anonymous = s.etcd.connect(&s.etcd.security(None)).await.expect("lazy");
        denied(anonymous.store::<u32>("results").get("t1").await);
        denied(anonymous.store::<u32>("book/a").cas("k", None, 1).await);
        // A wrong password: refused while connecting.
        let wrong = Secret::new("not-a's-password");
        let refused = s.etcd.connect(&s.etcd.security(Some(("a", &wrong)))).await;
        assert!(
            matches!(
                refused,
                Err(EtcdConnectError::Store(StoreError::Denied { .. }))
            ),
            "{refused:?}"
        );
        // The same user with its own password gets in.
        let a = s.as_user(1).await;
        a.store::<u32>("results").get("t1").await.expect("a reads");
    });
}

#[test]
fn without_tls_or_a_client_certificate_the_connection_is_refused() {
    runtime().block_on(async {
        // No TLS and plaintext not allowed: refused before any I/O.
        let url: EtcdUrl = "etcd://127.0.0.1:9/sec".parse().expect("a valid URL");
        let refused =
            Etcd::connect_secure(&url, EtcdOptions::default(), &EtcdSecurity::default()).await;
        assert!(
            matches!(refused, Err(EtcdConnectError::Plaintext { .. })),
            "{refused:?}"
        );

        let Some(s) = setup().await else { return };
        let fast = EtcdOptions {
            request_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            ..EtcdOptions::default()
        };
        // Plaintext allowed by the client, with a valid user: the TLS-only member refuses it.
        let plain = EtcdSecurity {
            tls: None,
            user: Some(("a".into(), s.passwords[1].clone())),
            allow_plaintext: true,
        };
        let refused = Etcd::connect_secure(&s.etcd.url(), fast, &plain).await;
        assert!(refused.is_err(), "{refused:?}");
        // TLS without a client certificate: the member requires one (--client-cert-auth).
        let no_cert = EtcdSecurity {
            tls: Some(EtcdTls {
                ca: s.etcd.certs.ca(),
                identity: None,
            }),
            user: Some(("a".into(), s.passwords[1].clone())),
            allow_plaintext: false,
        };
        let refused = Etcd::connect_secure(&s.etcd.url(), fast, &no_cert).await;
        assert!(refused.is_err(), "{refused:?}");
    });
}
