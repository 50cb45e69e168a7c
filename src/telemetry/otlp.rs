//! `quorate run --otlp-endpoint URL` (cargo feature `otlp`): the run's spans, exported over
//! OTLP http/json to `URL/v1/traces` by a batch processor on a thread of its own (a blocking
//! HTTP client: no async runtime and no gRPC stack).
//!
//! Only the runtime's spans go out (`quorate.run`, `quorate.attempt`, `quorate.tool_call`,
//! `quorate.tool_query`, later `quorate.model_call`: level `info` of the `quorate*` targets);
//! the log lines stay on stderr, filtered by `RUST_LOG` as without the flag.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::Layer;

use super::TelemetryError;

/// The OTLP service name of every exported span's resource.
pub const SERVICE_NAME: &str = "quorate";

/// The OTLP path of spans, appended to `--otlp-endpoint` (a collector's base URL, as in
/// `OTEL_EXPORTER_OTLP_ENDPOINT`).
pub const TRACES_PATH: &str = "/v1/traces";

/// The exporter's provider: [`OtlpExport::finish`] sends what is still queued.
#[derive(Debug)]
pub struct OtlpExport {
    provider: SdkTracerProvider,
}

/// The traces URL of a collector at `endpoint`: `endpoint` + [`TRACES_PATH`].
///
/// ```
/// use quorate::telemetry::otlp::traces_url;
/// assert_eq!(traces_url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
/// assert_eq!(traces_url("http://127.0.0.1:4318/"), "http://127.0.0.1:4318/v1/traces");
/// ```
#[must_use]
pub fn traces_url(endpoint: &str) -> String {
    format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/'))
}

/// Starts the export to the collector at `endpoint` (`http://HOST:PORT`); returns it and the
/// `tracing` layer that feeds it (add it to the subscriber).
///
/// # Errors
/// [`TelemetryError::OtlpEndpoint`] if `endpoint` is not an `http://` URL or the exporter
/// cannot be built for it.
pub fn start<S>(endpoint: &str) -> Result<(OtlpExport, impl Layer<S>), TelemetryError>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let refused = |reason: String| TelemetryError::OtlpEndpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    if !endpoint.starts_with("http://") {
        return Err(refused(
            "needs an http:// URL (this build has no TLS), e.g. http://127.0.0.1:4318".into(),
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(traces_url(endpoint))
        .build()
        .map_err(|e| refused(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(SERVICE_NAME).build())
        .build();
    let tracer = provider.tracer(SERVICE_NAME);
    let spans = Targets::new()
        .with_target("quorate", tracing::Level::INFO)
        .with_target("quorate_coordinator", tracing::Level::INFO)
        .with_target("quorate_workers", tracing::Level::INFO);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(spans);
    Ok((OtlpExport { provider }, layer))
}

impl OtlpExport {
    /// Exports the spans closed so far now (a failure is dropped, as in [`OtlpExport::finish`]).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    /// Exports every span still queued and stops the exporter (call it once the run's spans
    /// are closed, before the process exits). A request the collector refuses or never
    /// receives is dropped by the exporter without a message; a failure to shut the exporter
    /// down is reported on stderr. Neither changes the run's exit code.
    pub fn finish(self) {
        if let Err(error) = self.provider.shutdown() {
            eprintln!("quorate: --otlp-endpoint: {error}");
        }
    }
}
