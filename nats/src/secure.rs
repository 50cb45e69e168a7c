//! Connecting with [`NatsOptions`]: TLS required unless the options allow plaintext, the
//! user's credentials, its own inbox prefix.

use async_nats::jetstream::Context;

use crate::access::NatsOptions;

/// Why [`connect_with`] did not connect.
#[derive(Debug, thiserror::Error)]
pub enum SecureConnectError {
    /// No TLS configured and [`NatsOptions::allow_plaintext`] not set: refused before
    /// connecting.
    #[error(
        "refusing a plaintext connection to NATS at {url}: configure TLS (a CA file) or, for \
         development only, allow plaintext"
    )]
    Plaintext {
        /// The address given.
        url: String,
    },
    /// The server refused the connection or could not be reached (a wrong or missing password,
    /// a failed TLS handshake, nothing listening).
    #[error("connecting to NATS at {url}: {message}")]
    Connect {
        /// The address given.
        url: String,
        /// The client's error.
        message: String,
    },
}

/// Connects to `url` with `options` and opens its JetStream context.
///
/// # Errors
/// [`SecureConnectError::Plaintext`] before any I/O when `options` has no TLS and does not allow
/// plaintext; [`SecureConnectError::Connect`] when the server refuses or cannot be reached.
pub async fn connect_with(url: &str, options: &NatsOptions) -> Result<Context, SecureConnectError> {
    let mut connect = async_nats::ConnectOptions::new();
    match &options.tls {
        Some(tls) => {
            connect = connect
                .require_tls(true)
                .add_root_certificates(tls.ca.clone());
            if let Some((cert, key)) = &tls.identity {
                connect = connect.add_client_certificate(cert.clone(), key.clone());
            }
        }
        None if options.allow_plaintext => {}
        None => {
            return Err(SecureConnectError::Plaintext {
                url: url.to_string(),
            })
        }
    }
    if let Some((user, password)) = &options.user {
        connect = connect.user_and_password(user.clone(), password.expose().to_string());
    }
    if let Some(seed) = &options.nkey {
        connect = connect.nkey(seed.expose().to_string());
    }
    if let Some(path) = &options.credentials_file {
        connect =
            connect
                .credentials_file(path)
                .await
                .map_err(|e| SecureConnectError::Connect {
                    url: url.to_string(),
                    message: format!("reading {}: {e}", path.display()),
                })?;
    }
    if let Some(prefix) = &options.inbox_prefix {
        connect = connect.custom_inbox_prefix(prefix);
    }
    let client = connect
        .connect(url)
        .await
        .map_err(|e| SecureConnectError::Connect {
            url: url.to_string(),
            message: e.to_string(),
        })?;
    Ok(async_nats::jetstream::new(client))
}
