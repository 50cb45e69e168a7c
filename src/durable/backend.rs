//! Where kept runs live: [`StoreAt`] (the `--store` argument), [`RunStore`] (its handles, on a
//! redb file or on an etcd cluster) and [`Journal`] (the hooks the runtime writes a run through).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
#[cfg(feature = "etcd")]
use std::sync::atomic::AtomicU64;

use quorate_coordinator::{Event, EventKind};
use quorate_protocols::RunId;
#[cfg(feature = "etcd")]
use quorate_state::RunLog;
use quorate_state::{
    Commit, EtcdUrl, EtcdUrlError, RedbDb, RedbLog, RedbStore, Seq, Store, StoreError,
};
use quorate_workers::scripted::CommittedEffect;
use quorate_workers::ActionIntent;

use super::{DurableError, RunRecord};
use crate::security::Security;

mod journal;
#[cfg(feature = "etcd")]
mod retry;

pub use journal::Journal;

/// Where `--store` keeps runs: a redb file (any value without `://`), or an etcd cluster
/// (`etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`, needs the cargo feature `etcd`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreAt {
    /// A redb file (created if absent).
    File(PathBuf),
    /// An etcd cluster, runs kept under the URL's key prefix.
    Etcd(EtcdUrl),
}

/// A `--store` value that names no usable store.
#[derive(Debug, thiserror::Error)]
pub enum StoreAtError {
    /// The value is a URL but not a valid etcd URL.
    #[error("{source}")]
    Url {
        /// The value as given.
        value: String,
        /// What is wrong with it.
        source: EtcdUrlError,
    },
    /// An etcd URL given to a binary built without the cargo feature `etcd`.
    #[error(
        "{value}: this quorate was built without etcd support; \
         build it with the cargo feature `etcd` (cargo build --features etcd)"
    )]
    NoEtcd {
        /// The value as given.
        value: String,
    },
}

impl std::str::FromStr for StoreAt {
    type Err = StoreAtError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if !value.contains("://") {
            return Ok(Self::File(PathBuf::from(value)));
        }
        let url = value
            .parse::<EtcdUrl>()
            .map_err(|source| StoreAtError::Url {
                value: value.to_owned(),
                source,
            })?;
        if cfg!(feature = "etcd") {
            Ok(Self::Etcd(url))
        } else {
            Err(StoreAtError::NoEtcd {
                value: value.to_owned(),
            })
        }
    }
}

impl std::fmt::Display for StoreAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Etcd(url) => write!(f, "{url}"),
        }
    }
}

/// The handles of one backend.
#[derive(Clone, Debug)]
enum Backend {
    Redb {
        runs: RedbStore<RunRecord>,
        results: RedbStore<serde_json::Value>,
        /// The same table, written by the journal with deferred commits made durable by the
        /// flush of the events that follow them (group commit).
        results_deferred: RedbStore<serde_json::Value>,
        intents: RedbStore<ActionIntent>,
        events: RedbLog<Event>,
        effects: RedbLog<CommittedEffect>,
    },
    #[cfg(feature = "etcd")]
    Etcd {
        runs: quorate_state::EtcdStore<RunRecord>,
        results: quorate_state::EtcdStore<serde_json::Value>,
        intents: quorate_state::EtcdStore<ActionIntent>,
        events: quorate_state::EtcdLog<Event>,
        effects: quorate_state::EtcdLog<CommittedEffect>,
    },
}

/// The kept runs' handles, on a redb file or an etcd cluster. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct RunStore {
    at: StoreAt,
    backend: Backend,
}

/// Connects to the etcd cluster at `url` with `security` (TLS and the etcd user; plaintext only
/// when allowed): every etcd connection of the `quorate` command is made here (kept runs, and
/// the worker processes' shared world, action books and leases). Blocks the
/// calling thread (the client is built on a thread of its own, so this works inside an async
/// runtime too).
///
/// # Errors
/// [`DurableError::Connect`]: plaintext refused, an unreadable certificate;
/// [`StoreError::Denied`]: credentials refused; [`StoreError::Unavailable`] otherwise.
#[cfg(feature = "etcd")]
pub fn connect_etcd(
    url: &EtcdUrl,
    security: &Security,
) -> Result<quorate_state::Etcd, DurableError> {
    use quorate_state::{Etcd, EtcdConnectError, EtcdOptions};
    let security = security.etcd();
    let connected = std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| {
                    EtcdConnectError::Store(StoreError::Unavailable {
                        reason: format!("{url}: {e}"),
                    })
                })?
                .block_on(Etcd::connect_secure(url, EtcdOptions::default(), &security))
        })
        .join()
        .expect("the connecting thread does not panic")
    });
    connected.map_err(|e| match e {
        EtcdConnectError::Store(e) => DurableError::Store(e),
        e => DurableError::Connect(e),
    })
}

/// Runs `fut` to completion on a thread of its own (the runtime's threads are inside actix's
/// tokio runtime, where another runtime cannot block).
fn block<T: Send>(fut: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a current-thread runtime starts")
                .block_on(fut)
        })
        .join()
        .expect("the journal thread does not panic")
    })
}

/// Every value of `store` under `prefix`, by key (the generic path: etcd).
#[cfg(feature = "etcd")]
fn scan<V: Send, S: Store<V>>(store: &S, prefix: &str) -> Result<Vec<(String, V)>, StoreError> {
    Ok(block(store.scan(prefix))?
        .into_iter()
        .map(|(k, v)| (k, v.value))
        .collect())
}

/// Every entry of `run` in `log`, in order (the generic path: etcd).
#[cfg(feature = "etcd")]
fn read_all<E: Send, L: RunLog<E>>(log: &L, run: RunId) -> Result<Vec<E>, StoreError> {
    Ok(block(log.read(run, Seq(0), usize::MAX))?
        .into_iter()
        .map(|(_, e)| e)
        .collect())
}

impl RunStore {
    /// Opens (or creates) the redb file at `path`.
    ///
    /// # Errors
    /// [`StoreError::File`]: it cannot be opened (missing directory, locked by another process).
    pub fn open(path: &Path) -> Result<Self, DurableError> {
        let db = RedbDb::open(path)?;
        Ok(Self {
            at: StoreAt::File(path.to_path_buf()),
            backend: Backend::Redb {
                runs: db.store("runs"),
                results: db.store("results"),
                results_deferred: db.store("results").with_commit(Commit::Deferred),
                intents: db.store("intents"),
                events: db.log("events").with_commit(Commit::Deferred),
                effects: db.log("effects"),
            },
        })
    }

    /// Opens the store `at`: [`RunStore::open`] for a file; for an etcd cluster, connects and
    /// reads once, so that a cluster that does not answer fails here. `security` is how the
    /// etcd connection is made (`connect_etcd`, feature `etcd`); a file ignores it.
    ///
    /// # Errors
    /// As [`RunStore::open`]; for etcd, as `connect_etcd`, and [`StoreError::Unavailable`]:
    /// the cluster did not answer within the request timeout.
    pub fn open_at(at: &StoreAt, security: &Security) -> Result<Self, DurableError> {
        match at {
            StoreAt::File(path) => Self::open(path),
            #[cfg(feature = "etcd")]
            StoreAt::Etcd(url) => Self::connect(url, security),
            #[cfg(not(feature = "etcd"))]
            StoreAt::Etcd(url) => {
                let _ = security;
                Err(StoreError::Unavailable {
                    reason: format!(
                        "{url}: this quorate was built without the cargo feature `etcd`"
                    ),
                }
                .into())
            }
        }
    }

    /// Connects to the etcd cluster at `url` (runs under its key prefix: `runs`, `results`,
    /// `intents` stores, `events` and `effects` logs) and reads once.
    ///
    /// # Errors
    /// As [`connect_etcd`]; [`StoreError::Unavailable`]: the cluster did not answer.
    #[cfg(feature = "etcd")]
    pub fn connect(url: &EtcdUrl, security: &Security) -> Result<Self, DurableError> {
        let etcd = connect_etcd(url, security)?;
        let runs: quorate_state::EtcdStore<RunRecord> = etcd.store("runs");
        // A lazy connection: this read is what finds an unreachable cluster.
        block(runs.get("-"))?;
        Ok(Self {
            at: StoreAt::Etcd(url.clone()),
            backend: Backend::Etcd {
                runs,
                results: etcd.store("results"),
                intents: etcd.store("intents"),
                events: etcd.log("events"),
                effects: etcd.log("effects"),
            },
        })
    }

    /// Where the runs are kept (as `--store` names it).
    #[must_use]
    pub fn at(&self) -> &StoreAt {
        &self.at
    }

    /// The etcd connection the store was opened on (`None` for a file): what a peer process
    /// keeps its shared stores on, so every etcd connection is made by [`RunStore::connect`].
    #[cfg(feature = "etcd")]
    #[must_use]
    pub fn etcd(&self) -> Option<&quorate_state::Etcd> {
        match &self.backend {
            Backend::Etcd { runs, .. } => Some(runs.etcd()),
            Backend::Redb { .. } => None,
        }
    }

    /// Every run, oldest first.
    ///
    /// # Errors
    /// The read failed.
    pub fn runs(&self) -> Result<Vec<RunRecord>, DurableError> {
        let mut runs: Vec<RunRecord> = match &self.backend {
            Backend::Redb { runs, .. } => runs
                .scan_now("")?
                .into_iter()
                .map(|(_, v)| v.value)
                .collect(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { runs, .. } => scan(runs, "")?.into_iter().map(|(_, v)| v).collect(),
        };
        runs.sort_by_key(|r| (r.started_unix_ms, r.run_id.to_string()));
        Ok(runs)
    }

    /// The run `id`.
    ///
    /// # Errors
    /// [`DurableError::UnknownRun`], or the read failed.
    pub fn run(&self, id: &str) -> Result<RunRecord, DurableError> {
        let found = match &self.backend {
            Backend::Redb { runs, .. } => runs.get_now(id.trim())?,
            #[cfg(feature = "etcd")]
            Backend::Etcd { runs, .. } => block(runs.get(id.trim()))?,
        };
        found
            .map(|v| v.value)
            .ok_or_else(|| DurableError::UnknownRun {
                run: id.to_string(),
                store: self.at.to_string(),
            })
    }

    /// Writes `record` durably.
    ///
    /// # Errors
    /// The write failed.
    pub fn put_run(&self, record: &RunRecord) -> Result<(), DurableError> {
        async fn put<S: Store<RunRecord>>(runs: &S, record: &RunRecord) -> Result<(), StoreError> {
            let key = record.run_id.to_string();
            let current = runs.get(&key).await?.map(|v| v.version);
            // One process runs a run at a time (a redb file is locked to it): nothing else
            // writes the record.
            let _ = runs.cas(&key, current, record.clone()).await?;
            Ok(())
        }
        match &self.backend {
            Backend::Redb { runs, .. } => block(put(runs, record))?,
            // Read again and written over its current version: a retry cannot undo a newer one.
            #[cfg(feature = "etcd")]
            Backend::Etcd { runs, .. } => {
                block(retry::retrying(&AtomicU64::new(0), |_| put(runs, record)))?;
            }
        }
        Ok(())
    }

    /// The run's log, in order.
    ///
    /// # Errors
    /// The read failed.
    pub fn events(&self, run: RunId) -> Result<Vec<Event>, DurableError> {
        Ok(match &self.backend {
            Backend::Redb { events, .. } => events
                .read_now(run, Seq(0), usize::MAX)?
                .into_iter()
                .map(|(_, e)| e)
                .collect(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { events, .. } => read_all(events, run)?,
        })
    }

    /// The run's results (and `[data]`) by key.
    ///
    /// # Errors
    /// The read failed.
    pub fn results(&self, run: RunId) -> Result<Vec<(String, serde_json::Value)>, DurableError> {
        let prefix = format!("{run}/");
        let found: Vec<(String, serde_json::Value)> = match &self.backend {
            Backend::Redb { results, .. } => results
                .scan_now(&prefix)?
                .into_iter()
                .map(|(k, v)| (k, v.value))
                .collect(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { results, .. } => scan(results, &prefix)?,
        };
        Ok(found
            .into_iter()
            .map(|(k, v)| (k[prefix.len()..].to_string(), v))
            .collect())
    }

    /// The actions the run's workers sent to tools.
    ///
    /// # Errors
    /// The read failed.
    pub fn intents(&self, run: RunId) -> Result<Vec<ActionIntent>, DurableError> {
        let prefix = format!("{run}/");
        Ok(match &self.backend {
            Backend::Redb { intents, .. } => intents
                .scan_now(&prefix)?
                .into_iter()
                .map(|(_, v)| v.value)
                .collect(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { intents, .. } => scan(intents, &prefix)?
                .into_iter()
                .map(|(_, v)| v)
                .collect(),
        })
    }

    /// The effects the run's scripted world committed, in order.
    ///
    /// # Errors
    /// The read failed.
    pub fn effects(&self, run: RunId) -> Result<Vec<CommittedEffect>, DurableError> {
        Ok(match &self.backend {
            Backend::Redb { effects, .. } => effects
                .read_now(run, Seq(0), usize::MAX)?
                .into_iter()
                .map(|(_, e)| e)
                .collect(),
            #[cfg(feature = "etcd")]
            Backend::Etcd { effects, .. } => read_all(effects, run)?,
        })
    }

    /// Task states of `run` from its log (the last transition of each task).
    ///
    /// # Errors
    /// The read failed.
    pub fn task_states(&self, run: RunId) -> Result<BTreeMap<String, String>, DurableError> {
        let mut states = BTreeMap::new();
        for e in self.events(run)? {
            if let (Some(task), EventKind::Transition { to, .. }) = (&e.task, &e.kind) {
                states.insert(task.to_string(), to.to_string());
            }
        }
        Ok(states)
    }
}

#[cfg(test)]
mod tests;
