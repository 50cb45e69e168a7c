//! A rogue process among real ones (issue 21), everything over TLS on loopback with
//! certificates made at test time and a user per agent (tests/secure):
//!
//! * a supervisor process and workers `a` and `b` run a plan over NATS; during the run the test,
//!   with `a`'s credentials, publishes a reply claiming to be `b` on `a`'s own subject: the
//!   supervisor refuses it as unauthorized and counts it (`messages.rejected_unauthorized` of its
//!   `--json`), the task is unaffected; on `b`'s subject the server refuses the publish itself;
//!   the run completes with every effect exactly once;
//! * a reply captured from that run's stream, published again into a second run, is rejected;
//! * a process without credentials, with another agent's user, or without TLS is refused;
//! * with worker `a`'s etcd credentials, writing a result key of a kept run or `b`'s action
//!   book is denied and nothing changed;
//! * no password and no model API key appears in the trace, the HTML report, `--json`, or any
//!   process's stdout and stderr.

mod secure;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use quorate_nats::secure::connect_with;
use secure::{
    assert_no_secret, finish, plan_file, publish_as, quorate, runtime, staged_plan, SecureEtcd,
    SecureNats, A, AGENTS, API_KEY_ENV, B, SUP,
};

fn worker(nats: &SecureNats, i: usize, run: &str, plan: &Path) -> Child {
    let mut cmd = quorate();
    cmd.args(["worker", "--nats", &nats.url(), "--run", run, "--plan"])
        .arg(plan)
        .args(["--wait-ms", "30000"]);
    nats.as_agent(&mut cmd, i)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts")
}

fn supervisor(nats: &SecureNats, run: &str, plan: &Path, trace: &Path) -> Child {
    let mut cmd = quorate();
    cmd.arg("run")
        .arg(plan)
        .args(["--json", "--nats", &nats.url(), "--remote-workers", "2"])
        .args(["--run", run, "--wait-ms", "30000", "--trace"])
        .arg(trace)
        .env(API_KEY_ENV, "sk-test-model-key-0123456789abcdef");
    nats.as_agent(&mut cmd, SUP)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("supervisor starts")
}

/// The number after `label` in `text`.
fn figure(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} in {text}"))
        + label.len();
    text[at..]
        .split_whitespace()
        .next()
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("a number after {label:?} in {text}"))
}

/// What one run of the three processes left: the supervisor's output, its `--json`, and the
/// workers' outputs.
struct Ran {
    supervisor: Output,
    report: serde_json::Value,
    workers: Vec<Output>,
}

impl Ran {
    fn effects(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| figure(&String::from_utf8_lossy(&w.stderr), "handled, "))
            .sum()
    }

    fn messages(&self, counter: &str) -> u64 {
        self.report["messages"][counter]
            .as_u64()
            .unwrap_or_else(|| panic!("messages.{counter} in {}", self.report))
    }
}

/// Starts workers a and b and the supervisor of `run`; once the first worker reply is on the
/// run's stream, calls `rogue` with it (subject, payload) while the run goes on; then waits for
/// every process.
fn run_with_rogue(
    nats: &SecureNats,
    run: &str,
    plan: &Path,
    trace: &Path,
    rogue: impl FnOnce(&str, &[u8]),
) -> Ran {
    let rt = runtime();
    let observer = rt
        .block_on(connect_with(&nats.url(), &nats.observer_options()))
        .expect("the observer connects")
        .client();
    let mut replies = rt
        .block_on(observer.subscribe(format!("quorate.{run}.{}.*", AGENTS[SUP])))
        .expect("the observer subscribes");
    let workers = [A, B].map(|i| worker(nats, i, run, plan));
    let sup = supervisor(nats, run, plan, trace);
    let first = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(40), replies.next()).await })
        .expect("a worker replied within 40 s")
        .expect("the subscription is open");
    rogue(&first.subject, &first.payload);
    let supervisor = finish(sup, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&supervisor.stderr).to_string();
    assert_eq!(supervisor.status.code(), Some(0), "supervisor: {stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&supervisor.stdout).expect("one JSON object on stdout");
    let workers = workers
        .into_iter()
        .map(|w| {
            let out = finish(w, Duration::from_secs(30));
            let text = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "worker: {text}");
            out
        })
        .collect();
    Ran {
        supervisor,
        report,
        workers,
    }
}

/// The agent a reply subject `quorate.<run>.<to>.<from>` is from.
fn from_of(subject: &str) -> usize {
    let from = subject.rsplit('.').next().expect("a token");
    AGENTS
        .iter()
        .position(|a| a.to_string() == from)
        .unwrap_or_else(|| panic!("{subject} is from one of the agents"))
}

fn fresh_uuid() -> String {
    format!(
        "0192f4d3-{:04x}-7{:03x}-8{:03x}-{:012x}",
        fastrand::u16(..),
        fastrand::u16(..0x1000),
        fastrand::u16(..0x1000),
        fastrand::u64(..1 << 48)
    )
}

#[test]
fn a_rogue_worker_is_refused_and_counted_while_the_run_completes_once() {
    let Some(nats) = SecureNats::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = plan_file(dir.path(), &staged_plan("workers = 2", 1500));
    let trace = dir.path().join("trace.jsonl");
    let run1 = "0192f4d3-7a1e-7c3b-9f00-000000000001";
    let mut captured: Option<(usize, String, Vec<u8>)> = None;
    let mut denied_sideways = None;

    let first = run_with_rogue(&nats, run1, &plan, &trace, |subject, payload| {
        let from = from_of(subject);
        let mut msg_id = String::new();
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(payload) {
            msg_id = v["dedupe"].as_str().expect("a dedupe key").to_string();
        }
        captured = Some((from, msg_id, payload.to_vec()));
        // With a's credentials, a reply claiming to be b, on a's own subject (which a may
        // publish on): stored by the stream, refused by the supervisor.
        let mut forged: serde_json::Value = serde_json::from_slice(payload).expect("JSON");
        forged["sender"]["agent"] = AGENTS[B].to_string().into();
        forged["dedupe"] = fresh_uuid().into();
        let forged_id = forged["dedupe"].as_str().unwrap().to_string();
        let own_subject = format!("quorate.{run1}.{}.{}", AGENTS[SUP], AGENTS[A]);
        publish_as(
            &nats,
            A,
            own_subject,
            forged_id,
            serde_json::to_vec(&forged).unwrap(),
        )
        .expect("a may publish on its own reply subject");
        // The same on b's subject: the server refuses a's publish.
        let b_subject = format!("quorate.{run1}.{}.{}", AGENTS[SUP], AGENTS[B]);
        forged["dedupe"] = fresh_uuid().into();
        let id = forged["dedupe"].as_str().unwrap().to_string();
        denied_sideways = Some(publish_as(
            &nats,
            A,
            b_subject,
            id,
            serde_json::to_vec(&forged).unwrap(),
        ));
    });
    let sideways = denied_sideways.expect("the rogue ran");
    assert!(
        sideways.is_err(),
        "a published on b's subject: {sideways:?}"
    );
    let sup_err = String::from_utf8_lossy(&first.supervisor.stderr);
    assert_eq!(first.report["stop_reason"], "completed", "{sup_err}");
    assert_eq!(
        first.messages("rejected_unauthorized"),
        1,
        "the forged reply, refused by the supervisor and counted: {sup_err}"
    );
    assert!(sup_err.contains("claims"), "{sup_err}");
    for task in first.report["tasks"].as_array().expect("tasks") {
        assert_eq!(task["state"], "completed", "{task}");
        assert_eq!(task["attempts"], 1, "the forgery changed nothing: {task}");
    }
    assert_eq!(first.report["actions"]["duplicate_effects"], 0);
    assert_eq!(first.effects(), 3, "every effect exactly once");

    // Secrets: none in any output, the trace or the HTML page.
    let mut secrets = nats.secrets();
    secrets.push("sk-test-model-key-0123456789abcdef".into());
    let page = dir.path().join("report.html");
    let rendered = quorate()
        .arg("report")
        .arg(&trace)
        .arg("-o")
        .arg(&page)
        .output()
        .expect("report runs");
    assert_eq!(rendered.status.code(), Some(0));
    let trace_text = std::fs::read(&trace).expect("a trace");
    assert!(!trace_text.is_empty());
    // The refused forgery is in the trace and on the page too, not only in the counts.
    let refusals = String::from_utf8_lossy(&trace_text)
        .lines()
        .filter(|l| l.contains("\"kind\":\"rejected-unauthorized\""))
        .count();
    assert_eq!(refusals, 1, "the forged reply's rejection in the trace");
    let html = std::fs::read_to_string(&page).expect("a page");
    let bar = html
        .split("data-reason=\"unauthorized\"")
        .nth(1)
        .and_then(|rest| rest.split("</div>").next())
        .expect("an unauthorized bar");
    assert!(bar.contains("<b>1</b>"), "the page counts it: {bar}");
    assert_no_secret("the trace", &trace_text, &secrets);
    assert_no_secret("the HTML report", &std::fs::read(&page).unwrap(), &secrets);
    assert_no_secret("--json", &first.supervisor.stdout, &secrets);
    assert_no_secret(
        "the supervisor's stderr",
        &first.supervisor.stderr,
        &secrets,
    );
    for w in &first.workers {
        assert_no_secret("a worker's stdout", &w.stdout, &secrets);
        assert_no_secret("a worker's stderr", &w.stderr, &secrets);
    }

    // A reply of the first run, replayed into a second one by the worker that sent it (on its
    // own subject, with its own credentials): rejected, counted, nothing else changes.
    let (from, msg_id, payload) = captured.expect("a reply captured");
    let run2 = "0192f4d3-7a1e-7c3b-9f00-000000000002";
    let second = run_with_rogue(&nats, run2, &plan, &trace, |_, _| {
        let subject = format!("quorate.{run2}.{}.{}", AGENTS[SUP], AGENTS[from]);
        publish_as(&nats, from, subject, msg_id, payload).expect("its own subject");
    });
    // Another run's envelope acts on another run's state: stale, not a forgery.
    assert_eq!(
        second.messages("rejected_stale"),
        1,
        "the replay: {}",
        second.report["messages"]
    );
    assert_eq!(second.messages("rejected_unauthorized"), 0);
    assert_eq!(second.report["stop_reason"], "completed");
    assert_eq!(second.effects(), 3, "every effect exactly once");
    assert_eq!(second.report["actions"]["duplicate_effects"], 0);
}

fn refused(cmd: &mut Command, why: &str) {
    let out = cmd.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{why}: {stderr}");
}

#[test]
fn without_credentials_tls_or_its_own_user_a_process_is_refused() {
    let Some(nats) = SecureNats::start() else {
        return;
    };
    let run = "0192f4d3-7a1e-7c3b-9f00-000000000003";
    let worker = |cmd: &mut Command| {
        cmd.args(["worker", "--nats", &nats.url(), "--run", run])
            .args([
                "--plan",
                "examples/plans/cancel_mid_run.toml",
                "--wait-ms",
                "500",
            ]);
    };
    let mut plain = quorate();
    worker(&mut plain);
    let out = plain.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing a plaintext connection"),
        "{stderr}"
    );

    // Allowed by the development variable: the client tries, the TLS-only server refuses.
    let mut allowed = quorate();
    worker(&mut allowed);
    let out = allowed
        .env("QUORATE_ALLOW_PLAINTEXT", "1")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        !stderr.contains("refusing") && stderr.contains("connecting to NATS at"),
        "{stderr}"
    );

    let mut anonymous = quorate();
    worker(&mut anonymous);
    anonymous.arg("--tls-ca").arg(nats.certs.ca());
    refused(&mut anonymous, "without a user");

    // a's user with b's password.
    let mut wrong = quorate();
    worker(&mut wrong);
    nats.as_agent(&mut wrong, A)
        .env(secure::NATS_PASSWORD_ENV, nats.passwords[B].expose());
    refused(&mut wrong, "a wrong password");

    // a's credentials, claiming to be b with --id.
    let mut other = quorate();
    worker(&mut other);
    nats.as_agent(&mut other, A)
        .args(["--id", &AGENTS[B].to_string()]);
    let out = other.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("speaks only as its NATS user"), "{stderr}");
    assert_no_secret("stderr", &out.stderr, &nats.secrets());
}

#[test]
fn with_a_workers_etcd_credentials_results_and_other_books_are_denied() {
    let Some(etcd) = SecureEtcd::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let plan = plan_file(dir.path(), &staged_plan("workers = 2", 0));
    let url = etcd.url();
    let mut run = quorate();
    run.arg("run")
        .arg(&plan)
        .args(["--json", "--store", &url])
        .env(API_KEY_ENV, "sk-test-model-key-0123456789abcdef");
    let out = etcd.as_user(&mut run, SUP).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let id = report["run_id"].as_str().expect("a run id").to_string();
    let mut secrets = etcd.secrets();
    secrets.push("sk-test-model-key-0123456789abcdef".into());
    assert_no_secret("--json", &out.stdout, &secrets);
    assert_no_secret("stderr", &out.stderr, &secrets);

    let show = || {
        let mut cmd = quorate();
        cmd.args(["show", &id, "--json", "--store", &url]);
        let out = etcd.as_user(&mut cmd, SUP).output().expect("runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_no_secret("show --json", &out.stdout, &secrets);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("JSON")
    };
    let before = show();
    assert_eq!(before["stop_reason"], "completed", "{before}");

    runtime().block_on(async {
        use quorate_state::{Store, StoreError};
        let a = etcd.connect(Some(A)).await.expect("a connects");
        let results = a.store::<serde_json::Value>("results");
        let kept = results.scan("").await.expect("a reads results");
        assert!(!kept.is_empty(), "the run's results are there");
        for (key, v) in kept {
            let w = results
                .cas(&key, Some(v.version), serde_json::json!("forged"))
                .await;
            assert!(matches!(w, Err(StoreError::Denied { .. })), "{key}: {w:?}");
        }
        let new = results
            .cas(&format!("{id}/save"), None, serde_json::json!("forged"))
            .await;
        assert!(matches!(new, Err(StoreError::Denied { .. })), "{new:?}");
        let book = a
            .store::<serde_json::Value>(&format!("book/{}", AGENTS[B]))
            .cas("call-1", None, serde_json::json!("forged"))
            .await;
        assert!(matches!(book, Err(StoreError::Denied { .. })), "{book:?}");
        let own = a
            .store::<serde_json::Value>(&format!("book/{}", AGENTS[A]))
            .cas("call-1", None, serde_json::json!(1))
            .await;
        assert!(own.is_ok(), "a writes its own book: {own:?}");
    });
    assert_eq!(show(), before, "nothing changed");

    // Without a user (TLS only), or without TLS: refused, exit 2.
    let mut anonymous = quorate();
    anonymous.args(["runs", "--store", &url]);
    refused(etcd.with_tls(&mut anonymous), "without an etcd user");
    let mut plain = quorate();
    plain.args(["runs", "--store", &url]);
    let out = plain.output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refusing a plaintext connection"),
        "{stderr}"
    );
}

/// `scripts/credentials.sh nats-users` writes exactly the `authorization` block of
/// `quorate_nats::access` (the permissions the processes need, and no more).
#[test]
fn the_scripts_nats_users_have_the_librarys_permissions() {
    use quorate_nats::access::{authorization, AccessRole, NatsUser, Secret};
    let dir = tempfile::tempdir().expect("temp dir");
    let ids: Vec<String> = AGENTS.iter().map(ToString::to_string).collect();
    let out = Command::new("bash")
        .arg("scripts/credentials.sh")
        .arg("nats-users")
        .arg(dir.path())
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
    let worker = AccessRole::Worker {
        supervisor: AGENTS[SUP],
    };
    let users: Vec<NatsUser> = AGENTS
        .iter()
        .zip([AccessRole::Supervisor, worker, worker])
        .map(|(&agent, role)| NatsUser {
            user: agent.to_string(),
            password: Secret::new("same-for-all"),
            agent,
            role,
        })
        .collect();
    assert_eq!(written, authorization(&users));
    let passwords = std::fs::read_to_string(dir.path().join("nats-passwords")).expect("written");
    assert_eq!(passwords.lines().count(), 3);
}
