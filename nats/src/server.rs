//! A `nats-server` with JetStream on loopback, for tests and experiments: a free port, its store
//! in a temporary directory, stopped (by its PID) when the guard drops.
//!
//! When the binary is missing, [`NatsServer::start_or_skip`] prints
//! `skipped: nats-server is not installed, install with scripts/nats.sh install` and returns
//! `None`, unless `QUORATE_REQUIRE_SERVICES=1` is set (CI sets it): then it panics with that
//! message.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian puts the binary when it is not on `PATH`.
const DEBIAN_PATH: &str = "/usr/sbin/nats-server";

/// How long the server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No `nats-server` on `PATH` nor at `/usr/sbin/nats-server`.
    #[error("nats-server is not installed, install with scripts/nats.sh install")]
    NotInstalled,
    /// Spawning it, or making its directory, failed.
    #[error("starting {binary}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// It did not accept connections in time (or exited).
    #[error("nats-server on port {port} did not accept connections within {READY_TIMEOUT:?}")]
    NotReady {
        /// Its client port.
        port: u16,
    },
}

/// A running `nats-server -js` on 127.0.0.1, killed on drop.
#[derive(Debug)]
pub struct NatsServer {
    child: Child,
    port: u16,
    _store: tempfile::TempDir,
}

/// The `nats-server` binary: on `PATH`, else Debian's `/usr/sbin/nats-server`.
#[must_use]
pub fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| Path::new(DEBIAN_PATH).is_file().then(|| DEBIAN_PATH.into()))
}

impl NatsServer {
    /// Starts a server on a free loopback port and waits until it accepts connections.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with_config("")
    }

    /// [`start`](Self::start) with `config` (nats-server configuration syntax, e.g. an
    /// `authorization` block with users and their subject permissions) as its config file.
    pub fn start_with_config(config: &str) -> Result<Self, ServerError> {
        let binary = binary().ok_or(ServerError::NotInstalled)?;
        let spawn_err = |source| ServerError::Spawn {
            binary: binary.clone(),
            source,
        };
        let store = tempfile::tempdir().map_err(spawn_err)?;
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_err(spawn_err)?
            .port();
        let config_file = store.path().join("nats.conf");
        std::fs::write(&config_file, config).map_err(spawn_err)?;
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&config_file)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(store.path().join("jetstream"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(spawn_err)?;
        let mut server = Self {
            child,
            port,
            _store: store,
        };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let started = Instant::now();
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(server);
            }
            let exited = matches!(server.child.try_wait(), Ok(Some(_)));
            if exited || started.elapsed() > READY_TIMEOUT {
                return Err(ServerError::NotReady { port });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`start`](Self::start), or `None` with `skipped: ...` on stderr when the binary is
    /// missing (a panic instead when `QUORATE_REQUIRE_SERVICES=1`). Any other failure panics.
    ///
    /// # Panics
    /// If the server is missing while services are required, or fails to start.
    #[must_use]
    pub fn start_or_skip() -> Option<Self> {
        Self::start_with_config_or_skip("")
    }

    /// [`start_with_config`](Self::start_with_config), skipping as
    /// [`start_or_skip`](Self::start_or_skip) does.
    ///
    /// # Panics
    /// If the server is missing while services are required, or fails to start.
    #[must_use]
    pub fn start_with_config_or_skip(config: &str) -> Option<Self> {
        match Self::start_with_config(config) {
            Ok(server) => Some(server),
            Err(ServerError::NotInstalled) => {
                let message = ServerError::NotInstalled.to_string();
                if std::env::var("QUORATE_REQUIRE_SERVICES").as_deref() == Ok("1") {
                    panic!("{message} (QUORATE_REQUIRE_SERVICES=1)");
                }
                eprintln!("skipped: {message}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// The server process's id (a test stops and continues it to cut every client off for a
    /// while: `kill -STOP`, `kill -CONT`).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `nats://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
