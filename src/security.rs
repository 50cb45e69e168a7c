//! How a process connects to NATS and etcd: TLS files, its credentials on each engine, and
//! whether a plaintext connection is allowed (docs/distributed.md, "Security: credentials and
//! TLS"; the flags in docs/cli.md, "Connection security").
//!
//! Every command that connects takes the same flags ([`SecurityArgs`], flattened into each) and
//! turns them into one [`Security`], which the one NATS connect of `process` and the one etcd
//! connect of [`crate::durable`] take. Secrets are read from the environment variable or file
//! the flags name (never from the command line, where `ps` shows them) and kept as [`Secret`],
//! whose `Debug` is `<redacted>`.
//!
//! Without TLS a connection is refused before any I/O unless plaintext is allowed
//! (`--allow-plaintext`, or `QUORATE_ALLOW_PLAINTEXT=1`): a development setting, since anyone on
//! the path then reads the passwords and forges the traffic.

use std::path::PathBuf;

use quorate_protocols::{AgentId, Secret};

/// The environment variable that allows plaintext connections (as `--allow-plaintext`).
pub const ALLOW_PLAINTEXT_ENV: &str = "QUORATE_ALLOW_PLAINTEXT";

/// TLS files: the CA the servers' certificates must chain to, and the client's own certificate
/// and key (for servers that verify clients).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsPaths {
    /// PEM file of the CA.
    pub ca: PathBuf,
    /// PEM files of the client's certificate and private key, if any.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// How a process proves who it is to NATS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials (a server without users).
    #[default]
    None,
    /// A user and its password. When the name is a uuid it is also the process's agent id
    /// ([`Security::agent`]).
    User {
        /// The user name.
        user: String,
        /// Its password.
        password: Secret,
    },
    /// A `.creds` file (a user JWT and its nkey seed), as `nsc` writes them.
    CredsFile(PathBuf),
    /// An nkey seed (read from its file).
    Nkey(Secret),
}

/// What a process connects with. `Debug` never shows a secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// TLS for both engines: required unless [`Security::allow_plaintext`].
    pub tls: Option<TlsPaths>,
    /// NATS credentials.
    pub nats: NatsAuth,
    /// The etcd user and its password, when the cluster has auth enabled.
    pub etcd_user: Option<(String, Secret)>,
    /// Development only: allow connections without TLS.
    pub allow_plaintext: bool,
}

impl Security {
    /// No TLS, no credentials, plaintext allowed: the development setting (what
    /// `--allow-plaintext` alone gives).
    #[must_use]
    pub fn plaintext() -> Self {
        Self {
            allow_plaintext: true,
            ..Self::default()
        }
    }

    /// The agent id the NATS user stands for: the user name, when it is a uuid. A deployment
    /// names each agent's NATS user after its id, so the subject permissions the server grants
    /// the user (docs/distributed.md) are the ones that agent needs.
    #[must_use]
    pub fn agent(&self) -> Option<AgentId> {
        match &self.nats {
            NatsAuth::User { user, .. } => {
                serde_json::from_value(serde_json::Value::String(user.clone())).ok()
            }
            _ => None,
        }
    }

    /// The NATS connection options of agent `agent`: TLS, credentials, and (with credentials)
    /// the agent's own inbox prefix, which its permissions let only it read.
    #[cfg(feature = "nats")]
    #[must_use]
    pub fn nats_options(&self, agent: AgentId) -> quorate_nats::access::NatsOptions {
        use quorate_nats::access::{inbox_prefix, NatsOptions, TlsFiles};
        let mut options = NatsOptions {
            tls: self.tls.as_ref().map(|t| TlsFiles {
                ca: t.ca.clone(),
                identity: t.identity.clone(),
            }),
            allow_plaintext: self.allow_plaintext,
            ..NatsOptions::default()
        };
        match &self.nats {
            NatsAuth::None => return options,
            NatsAuth::User { user, password } => {
                options.user = Some((user.clone(), password.clone()));
            }
            NatsAuth::CredsFile(path) => options.credentials_file = Some(path.clone()),
            NatsAuth::Nkey(seed) => options.nkey = Some(seed.clone()),
        }
        options.inbox_prefix = Some(inbox_prefix(agent));
        options
    }

    /// The etcd connection's TLS and user.
    #[cfg(feature = "etcd")]
    #[must_use]
    pub fn etcd(&self) -> quorate_state::EtcdSecurity {
        quorate_state::EtcdSecurity {
            tls: self.tls.as_ref().map(|t| quorate_state::EtcdTls {
                ca: t.ca.clone(),
                identity: t.identity.clone(),
            }),
            user: self.etcd_user.clone(),
            allow_plaintext: self.allow_plaintext,
        }
    }
}

/// The connection-security flags could not be turned into credentials.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// The environment variable a `--*-password-env` flag names is not set (or not UTF-8).
    #[error("{flag} {var}: the environment variable {var} is not set")]
    MissingEnv {
        /// The flag.
        flag: &'static str,
        /// The variable it names.
        var: String,
    },
    /// A secret file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    ReadFile {
        /// The flag.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file the flags name does not exist.
    #[error("{flag} {}: no such file", path.display())]
    NoFile {
        /// The flag.
        flag: &'static str,
        /// The file.
        path: PathBuf,
    },
}

/// The connection-security flags of every command that connects to NATS or etcd.
#[cfg(feature = "cli")]
#[derive(clap::Args, Clone, Debug, Default)]
#[command(next_help_heading = "Connection security")]
pub struct SecurityArgs {
    /// CA certificate (PEM) the NATS server's and etcd members' certificates must chain to;
    /// turns TLS on for both.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This process's client certificate (PEM), for servers that verify clients.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// NATS user name (a uuid: the agent id of this process, as the server's permissions
    /// name it).
    #[arg(long, value_name = "NAME", requires = "nats_password_env")]
    pub nats_user: Option<String>,
    /// The environment variable that holds the NATS user's password.
    #[arg(long, value_name = "VAR", requires = "nats_user")]
    pub nats_password_env: Option<String>,
    /// NATS credentials file (a user JWT and its nkey seed), instead of a user.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["nats_user", "nats_nkey"])]
    pub nats_creds: Option<PathBuf>,
    /// File holding a NATS nkey seed, instead of a user.
    #[arg(long, value_name = "FILE", conflicts_with = "nats_user")]
    pub nats_nkey: Option<PathBuf>,
    /// etcd user name.
    #[arg(long, value_name = "NAME", requires = "etcd_password_env")]
    pub etcd_user: Option<String>,
    /// The environment variable that holds the etcd user's password.
    #[arg(long, value_name = "VAR", requires = "etcd_user")]
    pub etcd_password_env: Option<String>,
    /// Development only: allow connections without TLS (anyone on the path reads the
    /// passwords and forges the traffic). Also QUORATE_ALLOW_PLAINTEXT=1.
    #[arg(
        long,
        env = ALLOW_PLAINTEXT_ENV,
        value_parser = clap::builder::BoolishValueParser::new(),
        hide_env_values = true
    )]
    pub allow_plaintext: bool,
}

#[cfg(feature = "cli")]
impl SecurityArgs {
    /// The [`Security`] these flags give, reading the passwords from the process's environment
    /// and the nkey seed from its file.
    ///
    /// # Errors
    /// [`SecurityError`] naming the flag whose variable is unset or whose file is unreadable.
    pub fn resolve(&self) -> Result<Security, SecurityError> {
        self.resolve_with(|var| std::env::var(var).ok())
    }

    /// [`SecurityArgs::resolve`] with the environment given as `env`.
    ///
    /// # Errors
    /// As [`SecurityArgs::resolve`].
    pub fn resolve_with(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Security, SecurityError> {
        let secret = |flag: &'static str, var: &str| {
            env(var)
                .map(Secret::new)
                .ok_or_else(|| SecurityError::MissingEnv {
                    flag,
                    var: var.to_string(),
                })
        };
        let exists = |flag: &'static str, path: &PathBuf| {
            if path.is_file() {
                Ok(path.clone())
            } else {
                Err(SecurityError::NoFile {
                    flag,
                    path: path.clone(),
                })
            }
        };
        let tls = match &self.tls_ca {
            Some(ca) => Some(TlsPaths {
                ca: exists("--tls-ca", ca)?,
                identity: match (&self.tls_cert, &self.tls_key) {
                    (Some(c), Some(k)) => Some((exists("--tls-cert", c)?, exists("--tls-key", k)?)),
                    _ => None,
                },
            }),
            None => None,
        };
        let nats = match (
            &self.nats_user,
            &self.nats_password_env,
            &self.nats_creds,
            &self.nats_nkey,
        ) {
            (Some(user), Some(var), _, _) => NatsAuth::User {
                user: user.clone(),
                password: secret("--nats-password-env", var)?,
            },
            (_, _, Some(creds), _) => NatsAuth::CredsFile(exists("--nats-creds", creds)?),
            (_, _, _, Some(path)) => {
                let seed =
                    std::fs::read_to_string(path).map_err(|source| SecurityError::ReadFile {
                        flag: "--nats-nkey",
                        path: path.clone(),
                        source,
                    })?;
                NatsAuth::Nkey(Secret::new(seed.trim()))
            }
            _ => NatsAuth::None,
        };
        let etcd_user = match (&self.etcd_user, &self.etcd_password_env) {
            (Some(user), Some(var)) => Some((user.clone(), secret("--etcd-password-env", var)?)),
            _ => None,
        };
        Ok(Security {
            tls,
            nats,
            etcd_user,
            allow_plaintext: self.allow_plaintext,
        })
    }
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use super::*;

    #[test]
    fn passwords_come_from_the_named_variables_and_never_show() {
        let args = SecurityArgs {
            nats_user: Some("0192f4d3-7a1e-7c3b-9f00-3c1d2e4f5a6b".into()),
            nats_password_env: Some("NATS_PW".into()),
            etcd_user: Some("w1".into()),
            etcd_password_env: Some("ETCD_PW".into()),
            ..SecurityArgs::default()
        };
        let env = |var: &str| match var {
            "NATS_PW" => Some("nats-sekrit".to_string()),
            "ETCD_PW" => Some("etcd-sekrit".to_string()),
            _ => None,
        };
        let security = args.resolve_with(env).expect("resolves");
        assert_eq!(
            security.etcd_user.as_ref().map(|(_, p)| p.expose()),
            Some("etcd-sekrit")
        );
        assert_eq!(
            security.agent(),
            Some(AgentId::from_u128(0x0192f4d3_7a1e_7c3b_9f00_3c1d2e4f5a6b))
        );
        assert!(!security.allow_plaintext);
        let shown = format!("{security:?} {args:?}");
        assert!(
            !shown.contains("nats-sekrit") && !shown.contains("etcd-sekrit"),
            "{shown}"
        );
    }

    #[test]
    fn an_unset_password_variable_or_a_missing_file_names_the_flag() {
        let args = SecurityArgs {
            etcd_user: Some("w1".into()),
            etcd_password_env: Some("UNSET_PW".into()),
            ..SecurityArgs::default()
        };
        let e = args.resolve_with(|_| None).unwrap_err();
        assert!(
            matches!(&e, SecurityError::MissingEnv { flag: "--etcd-password-env", var } if var == "UNSET_PW"),
            "{e}"
        );
        let args = SecurityArgs {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..SecurityArgs::default()
        };
        let e = args.resolve_with(|_| None).unwrap_err();
        assert!(
            matches!(
                e,
                SecurityError::NoFile {
                    flag: "--tls-ca",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_user_name_that_is_not_a_uuid_names_no_agent() {
        let security = Security {
            nats: NatsAuth::User {
                user: "supervisor".into(),
                password: Secret::new("x"),
            },
            ..Security::default()
        };
        assert_eq!(security.agent(), None);
        assert_eq!(Security::plaintext().agent(), None);
    }
}
