//! The `etcd://HOST:PORT[,HOST:PORT...]/PREFIX` form of a store address ([`EtcdUrl`]).
//!
//! Parsing needs no etcd client, so it is compiled without the `etcd` feature: a command line
//! can tell a bad address from a build that lacks the backend.

use std::fmt;
use std::str::FromStr;

/// The key prefix used when an `etcd://` URL names none.
pub const DEFAULT_ETCD_PREFIX: &str = "quorate";

/// Where an etcd-backed store lives: the cluster's client endpoints and the key prefix under
/// which everything of this deployment is kept (docs/distributed.md, "Key layout").
///
/// Written `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`: one or more members' client addresses
/// (a host name, an IPv4 address or a bracketed IPv6 address, and a port), then optionally a
/// prefix of `/`-separated segments of ASCII letters, digits, `.`, `_` and `-`
/// (default [`DEFAULT_ETCD_PREFIX`]).
///
/// ```
/// use quorate_state::EtcdUrl;
/// let url: EtcdUrl = "etcd://127.0.0.1:2379,127.0.0.1:22379/team/a".parse().unwrap();
/// assert_eq!(url.endpoints(), ["127.0.0.1:2379", "127.0.0.1:22379"]);
/// assert_eq!(url.prefix(), "team/a");
/// assert_eq!(url.to_string(), "etcd://127.0.0.1:2379,127.0.0.1:22379/team/a");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EtcdUrl {
    endpoints: Vec<String>,
    prefix: String,
}

/// An `etcd://` URL that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EtcdUrlError {
    /// The URL does not start with `etcd://`.
    #[error("{url:?} is not an etcd URL: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]")]
    NotEtcd {
        /// The URL as given.
        url: String,
    },
    /// No endpoint between `etcd://` and the prefix.
    #[error("{url:?} names no endpoint: expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]")]
    NoEndpoint {
        /// The URL as given.
        url: String,
    },
    /// An endpoint is not `HOST:PORT`.
    #[error("endpoint {endpoint:?} of an etcd URL: {reason}")]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The prefix has an empty segment or a character outside `A-Za-z0-9._-`.
    #[error(
        "key prefix {prefix:?} of an etcd URL: segments of A-Za-z0-9._- separated by single /"
    )]
    BadPrefix {
        /// The prefix as given.
        prefix: String,
    },
}

impl EtcdUrl {
    /// The members' client addresses, `HOST:PORT` each, in the order given.
    #[must_use]
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix (without leading or trailing `/`).
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The root of every key of this deployment: `/PREFIX`.
    #[must_use]
    pub fn root(&self) -> String {
        format!("/{}", self.prefix)
    }
}

fn check_endpoint(endpoint: &str) -> Result<(), EtcdUrlError> {
    let bad = |reason| EtcdUrlError::BadEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(|| bad("no :PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port is not a number from 1 to 65535"))?;
    if port == 0 {
        return Err(bad("the port is not a number from 1 to 65535"));
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| bad("an IPv6 host lacks its closing ]"))?;
        inner
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| bad("the bracketed host is not an IPv6 address"))?;
        return Ok(());
    }
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        return Err(bad(
            "the host is not a name or an address (letters, digits, . and -)",
        ));
    }
    Ok(())
}

impl FromStr for EtcdUrl {
    type Err = EtcdUrlError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| EtcdUrlError::NotEtcd {
                url: url.to_owned(),
            })?;
        let (hosts, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if hosts.is_empty() {
            return Err(EtcdUrlError::NoEndpoint {
                url: url.to_owned(),
            });
        }
        let endpoints: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        for endpoint in &endpoints {
            check_endpoint(endpoint)?;
        }
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        let prefix = if prefix.is_empty() {
            DEFAULT_ETCD_PREFIX.to_owned()
        } else {
            let ok = prefix.split('/').all(|segment| {
                !segment.is_empty()
                    && segment
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            });
            if !ok {
                return Err(EtcdUrlError::BadPrefix {
                    prefix: prefix.to_owned(),
                });
            }
            prefix.to_owned()
        };
        Ok(Self { endpoints, prefix })
    }
}

impl fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "etcd://{}/{}", self.endpoints.join(","), self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<EtcdUrl, EtcdUrlError> {
        url.parse()
    }

    #[test]
    fn good_urls_parse_and_print_back() {
        let url = parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(url.endpoints(), ["127.0.0.1:2379"]);
        assert_eq!(url.prefix(), DEFAULT_ETCD_PREFIX);
        assert_eq!(url.root(), "/quorate");
        let url = parse("etcd://a.example:1,[::1]:2,b-c:3/x/y.z_w-1/").unwrap();
        assert_eq!(url.endpoints(), ["a.example:1", "[::1]:2", "b-c:3"]);
        assert_eq!(url.prefix(), "x/y.z_w-1");
        assert_eq!(parse(&url.to_string()).unwrap(), url);
    }

    #[test]
    fn bad_urls_name_what_is_wrong() {
        assert!(matches!(
            parse("http://127.0.0.1:2379"),
            Err(EtcdUrlError::NotEtcd { .. })
        ));
        assert!(matches!(
            parse("etcd:///p"),
            Err(EtcdUrlError::NoEndpoint { .. })
        ));
        for (endpoint, url) in [
            ("localhost", "etcd://localhost/p"),
            ("h:0", "etcd://h:0"),
            ("h:70000", "etcd://h:70000"),
            (":2379", "etcd://:2379"),
            ("", "etcd://h:1,"),
            ("[::1:2", "etcd://[::1:2"),
            ("[zz]:2", "etcd://[zz]:2"),
            ("h_x:1", "etcd://h_x:1"),
        ] {
            match parse(url) {
                Err(EtcdUrlError::BadEndpoint { endpoint: e, .. }) => assert_eq!(e, endpoint),
                other => panic!("{url}: {other:?}"),
            }
        }
        for (prefix, url) in [("a//b", "etcd://h:1/a//b"), ("a b", "etcd://h:1/a b")] {
            assert_eq!(
                parse(url),
                Err(EtcdUrlError::BadPrefix {
                    prefix: prefix.into()
                })
            );
        }
    }
}
