//! The OpenAI-compatible chat-completions client (feature `http`): one `POST
//! {base_url}/chat/completions` per call, with backoff on 429 and 5xx inside the call's timeout.
//!
//! What can go wrong is a [`ClientError`], and each variant says whether the request may have
//! reached the model: a refused connection or a 4xx did not spend anything; a connection lost
//! after the request was sent, or a timeout, leaves the outcome unknown.

use std::fmt;
use std::time::{Duration, Instant};

use crate::chat::{parse_reply, ChatAnswer, ChatParams, ReplyError};
use crate::config::ModelConfig;

/// An API key read from the environment. Its `Debug` and `Display` never show it.
#[derive(Clone)]
pub struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// The first wait after a 429 or 5xx; it doubles per retry, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two tries.
pub const MAX_BACKOFF: Duration = Duration::from_secs(4);
/// The most requests one call sends (the first and three retries): a server that answers 5xx
/// to a request it cannot take (llama-cpp-python answers 500 to a malformed one) is not asked
/// for ever.
pub const MAX_TRIES: u32 = 4;

/// A chat-completions call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `api_key_env` names a variable that is not set (or not UTF-8).
    #[error("the API key variable {var} is not set")]
    MissingKey {
        /// The variable.
        var: String,
    },
    /// The HTTP client could not be built (the base URL or TLS setup).
    #[error("cannot build the HTTP client: {message}")]
    Build {
        /// Why.
        message: String,
    },
    /// No connection: nothing was sent.
    #[error("cannot connect to {url}: {message}")]
    Connect {
        /// Where.
        url: String,
        /// Why.
        message: String,
    },
    /// The server answered an error status (after the retries, for 429 and 5xx).
    #[error("{url} answered HTTP {status} (after {tries} tries): {body}")]
    Status {
        /// Where.
        url: String,
        /// The status.
        status: u16,
        /// How many requests were sent.
        tries: u32,
        /// The start of the reply body.
        body: String,
    },
    /// The request was sent and then the connection broke, or no answer came in time: the
    /// model may have run.
    #[error("the answer from {url} was lost after the request was sent: {message}")]
    Lost {
        /// Where.
        url: String,
        /// What happened.
        message: String,
    },
    /// The reply could not be read.
    #[error("{url} answered something unreadable: {source}")]
    Reply {
        /// Where.
        url: String,
        /// What was wrong.
        source: ReplyError,
    },
}

impl ClientError {
    /// A short stable class for the tool's error answer (`model:http-400`, `model:connect`...).
    #[must_use]
    pub fn class(&self) -> String {
        match self {
            ClientError::MissingKey { .. } => "model:missing-key".into(),
            ClientError::Build { .. } => "model:client".into(),
            ClientError::Connect { .. } => "model:connect".into(),
            ClientError::Status { status, .. } => format!("model:http-{status}"),
            ClientError::Lost { .. } => "model:lost".into(),
            ClientError::Reply { .. } => "model:bad-reply".into(),
        }
    }

    /// `true` if the request may have reached the model (its outcome is unknown).
    #[must_use]
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ClientError::Lost { .. })
    }
}

/// The client of one model endpoint.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    model: String,
    key: Option<ApiKey>,
    timeout: Duration,
    temperature: Option<f64>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `config`, reading the key from `config.api_key_env` now.
    pub fn new(config: &ModelConfig) -> Result<Self, ClientError> {
        let key = match &config.api_key_env {
            Some(var) => Some(ApiKey(
                std::env::var(var).map_err(|_| ClientError::MissingKey { var: var.clone() })?,
            )),
            None => None,
        };
        let http = reqwest::Client::builder()
            .timeout(config.timeout())
            .build()
            .map_err(|e| ClientError::Build {
                message: e.to_string(),
            })?;
        Ok(Self {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            model: config.model.clone(),
            key,
            timeout: config.timeout(),
            temperature: config.temperature,
        })
    }

    /// Sends `params`, retrying after 429 and 5xx (waiting [`FIRST_BACKOFF`], doubling, or the
    /// server's `Retry-After` seconds, at most [`MAX_BACKOFF`]) up to [`MAX_TRIES`] requests,
    /// while the next try can still start within the timeout.
    pub async fn chat(&self, params: &ChatParams) -> Result<ChatAnswer, ClientError> {
        let mut request = params.to_request(&self.model);
        if let Some(t) = self.temperature {
            request["temperature"] = t.into();
        }
        let body = serde_json::to_vec(&request).expect("a request body serializes");
        let started = Instant::now();
        let mut wait = FIRST_BACKOFF;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let mut request = self
                .http
                .post(&self.url)
                .header("content-type", "application/json")
                .body(body.clone());
            if let Some(ApiKey(key)) = &self.key {
                request = request.bearer_auth(key);
            }
            let response = request.send().await.map_err(|e| self.sent_error(&e))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let bytes = response.bytes().await.map_err(|e| self.sent_error(&e))?;
            if status.is_success() {
                return parse_reply(&bytes).map_err(|source| ClientError::Reply {
                    url: self.url.clone(),
                    source,
                });
            }
            let retryable = status.as_u16() == 429 || status.is_server_error();
            let pause = retry_after.unwrap_or(wait).min(MAX_BACKOFF);
            if !retryable || tries >= MAX_TRIES || started.elapsed() + pause >= self.timeout {
                let text = String::from_utf8_lossy(&bytes);
                return Err(ClientError::Status {
                    url: self.url.clone(),
                    status: status.as_u16(),
                    tries,
                    body: text.chars().take(200).collect(),
                });
            }
            tokio::time::sleep(pause).await;
            wait = (wait * 2).min(MAX_BACKOFF);
        }
    }

    fn sent_error(&self, e: &reqwest::Error) -> ClientError {
        let url = self.url.clone();
        let message = error_chain(e);
        if e.is_connect() {
            ClientError::Connect { url, message }
        } else if e.is_builder() {
            ClientError::Build { message }
        } else {
            ClientError::Lost { url, message }
        }
    }
}

/// `e` and its sources, joined.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
