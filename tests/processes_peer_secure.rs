//! Peer processes under TLS and least-privilege users (issue 21), on loopback with certificates
//! made at test time (tests/secure): three `quorate peer` processes, each with its own NATS user
//! (`AccessRole::Peer`, named by its agent id) and its own etcd user (`EtcdRole::Peer`), run a
//! plan together:
//!
//! * the run completes with each task run once and each effect once; whichever peer joins first
//!   opens the run's stream with its own user's permissions;
//! * during the run the test, with the credentials of the peer that sent the first broadcast,
//!   publishes a broadcast claiming to be the third peer on its own subject: the recipient
//!   refuses it and counts it (`messages.rejected_unauthorized`); on the third peer's subject
//!   the server refuses the publish itself;
//! * with one peer's etcd credentials, writing another peer's action book, a run record, the
//!   run log or a star's budget is denied and nothing changed; its own book it may write;
//! * a peer without TLS, without an etcd or NATS user, with a wrong password or claiming another
//!   peer's id is refused (exit 2);
//! * no password and no model API key appears in any peer's stdout (`--json`) or stderr (peer
//!   processes write no trace).
//!
//! `scripts/credentials.sh nats-users --peers` renders the library's peer permissions.

mod secure;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use quorate::coordinator::peer::Terminal;
use quorate_nats::secure::connect_with;
use quorate_state::{RunLog, Store, StoreError};
use secure::{
    assert_no_secret, finish, plan_file, publish_as, quorate, runtime, staged_plan, sum_of,
    Running, SecureEtcd, SecureNats, TestCerts, API_KEY_ENV, PEERS,
};

const RUN: &str = "0192f4d3-7a1e-7c3b-9f00-0000000000e5";
/// The model API key the plan's `[models.remote]` reads (never used: no task is a model task).
const API_KEY: &str = "sk-test-model-key-peer-0123456789abcdef";

/// `quorate peer` of run [`RUN`] (3 peers) with `plan`, as peer `i` when `creds` (TLS, its etcd
/// user and its NATS user).
fn peer_command(etcd: &SecureEtcd, nats: &SecureNats, plan: &Path, i: Option<usize>) -> Command {
    let mut cmd = quorate();
    cmd.args([
        "peer",
        "--json",
        "--nats",
        &nats.url(),
        "--store",
        &etcd.url(),
    ])
    .args(["--run", RUN, "--peers", "3", "--wait-ms", "30000", "--plan"])
    .arg(plan)
    .env(API_KEY_ENV, API_KEY);
    if let Some(i) = i {
        etcd.as_user(&mut cmd, i);
        nats.user_of(&mut cmd, i);
    }
    cmd
}

fn services() -> Option<(SecureEtcd, SecureNats)> {
    let certs = Arc::new(TestCerts::make(&[secure::CLIENT_CN]));
    let etcd = SecureEtcd::start_peers(certs.clone())?;
    let nats = SecureNats::start_peers(certs)?;
    Some((etcd, nats))
}

/// A fresh JetStream message id for a forged publish.
fn forged_id() -> String {
    format!("forged-{:032x}", fastrand::u128(..))
}

/// The index in [`PEERS`] of the agent a subject token names.
fn peer_index(token: &str) -> usize {
    PEERS
        .iter()
        .position(|p| p.to_string() == token)
        .unwrap_or_else(|| panic!("{token} is one of the peers"))
}

#[test]
fn three_peers_with_their_own_users_complete_a_plan_and_refuse_a_forgery() {
    let Some((etcd, nats)) = services() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = plan_file(
        dir.path(),
        &staged_plan("topology = \"peer\"\nworkers = 3", 1500),
    );
    let rt = runtime();
    let observer = rt
        .block_on(connect_with(&nats.url(), &nats.observer_options()))
        .expect("the observer connects")
        .client();
    let mut broadcasts = rt
        .block_on(observer.subscribe(format!("quorate.{RUN}.>")))
        .expect("the observer subscribes");
    let peers: Vec<Running> = (0..3)
        .map(|i| {
            let child = peer_command(&etcd, &nats, &plan, Some(i))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("a peer starts");
            Running(Some(child))
        })
        .collect();

    // The first broadcast, from peer `from` to peer `to`: the run is open and going.
    let first = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(40), broadcasts.next()).await })
        .expect("a peer broadcast within 40 s")
        .expect("the subscription is open");
    let tokens: Vec<&str> = first.subject.split('.').collect();
    let (to, from) = (peer_index(tokens[2]), peer_index(tokens[3]));
    let third = 3 - to - from;
    let mut forged: serde_json::Value = serde_json::from_slice(&first.payload).expect("JSON");
    forged["sender"]["agent"] = PEERS[third].to_string().into();
    forged["dedupe"] = "0192f4d3-7a1e-7c3b-9f00-00000000f0f0".into();
    let forged = serde_json::to_vec(&forged).expect("JSON");
    // With `from`'s credentials, claiming `third`, on `from`'s own subject: stored, refused by
    // `to` and counted.
    publish_as(
        &nats,
        from,
        format!("quorate.{RUN}.{}.{}", PEERS[to], PEERS[from]),
        forged_id(),
        forged.clone(),
    )
    .expect("a peer may publish on its own subject");
    // On `third`'s subject: the server refuses the publish.
    let sideways = publish_as(
        &nats,
        from,
        format!("quorate.{RUN}.{}.{}", PEERS[to], PEERS[third]),
        forged_id(),
        forged,
    );
    assert!(
        sideways.is_err(),
        "a peer published as another: {sideways:?}"
    );

    let outputs: Vec<Output> = peers
        .into_iter()
        .map(|p| finish(p.take(), Duration::from_secs(60)))
        .collect();
    let reports: Vec<serde_json::Value> = outputs
        .iter()
        .map(|out| {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "peer: {stderr}");
            let report: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
            assert_eq!(report["stop_reason"], "completed", "{stderr}");
            assert!(!stderr.contains("permission denied"), "{stderr}");
            report
        })
        .collect();
    // The forgery: refused by its recipient only, and counted there.
    for (i, r) in reports.iter().enumerate() {
        let counted = r["messages"]["rejected_unauthorized"]
            .as_u64()
            .expect("a count");
        assert_eq!(counted, u64::from(i == to), "peer {i}: {}", r["messages"]);
    }
    let stderr_to = String::from_utf8_lossy(&outputs[to].stderr);
    assert!(stderr_to.contains("claims"), "{stderr_to}");
    // Each task ran once over all peers; each effect once.
    for t in 0..3 {
        let ran: u64 = reports
            .iter()
            .map(|r| r["tasks"][t]["attempts"].as_u64().expect("attempts"))
            .sum();
        assert_eq!(ran, 1, "task {t} over all peers: {reports:#?}");
        for r in &reports {
            assert_eq!(r["tasks"][t]["state"], "completed", "{r}");
        }
    }
    assert_eq!(sum_of(&reports, "/effects"), 3, "{reports:#?}");
    assert_eq!(sum_of(&reports, "/actions/executed"), 3);
    assert_eq!(sum_of(&reports, "/actions/duplicate_effects"), 0);

    // Secrets: in no output of any peer (they write no trace).
    let mut secrets = nats.secrets();
    secrets.extend(etcd.secrets());
    secrets.push(API_KEY.into());
    for out in &outputs {
        assert_no_secret("a peer's --json", &out.stdout, &secrets);
        assert_no_secret("a peer's stderr", &out.stderr, &secrets);
    }

    // With peer 0's etcd credentials: another peer's books, a run record, the run log and a
    // star's budget are denied; nothing changed (read back as peer 1); its own book is its.
    rt.block_on(async {
        let rogue = etcd.connect(Some(0)).await.expect("peer 0 connects");
        let other = etcd.connect(Some(1)).await.expect("peer 1 connects");
        // What peer 1 reads: the run's terminal records and results, and the stores the rogue
        // tries to write.
        let snapshot = || async {
            let states = other.store::<Terminal>("peer-states");
            let states: Vec<_> = states.scan("").await.expect("peer 1 reads");
            // The peers' action books (typed: a book is not a JSON value in the store's codec).
            let books = other.store::<quorate::workers::StoredBook>("book");
            let books: Vec<_> = books.scan("").await.expect("peer 1 reads");
            let mut all = Vec::new();
            for store in ["results", "runs", "intents", "budget"] {
                let s = other.store::<serde_json::Value>(store);
                let kept = s.scan("").await.expect("peer 1 reads");
                all.push((store, kept));
            }
            (states, books, all)
        };
        let before = snapshot().await;
        assert_eq!(before.0.len(), 3, "the run's terminal records are there");
        assert!(!before.1.is_empty(), "the peers' action books are on etcd");
        let forged = serde_json::json!("forged");
        for (store, key) in [
            (format!("book/{}", PEERS[1]), format!("{RUN}/save/1")),
            ("runs".to_string(), RUN.to_string()),
            ("intents".to_string(), format!("{RUN}/x")),
            ("budget".to_string(), RUN.to_string()),
        ] {
            let w = rogue
                .store::<serde_json::Value>(&store)
                .cas(&key, None, forged.clone())
                .await;
            assert!(
                matches!(w, Err(StoreError::Denied { .. })),
                "{store}/{key}: {w:?}"
            );
        }
        let run: quorate::protocols::RunId = quorate::process::parse_id(RUN).expect("a run id");
        let log = rogue
            .log::<serde_json::Value>("events")
            .append(run, forged.clone())
            .await;
        assert!(log.is_err(), "the run log: {log:?}");
        assert_eq!(snapshot().await, before, "nothing changed");
        let own = rogue
            .store::<serde_json::Value>(&format!("book/{}", PEERS[0]))
            .cas(&format!("{RUN}/save/1"), None, serde_json::json!(1))
            .await;
        assert!(own.is_ok(), "a peer writes its own book: {own:?}");
    });
}

fn refused(cmd: &mut Command, why: &str) -> String {
    let out = cmd.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{why}: {stderr}");
    stderr
}

#[test]
fn a_peer_without_tls_its_users_or_its_own_id_is_refused() {
    let Some((etcd, nats)) = services() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = plan_file(
        dir.path(),
        &staged_plan("topology = \"peer\"\nworkers = 3", 1500),
    );
    let mut secrets = nats.secrets();
    secrets.extend(etcd.secrets());

    let stderr = refused(&mut peer_command(&etcd, &nats, &plan, None), "without TLS");
    assert!(
        stderr.contains("refusing a plaintext connection"),
        "{stderr}"
    );

    // TLS and a NATS user, no etcd user: etcd refuses.
    let mut no_etcd_user = peer_command(&etcd, &nats, &plan, None);
    etcd.with_tls(&mut no_etcd_user);
    nats.user_of(&mut no_etcd_user, 0);
    let stderr = refused(&mut no_etcd_user, "without an etcd user");
    assert!(stderr.contains("etcd"), "{stderr}");

    // TLS and an etcd user, no NATS user: the server refuses.
    let mut no_nats_user = peer_command(&etcd, &nats, &plan, None);
    etcd.as_user(&mut no_nats_user, 0);
    let stderr = refused(&mut no_nats_user, "without a NATS user");
    assert!(stderr.contains("NATS"), "{stderr}");

    // Peer 0's NATS user with peer 1's password.
    let mut wrong = peer_command(&etcd, &nats, &plan, Some(0));
    wrong.env(secure::NATS_PASSWORD_ENV, nats.passwords[1].expose());
    let out = wrong.output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_secret("stderr", &out.stderr, &secrets);

    // Peer 0's credentials, claiming to be peer 1.
    let mut other = peer_command(&etcd, &nats, &plan, Some(0));
    other.args(["--id", &PEERS[1].to_string()]);
    let out = other.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("speaks only as its NATS user"), "{stderr}");
    assert_no_secret("stderr", &out.stderr, &secrets);

    // None of them joined the run.
    runtime().block_on(async {
        let reader = etcd.connect(Some(1)).await.expect("connects");
        let roster = reader
            .store::<serde_json::Value>("peer-roster")
            .scan("")
            .await
            .expect("reads");
        assert!(roster.is_empty(), "{roster:?}");
    });
}

/// `scripts/credentials.sh nats-users --peers` writes exactly the `authorization` block of
/// `quorate_nats::access` for peers.
#[test]
fn the_scripts_peer_users_have_the_librarys_permissions() {
    use quorate_nats::access::{authorization, AccessRole, NatsUser, Secret};
    let dir = tempfile::tempdir().expect("temp dir");
    let ids: Vec<String> = PEERS.iter().map(ToString::to_string).collect();
    let out = Command::new("bash")
        .arg("scripts/credentials.sh")
        .arg("nats-users")
        .arg(dir.path())
        .arg("--peers")
        .args(&ids)
        .env("QUORATE_CREDENTIALS_PASSWORD", "same-for-all")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(dir.path().join("nats-users.conf")).expect("written");
    let users: Vec<NatsUser> = PEERS
        .iter()
        .map(|&agent| NatsUser {
            user: agent.to_string(),
            password: Secret::new("same-for-all"),
            agent,
            role: AccessRole::Peer,
        })
        .collect();
    assert_eq!(written, authorization(&users));
    let passwords = std::fs::read_to_string(dir.path().join("nats-passwords")).expect("written");
    assert_eq!(passwords.lines().count(), 3);
}
