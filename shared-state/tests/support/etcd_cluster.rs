//! Real etcd members for tests: spawned on 127.0.0.1 free ports with their data in a temporary
//! directory, killed by PID on drop.
//!
//! Without an `etcd` binary a test is skipped (a line on stderr), unless
//! `QUORATE_REQUIRE_SERVICES=1`, when it panics.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quorate_state::EtcdUrl;

const MISSING: &str =
    "skipped: etcd is not installed, install with scripts/etcd.sh install (apt-get install etcd-server)";

/// The etcd binary, or `None` (after printing why) if the test is to be skipped.
pub(crate) fn etcd_binary() -> Option<PathBuf> {
    let binary =
        std::env::var_os("QUORATE_ETCD").map_or_else(|| PathBuf::from("etcd"), PathBuf::from);
    let found = Command::new(&binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(binary);
    }
    if std::env::var("QUORATE_REQUIRE_SERVICES").as_deref() == Ok("1") {
        panic!("{MISSING}");
    }
    eprintln!("{MISSING}");
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One member: its ports, its data directory and (while it runs) its process.
pub(crate) struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A cluster of etcd members on loopback. Dropping it kills every member (SIGKILL, by PID)
/// and removes the data.
pub(crate) struct EtcdCluster {
    binary: PathBuf,
    members: Vec<Member>,
    initial: String,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `n` members with data on disk (a temporary directory) and waits until each is
    /// healthy; `None` if etcd is not installed.
    pub(crate) fn start(n: usize) -> Option<Self> {
        Self::start_in(n, tempfile::tempdir().expect("temp dir"))
    }

    /// As [`EtcdCluster::start`], with the data in memory (/dev/shm) where there is one: the
    /// members' fsyncs cost nothing, for tests of semantics rather than durability. The data
    /// still outlives a member's SIGKILL.
    pub(crate) fn start_in_memory(n: usize) -> Option<Self> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())
        } else {
            tempfile::tempdir()
        };
        Self::start_in(n, dir.expect("temp dir"))
    }

    fn start_in(n: usize, dir: tempfile::TempDir) -> Option<Self> {
        let binary = etcd_binary()?;
        let members: Vec<Member> = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: free_port(),
                peer: free_port(),
                data: dir.path().join(format!("m{i}.etcd")),
                log: dir.path().join(format!("m{i}.log")),
                child: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Self {
            binary,
            members,
            initial,
            _dir: dir,
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        for i in 0..n {
            cluster.wait_healthy(i);
        }
        Some(cluster)
    }

    /// The URL of every member, with key prefix `prefix`.
    pub(crate) fn url(&self, prefix: &str) -> EtcdUrl {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
            .parse()
            .expect("a valid URL")
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    fn spawn(&mut self, i: usize) {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client);
        let peer = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)
            .expect("member log file");
        // The initial-cluster flags only matter on the first start; a restart reads the
        // membership from the data directory.
        let child = Command::new(&self.binary)
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "quorate-test"])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("etcd starts");
        self.members[i].child = Some(child);
    }

    /// Waits until member `i` answers `/health` with `true` (a leader is known).
    pub(crate) fn wait_healthy(&mut self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(Ok(Some(status))) = self.members[i].child.as_mut().map(Child::try_wait) {
                panic!(
                    "etcd member {i} exited with {status}: {}",
                    std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
                );
            }
            if healthy(self.members[i].client) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "etcd member {i} not healthy after 20 s: {}",
            std::fs::read_to_string(&self.members[i].log).unwrap_or_default()
        );
    }

    /// SIGKILLs member `i` (by PID) and reaps it.
    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The index of the member that is the leader now, as the running members see it (etcd's
    /// maintenance status through its JSON gateway: a member's `header.member_id` equal to the
    /// `leader` it reports); `None` while no running member knows a leader that answers.
    pub(crate) fn leader(&self) -> Option<usize> {
        let statuses: Vec<(usize, String, String)> = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.child.is_some())
            .filter_map(|(i, m)| {
                let s = status(m.client)?;
                let id = s["header"]["member_id"].as_str()?.to_owned();
                let leader = s["leader"].as_str()?.to_owned();
                Some((i, id, leader))
            })
            .collect();
        let (_, _, leader) = statuses.first()?;
        statuses
            .iter()
            .find(|(_, id, _)| id == leader)
            .map(|(i, _, _)| *i)
    }

    /// Whether member `i` is running (not killed).
    pub(crate) fn running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Starts member `i` again on its data directory (without waiting for its health).
    pub(crate) fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        self.spawn(i);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// `POST /v3/maintenance/status` on a client port (etcd's JSON gateway): the member's id and its
/// leader's (decimal strings), or `None` if it does not answer.
fn status(port: u16) -> Option<serde_json::Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .write_all(
            b"POST /v3/maintenance/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        )
        .ok()?;
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let body = answer.split_once("\r\n\r\n")?.1;
    serde_json::from_str(body).ok()
}

/// `GET /health` on a client port: `{"health":"true"}` once the member serves requests.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}
