//! Peer mode with real processes on loopback: `quorate peer` processes (one per peer) share an
//! etcd cluster (claims, fences, terminal records, results, the root account, and their
//! workers' scripted world and action books) and a NATS JetStream stream (broadcasts), both
//! spawned by the test. Three peers complete a plan with every task completed once and every
//! effect once; a peer SIGKILLed after its effect committed and before its task's terminal
//! record has its task taken over once its lease expires, by a later attempt that imports its
//! book, and every effect is once over all processes (read back from etcd's `kv/world/`); a
//! peer SIGSTOPped past its lease is fenced when it wakes (its book write refused); a run
//! survives losing one member of a 3-member etcd cluster. Needs the cargo features `etcd` and
//! `nats`.

#[path = "../shared-state/tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[path = "processes_peer/etcd_state.rs"]
mod etcd_state;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use etcd_cluster::EtcdCluster;
use etcd_state::{assert_each_effect_once, effect_in_flight, wait_for_takeover, Shared};
use quorate_nats::server::NatsServer;
use quorate_state::EtcdUrl;
use support::{arg, sum_of, temp_path, variant, Running};

const RUN: &str = "0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6c";

/// Peer `i`'s agent id (so the test knows which process is which peer).
fn peer_id(i: usize) -> String {
    format!("0192f4d3-7a1e-7c3b-9f00-00000000000{i}")
}

fn peer(plan: &Path, nats: &str, store: &EtcdUrl, i: usize, extra: &[&str]) -> Child {
    support::quorate_command()
        .args([
            "peer",
            "--allow-plaintext",
            "--json",
            "--nats",
            nats,
            "--store",
            &store.to_string(),
        ])
        .args(["--run", RUN, "--plan", arg(plan), "--peers", "3"])
        .args(["--id", &peer_id(i)])
        .args(if extra.contains(&"--wait-ms") {
            &[][..]
        } else {
            &["--wait-ms", "20000"][..]
        })
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a peer starts")
}

/// Waits for `child` at most `limit`; its output (killed and failed if it did not exit).
fn finish(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "a peer did not exit within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// A finished peer's report (it exited 0: the run completed).
fn completed(out: &Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = support::stdout_json(out);
    assert_eq!(report["stop_reason"], "completed", "{stderr}");
    assert_eq!(report["run_id"], RUN);
    let tasks = report["tasks"].as_array().expect("tasks");
    assert!(tasks.iter().all(|t| t["state"] == "completed"), "{report}");
    report
}

/// Attempts per task, summed over `reports` (each peer reports the tasks it ran).
fn attempts(reports: &[serde_json::Value]) -> Vec<(String, u64)> {
    let first = reports[0]["tasks"].as_array().expect("tasks");
    (0..first.len())
        .map(|i| {
            let sum = reports
                .iter()
                .map(|r| r["tasks"][i]["attempts"].as_u64().expect("attempts"))
                .sum();
            (first[i]["id"].as_str().expect("id").to_string(), sum)
        })
        .collect()
}

fn services(members: usize) -> Option<(EtcdCluster, NatsServer)> {
    let cluster = EtcdCluster::start_in_memory(members)?;
    let nats = NatsServer::start_or_skip()?;
    Some((cluster, nats))
}

#[test]
fn three_peer_processes_complete_a_plan_with_each_task_and_effect_once() {
    let Some((cluster, nats)) = services(1) else {
        return;
    };
    let plan = variant(
        "all_inputs.toml",
        "peers3",
        &[
            ("topology = \"star\"", "topology = \"peer\""),
            ("workers = 2", "workers = 3"),
        ],
    );
    let store = cluster.url("peers3");
    let peers: Vec<Child> = (0..3)
        .map(|i| peer(&plan, &nats.url(), &store, i, &[]))
        .collect();
    let reports: Vec<serde_json::Value> = peers
        .into_iter()
        .map(|p| completed(&finish(p, Duration::from_secs(60))))
        .collect();
    // Each task ran once, on one peer: its claim was won by exactly one process.
    for (task, n) in attempts(&reports) {
        assert_eq!(n, 1, "{task} ran once over all peers: {reports:#?}");
    }
    // One save over all the processes' worlds; two reads and the save executed.
    assert_eq!(sum_of(&reports, "/effects"), 1);
    assert_eq!(sum_of(&reports, "/actions/executed"), 3);
    // One broadcast per task to each other peer, every one delivered through the stream.
    assert_eq!(sum_of(&reports, "/messages/sent"), 4 * 2);
    assert_eq!(sum_of(&reports, "/messages/delivered"), 4 * 2);
    assert_eq!(sum_of(&reports, "/messages/rejected_duplicate"), 0);
    // Every peer reports the same states and results (read from etcd).
    for r in &reports[1..] {
        for (a, b) in r["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .zip(reports[0]["tasks"].as_array().unwrap())
        {
            assert_eq!((&a["state"], &a["result"]), (&b["state"], &b["result"]));
        }
        // The run's budget (granted is each peer's own slices).
        for field in ["limit", "reserve", "spent", "returned"] {
            assert_eq!(r["budget"][field], reports[0]["budget"][field], "{field}");
        }
    }
}

/// `tasks` independent tasks, each calling `db.step` once (answering after `latency_ms`) and
/// answering with its number: one effect per task.
fn parallel_plan(tag: &str, tasks: usize, latency_ms: u64) -> PathBuf {
    let mut text = format!(
        "[run]\ntopology = \"peer\"\nworkers = 3\n\
         budget = {{ steps = {steps}, tool_calls = {calls}, tokens = 10000, cost = 500 }}\n\
         reserve = {{ steps = 4 }}\ncapabilities = [\"db.step\"]\ndeadline_ms = 40000\n\
         call_timeout_ms = 5000\nattempt_timeout_ms = 20000\n",
        steps = tasks * 6 + 10,
        calls = tasks * 2 + 2,
    );
    for i in 0..tasks {
        text.push_str(&format!(
            "\n[[tasks]]\nid = \"t{i}\"\ncapabilities = [\"db.step\"]\n\
             budget = {{ steps = 6, tool_calls = 2, tokens = 200, cost = 10 }}\n\
             script = [\n  {{ do = \"call\", tool = \"db.step\", params = {{ key = \"steps/{i}\" }}, \
             output = {{ n = {i} }}, latency-ms = {latency_ms} }},\n  \
             {{ do = \"answer\", value = {{ n = {i} }} }},\n]\n"
        ));
    }
    let path = temp_path(&format!("{tag}.toml"));
    std::fs::write(&path, text).expect("plan written");
    path
}

/// `tasks` independent tasks, each calling `db.step` (its effect commits at once, its answer
/// comes `window_ms` later: the window to kill or pause the peer in) and then `db.mark`, and
/// answering with its number: two effects per task, and a book write after the window.
fn window_plan(tag: &str, tasks: usize, window_ms: u64) -> PathBuf {
    let mut text = format!(
        "[run]\ntopology = \"peer\"\nworkers = 3\n\
         budget = {{ steps = {steps}, tool_calls = {calls}, tokens = 10000, cost = 500 }}\n\
         reserve = {{ steps = 4 }}\ncapabilities = [\"db.step\", \"db.mark\"]\n\
         deadline_ms = 60000\ncall_timeout_ms = 20000\nattempt_timeout_ms = 30000\n",
        steps = tasks * 8 + 10,
        calls = tasks * 4 + 2,
    );
    for i in 0..tasks {
        text.push_str(&format!(
            "\n[[tasks]]\nid = \"t{i}\"\ncapabilities = [\"db.step\", \"db.mark\"]\n\
             budget = {{ steps = 8, tool_calls = 4, tokens = 200, cost = 10 }}\n\
             script = [\n  {{ do = \"call\", tool = \"db.step\", params = {{ key = \"steps/{i}\" }}, \
             output = {{ n = {i} }}, latency-ms = {window_ms} }},\n  \
             {{ do = \"call\", tool = \"db.mark\", params = {{ key = \"marks/{i}\" }}, output = \"marked\" }},\n  \
             {{ do = \"answer\", value = {{ n = {i} }} }},\n]\n"
        ));
    }
    let path = temp_path(&format!("{tag}.toml"));
    std::fs::write(&path, text).expect("plan written");
    path
}

/// Three peers of `plan` on fresh services, with 1 s leases.
fn three_peers(plan: &Path, nats: &NatsServer, store: &EtcdUrl) -> Vec<Option<Running>> {
    (0..3)
        .map(|i| {
            let p = peer(plan, &nats.url(), store, i, &["--lease-ms", "1000"]);
            Some(Running(Some(p)))
        })
        .collect()
}

#[test]
fn a_peer_killed_after_its_effect_committed_is_taken_over_with_every_effect_once() {
    let Some((cluster, nats)) = services(1) else {
        return;
    };
    const TASKS: usize = 6;
    let plan = window_plan("killed", TASKS, 2500);
    let store = cluster.url("killed");
    let mut peers = three_peers(&plan, &nats, &store);
    let shared = Shared::new(&store);
    let started = Instant::now();
    // Kill the peer whose `db.step` effect committed, inside the call's window: after the
    // effect, before the task's terminal record.
    let (task, effect, victim) = effect_in_flight(&shared);
    let mut killed = peers[victim].take().expect("running").take();
    killed.kill().expect("SIGKILL");
    let kill = Instant::now();
    let _ = killed.wait();
    assert!(shared.record(&task).is_none(), "killed before {task} ended");
    // The killed peer's claim goes with its lease.
    let victim_index = shared
        .roster()
        .and_then(|r| {
            r.peers
                .iter()
                .position(|p| p.to_string() == peer_id(victim))
        })
        .expect("the victim is in the roster");
    while shared.claim(&task) == Some(victim_index) {
        assert!(kill.elapsed() < Duration::from_secs(20), "the claim stays");
        std::thread::sleep(Duration::from_millis(10));
    }
    let claim_gone = kill.elapsed();
    let attempt = wait_for_takeover(&shared, &task);
    let took_over = kill.elapsed();
    let outs: Vec<Output> = peers
        .into_iter()
        .flatten()
        .map(|p| finish(p.take(), Duration::from_secs(60)))
        .collect();
    let ended = kill.elapsed();
    let reports: Vec<serde_json::Value> = outs.iter().map(completed).collect();
    // (A survivor that was waiting on the claim reports it gone; one busy with its own task
    // claims the task afresh once the claim went with the lease: either way by CAS.)
    let stderr: String = outs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).to_string())
        .collect();
    assert!(stderr.contains("fenced off 0 times"), "{stderr}");
    assert!(!stderr.contains("is fenced off"), "{stderr}");
    // The task was taken over by a later attempt on a survivor, which committed it.
    let victim_agent = peer_id(victim);
    let record = shared.record(&task).expect("committed");
    let roster = shared.roster().expect("a roster");
    assert_ne!(roster.peers[record.by].to_string(), victim_agent);
    assert_eq!(attempt, 2, "one takeover");
    let ran = attempts(&reports);
    let again = ran.iter().find(|(t, _)| *t == task).expect("the task").1;
    assert_eq!(again, 2, "{task}: the survivor's attempt is the second");
    // Every effect once over ALL processes, the killed one's included: the survivor queried
    // the killed peer's `db.step` by its id (from the killed peer's book) instead of calling it
    // again, and made the task's `db.mark` itself.
    let effects = assert_each_effect_once(&shared, TASKS);
    let of_task = |tool: &str| {
        effects
            .iter()
            .find(|(_, e)| {
                e.effect.tool == tool && e.effect.action.task == effect.effect.action.task
            })
            .map(|(_, e)| e.clone())
            .expect("an effect of the task")
    };
    assert_eq!(of_task("db.step"), effect, "the killed peer's effect stays");
    assert_ne!(of_task("db.mark").by.to_string(), victim_agent);
    // The claim goes with the lease; the task then waits for a survivor to be free (each runs
    // one task at a time, and these tasks take 2.5 s).
    eprintln!(
        "measured: SIGKILL (after {:?}) -> claim gone with the lease: {} ms; -> fence raised to \
         attempt {attempt} by a survivor: {} ms; -> run completed: {} ms (lease 1000 ms)",
        kill - started,
        claim_gone.as_millis(),
        took_over.as_millis(),
        ended.as_millis()
    );
    // The lease, not the attempt timeout (30 s), moved the task.
    assert!(took_over < Duration::from_secs(10), "{took_over:?}");
}

#[test]
fn a_peer_paused_past_its_lease_is_fenced_and_every_effect_is_once() {
    let Some((cluster, nats)) = services(1) else {
        return;
    };
    const TASKS: usize = 6;
    let plan = window_plan("paused", TASKS, 2500);
    let store = cluster.url("paused");
    let mut peers = three_peers(&plan, &nats, &store);
    let shared = Shared::new(&store);
    let (task, effect, paused) = effect_in_flight(&shared);
    let sleeper = peers[paused].take().expect("running");
    sleeper.signal("STOP");
    let stop = Instant::now();
    let attempt = wait_for_takeover(&shared, &task);
    let took_over = stop.elapsed();
    // Let the survivor's attempt get going, then wake the paused peer: its worker's next book
    // write (for `db.mark`, after its `db.step` window) names attempt 1, and is refused.
    std::thread::sleep(Duration::from_millis(300));
    sleeper.signal("CONT");
    let woke = stop.elapsed();
    let outs: Vec<Output> = peers
        .into_iter()
        .flatten()
        .chain(std::iter::once(sleeper))
        .map(|p| finish(p.take(), Duration::from_secs(60)))
        .collect();
    let ended = stop.elapsed();
    // Every peer completes the run, the woken one too: it took a new lease, gave its void
    // claims up and went on; its worker's book write was refused, once at least.
    let reports: Vec<serde_json::Value> = outs.iter().map(completed).collect();
    let text = String::from_utf8_lossy(&outs[2].stderr).to_string();
    assert!(
        text.contains("is fenced off: attempt 2 owns its action book"),
        "{text}"
    );
    assert!(
        text.contains("its claims are void; going on under lease"),
        "{text}"
    );
    assert!(!text.contains("fenced off 0 times"), "{text}");
    for out in &outs[..2] {
        let other = String::from_utf8_lossy(&out.stderr);
        assert!(other.contains("fenced off 0 times"), "{other}");
    }
    let roster = shared.roster().expect("a roster");
    let record = shared.record(&task).expect("committed");
    assert_ne!(roster.peers[record.by].to_string(), peer_id(paused));
    assert_eq!(attempt, 2);
    // The woken peer reports no attempt of the task (it is not its own any more).
    let ran = attempts(&reports);
    assert_eq!(ran.iter().find(|(t, _)| *t == task).expect("the task").1, 2);
    let effects = assert_each_effect_once(&shared, TASKS);
    let step = effects
        .iter()
        .find(|(_, e)| {
            e.effect.tool == "db.step" && e.effect.action.task == effect.effect.action.task
        })
        .map(|(_, e)| e.clone());
    assert_eq!(step, Some(effect), "the paused peer's effect stays");
    eprintln!(
        "measured: SIGSTOP -> fence raised to attempt {attempt} by another peer: {} ms; \
         SIGCONT at {} ms; SIGSTOP -> run completed: {} ms (lease 1000 ms)",
        took_over.as_millis(),
        woke.as_millis(),
        ended.as_millis()
    );
}

#[test]
fn three_peers_complete_a_run_while_an_etcd_member_is_lost() {
    let Some((mut cluster, nats)) = services(3) else {
        return;
    };
    const TASKS: usize = 9;
    let plan = parallel_plan("member_lost", TASKS, 300);
    let store = cluster.url("member");
    let mut peers: Vec<Child> = (0..3)
        .map(|i| peer(&plan, &nats.url(), &store, i, &[]))
        .collect();
    let shared = Shared::new(&store);
    let started = Instant::now();
    // Kill the leader once the first task ended: the run is in the middle. The peers wait up
    // to 20 s for each other (`--wait-ms`), so a peer slow to join (a loaded host) may hold the
    // first task back nearly that long: the bound is above it, and a peer that never got going
    // says why.
    while (0..TASKS).all(|i| shared.record(&format!("t{i}")).is_none()) {
        if started.elapsed() > Duration::from_secs(30) {
            let said: Vec<String> = peers
                .drain(..)
                .map(|mut p| {
                    let _ = p.kill();
                    let out = p.wait_with_output().expect("output");
                    String::from_utf8_lossy(&out.stderr).into_owned()
                })
                .collect();
            panic!("no task ended within 30 s; the peers said: {said:#?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let done_before = (0..TASKS)
        .filter(|i| shared.record(&format!("t{i}")).is_some())
        .count();
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let reports: Vec<serde_json::Value> = peers
        .into_iter()
        .map(|p| completed(&finish(p, Duration::from_secs(60))))
        .collect();
    assert!(done_before < TASKS, "the member died mid-run");
    // Each task ran once, as attempt 1 of the peer that claimed it: no lease lapses (5 s; the
    // election takes about 0.1 to 0.3 s), so no claim moves, and a write whose answer went with
    // the leader (a claim, a fence, a record) is found to be the peer's own when made again.
    for (i, (task, n)) in attempts(&reports).into_iter().enumerate() {
        let each: Vec<&serde_json::Value> =
            reports.iter().map(|r| &r["tasks"][i]["attempts"]).collect();
        assert_eq!(
            n, 1,
            "{task} ran once over all peers (each peer's: {each:?})"
        );
    }
    assert_eq!(
        sum_of(&reports, "/effects"),
        TASKS as u64,
        "each effect once"
    );
    eprintln!(
        "leader (member {leader}) killed after {done_before} of {TASKS} tasks; run took {:?}",
        started.elapsed()
    );
}

#[test]
fn bad_input_exits_2_and_too_few_peers_exit_9() {
    let star = support::plan("all_inputs.toml");
    let out = support::quorate(&[
        "peer",
        "--allow-plaintext",
        "--nats",
        "nats://127.0.0.1:1",
        "--store",
        "etcd://127.0.0.1:1",
        "--run",
        RUN,
        "--plan",
        arg(&star),
        "--peers",
        "3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("topology = \"peer\""), "{stderr}");
    let out = support::quorate(&[
        "peer",
        "--allow-plaintext",
        "--nats",
        "nats://127.0.0.1:1",
        "--store",
        "etcd://127.0.0.1:1",
        "--run",
        "x",
        "--plan",
        arg(&star),
        "--peers",
        "3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--run: \"x\" is not a uuid"), "{stderr}");
    let Some((cluster, nats)) = services(1) else {
        return;
    };
    let plan = parallel_plan("alone", 2, 10);
    // An etcd cluster that does not answer is bad input too.
    let out = support::quorate(&[
        "peer",
        "--allow-plaintext",
        "--nats",
        &nats.url(),
        "--store",
        "etcd://127.0.0.1:1",
        "--run",
        RUN,
        "--plan",
        arg(&plan),
        "--peers",
        "3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("connecting to etcd at"), "{stderr}");
    let out = peer(
        &plan,
        &nats.url(),
        &cluster.url("alone"),
        0,
        &["--wait-ms", "300"],
    );
    let out = finish(out, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{stderr}");
    assert!(stderr.contains("1 of 3 peers joined"), "{stderr}");
}
