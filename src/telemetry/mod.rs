//! What `quorate run` exports for dashboards and tracing backends: the Prometheus scrape
//! endpoint of `--metrics-addr` ([`serve_metrics`]) and, with the cargo feature `otlp`, the
//! OTLP span export of `--otlp-endpoint` (module `otlp`). `docs/observability.md` describes both,
//! with every metric and span name.
//!
//! Nothing here is recorded per message: the run publishes its counters to the `metrics`
//! facade once it stops (`quorate_coordinator::run_metrics`), and the worker shell records
//! the call latency histogram and opens the spans (`quorate_workers::telemetry`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};

#[cfg(feature = "otlp")]
pub mod otlp;
#[cfg(test)]
mod tests;

/// Bucket upper bounds, in seconds, of every `*_seconds` histogram (a tool call takes from
/// microseconds, in memory, to its timeout, 30 s by default).
pub const DURATION_BUCKETS: [f64; 14] = [
    0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// The telemetry asked for could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `--metrics-addr`: the Prometheus recorder could not be set up (another recorder was
    /// installed first).
    #[error("--metrics-addr {addr}: {source}")]
    MetricsEndpoint {
        /// The address given.
        addr: SocketAddr,
        /// What the exporter said.
        source: BuildError,
    },
    /// `--metrics-addr`: nothing can listen there (the port is taken, the address is not
    /// local...).
    #[error("--metrics-addr {addr}: {source}")]
    MetricsListen {
        /// The address given.
        addr: SocketAddr,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// `--otlp-endpoint` given to a binary built without the cargo feature `otlp`.
    #[error(
        "--otlp-endpoint {endpoint}: this quorate was built without OTLP export \
         (build it with `cargo build --features otlp`)"
    )]
    OtlpNotBuilt {
        /// The endpoint given.
        endpoint: String,
    },
    /// `--otlp-endpoint`: not an endpoint the OTLP exporter can send to.
    #[error("--otlp-endpoint {endpoint}: {reason}")]
    OtlpEndpoint {
        /// The endpoint given.
        endpoint: String,
        /// Why it was refused.
        reason: String,
    },
}

/// Installs the Prometheus recorder as the process's `metrics` recorder and serves its text
/// format over HTTP at `addr` (any path answers `GET`), from a thread of its own, until the
/// process exits. Every `*_seconds` histogram is rendered with [`DURATION_BUCKETS`]; every
/// metric of the run gets its `# HELP` line.
///
/// # Errors
/// [`TelemetryError::MetricsListen`] if nothing can listen at `addr`;
/// [`TelemetryError::MetricsEndpoint`] if a recorder was already installed.
pub fn serve_metrics(addr: SocketAddr) -> Result<(), TelemetryError> {
    // The exporter's own HTTP listener would bring tokio's `net` feature into the whole binary,
    // and with it an I/O driver under every actix runtime: `bench dag` measured the actors'
    // raw request/response rate ~20% lower with it. A scrape is one GET: a std thread serves it.
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|source| TelemetryError::MetricsListen { addr, source })?;
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &DURATION_BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|source| TelemetryError::MetricsEndpoint { addr, source })?;
    quorate_coordinator::run_metrics::describe();
    std::thread::Builder::new()
        .name("quorate-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else {
                    // A failed accept (out of file descriptors, ...) may fail again at once:
                    // wait a little instead of spinning on it.
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                };
                // A scraper that goes away mid-answer, or is too slow, changes nothing for the
                // run; the next one is answered.
                let _ = answer_scrape(stream, SCRAPE_DEADLINE, || {
                    handle.run_upkeep();
                    handle.render()
                });
            }
        })
        .map_err(|source| TelemetryError::MetricsListen { addr, source })?;
    Ok(())
}

/// How long one scrape may take, from its connection to the end of its answer. One thread
/// answers every scrape in turn: a scraper that sends its request slowly (or never) or does
/// not read the answer is dropped after this, so it cannot hold up the next one for longer.
const SCRAPE_DEADLINE: Duration = Duration::from_secs(5);

/// The most of a request's head read before it is refused (a scrape's GET is a few hundred
/// bytes).
const MAX_REQUEST_HEAD: usize = 16 * 1024;

/// Reads one HTTP request's head from `stream` and answers it with `body()`, Prometheus text,
/// within `deadline` of the call. One request per connection: the answer says
/// `connection: close`.
///
/// # Errors
/// The deadline passed (`TimedOut` or `WouldBlock`), the head was longer than
/// [`MAX_REQUEST_HEAD`] (`InvalidData`), or the connection failed.
fn answer_scrape(
    mut stream: TcpStream,
    deadline: Duration,
    body: impl FnOnce() -> String,
) -> std::io::Result<()> {
    let end = Instant::now() + deadline;
    // Each read and write may wait only for what is left of the deadline (a timeout per read
    // alone would let a scraper that trickles a byte at a time hold the thread for ever).
    let time_left = || {
        end.checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::TimedOut))
    };
    // The request line and headers, up to the blank line (a GET has no body); what it says
    // does not matter: every request gets the metrics.
    let mut head = Vec::new();
    let mut chunk = [0_u8; 1024];
    loop {
        if head.len() >= MAX_REQUEST_HEAD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "request head too long",
            ));
        }
        stream.set_read_timeout(Some(time_left()?))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        // Only the bytes just read, and the three before them, can complete the blank line.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if has_blank_line(&head[from..]) {
            break;
        }
    }
    let body = body();
    stream.set_write_timeout(Some(time_left()?))?;
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// Whether `bytes` hold the blank line that ends a request head.
fn has_blank_line(bytes: &[u8]) -> bool {
    bytes.windows(4).any(|w| w == b"\r\n\r\n") || bytes.windows(2).any(|w| w == b"\n\n")
}

/// The process's `tracing` set-up: log lines on stderr filtered by `RUST_LOG`, and, with
/// `--otlp-endpoint` (cargo feature `otlp`), the runtime's spans exported over OTLP. Call
/// [`Tracing::finish`] before the process exits.
#[derive(Debug)]
pub struct Tracing {
    #[cfg(feature = "otlp")]
    otlp: Option<otlp::OtlpExport>,
}

impl Tracing {
    /// Installs the global subscriber; `otlp_endpoint` is `--otlp-endpoint`.
    ///
    /// # Errors
    /// [`TelemetryError::OtlpNotBuilt`] for an endpoint given to a binary built without the
    /// `otlp` feature; [`TelemetryError::OtlpEndpoint`] for one the exporter refuses. The
    /// stderr log is installed in both cases.
    pub fn init(otlp_endpoint: Option<&str>) -> Result<Tracing, TelemetryError> {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        use tracing_subscriber::Layer;

        // Log lines go to stderr, in colour only when it is a terminal (a redirected log gets
        // no escape codes).
        let log = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(tracing_subscriber::EnvFilter::from_default_env());
        let registry = tracing_subscriber::registry().with(log);
        #[cfg(feature = "otlp")]
        if let Some(endpoint) = otlp_endpoint {
            return match otlp::start(endpoint) {
                Ok((export, layer)) => {
                    registry.with(layer).init();
                    Ok(Tracing { otlp: Some(export) })
                }
                Err(e) => {
                    registry.init();
                    Err(e)
                }
            };
        }
        registry.init();
        match otlp_endpoint {
            #[cfg(not(feature = "otlp"))]
            Some(endpoint) => Err(TelemetryError::OtlpNotBuilt {
                endpoint: endpoint.to_string(),
            }),
            _ => Ok(Tracing {
                #[cfg(feature = "otlp")]
                otlp: None,
            }),
        }
    }

    /// Sends the spans closed so far without waiting for the exporter's next batch (nothing
    /// to do without `--otlp-endpoint`).
    pub fn flush(&self) {
        #[cfg(feature = "otlp")]
        if let Some(export) = &self.otlp {
            export.flush();
        }
    }

    /// Sends the spans still queued for export (none without `--otlp-endpoint`).
    pub fn finish(self) {
        #[cfg(feature = "otlp")]
        if let Some(export) = self.otlp {
            export.finish();
        }
    }
}
