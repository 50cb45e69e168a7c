//! Connecting with TLS and credentials ([`EtcdSecurity`], [`Etcd::connect_secure`]): the
//! connection is refused before any I/O when it would be plaintext and plaintext is not
//! explicitly allowed.

use std::path::PathBuf;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

use super::{Etcd, EtcdOptions};
use crate::{EtcdUrl, StoreError};

/// A secret string (a password): `Debug` prints `<redacted>` (one type for every crate).
pub use quorate_protocols::Secret;

/// The TLS side of an etcd connection: PEM files of the CA the members' certificates chain to,
/// and of the client's own certificate and key (required by members started with
/// `--client-cert-auth`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA certificate.
    pub ca: PathBuf,
    /// The client's certificate and private key, if any.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Transport security and credentials of an etcd connection. `Debug` never shows the password.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    /// TLS: required unless [`EtcdSecurity::allow_plaintext`].
    pub tls: Option<EtcdTls>,
    /// The etcd user and its password, when the cluster has auth enabled.
    pub user: Option<(String, Secret)>,
    /// Development only: allow a connection without TLS (anyone on the path reads the
    /// password and the data). Off by default.
    pub allow_plaintext: bool,
}

/// Why [`Etcd::connect_secure`] did not connect.
#[derive(Debug, thiserror::Error)]
pub enum EtcdConnectError {
    /// No TLS configured and plaintext not allowed: refused before connecting.
    #[error(
        "refusing a plaintext connection to etcd at {url}: configure TLS (a CA file) or, for \
         development only, allow plaintext"
    )]
    Plaintext {
        /// The address given.
        url: String,
    },
    /// A certificate or key file could not be read.
    #[error("reading {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The client could not be built or its credentials were refused
    /// ([`StoreError::Denied`]).
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn read(path: &PathBuf) -> Result<Vec<u8>, EtcdConnectError> {
    std::fs::read(path).map_err(|source| EtcdConnectError::ReadFile {
        path: path.clone(),
        source,
    })
}

impl Etcd {
    /// Connects to the cluster at `url` over TLS (`https://` to every endpoint) with the
    /// credentials of `security`. With a user the client authenticates while connecting, so a
    /// wrong password fails here; without TLS the connection is refused unless `security`
    /// allows plaintext.
    ///
    /// # Errors
    /// [`EtcdConnectError::Plaintext`] (before any I/O), [`EtcdConnectError::ReadFile`], or
    /// [`EtcdConnectError::Store`]: [`StoreError::Denied`] for refused credentials,
    /// [`StoreError::Unavailable`] otherwise.
    pub async fn connect_secure(
        url: &EtcdUrl,
        options: EtcdOptions,
        security: &EtcdSecurity,
    ) -> Result<Self, EtcdConnectError> {
        let mut connect = ConnectOptions::new();
        let scheme = match &security.tls {
            Some(tls) => {
                let mut config =
                    TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
                if let Some((cert, key)) = &tls.identity {
                    config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
                }
                connect = connect.with_tls(config);
                "https"
            }
            None if security.allow_plaintext => "http",
            None => {
                return Err(EtcdConnectError::Plaintext {
                    url: url.to_string(),
                })
            }
        };
        if let Some((user, password)) = &security.user {
            connect = connect.with_user(user.clone(), password.expose().to_string());
        }
        let endpoints = url
            .endpoints()
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect();
        Ok(Self::open(url, options, endpoints, connect).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_password() {
        let security = EtcdSecurity {
            tls: Some(EtcdTls {
                ca: "ca.pem".into(),
                identity: Some(("w.pem".into(), "w-key.pem".into())),
            }),
            user: Some(("worker-a".into(), Secret::new("hunter2-sekrit"))),
            allow_plaintext: false,
        };
        let shown = format!("{security:?}");
        assert!(!shown.contains("hunter2-sekrit"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("worker-a"),
            "{shown}"
        );
    }
}
