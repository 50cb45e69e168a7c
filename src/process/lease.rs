//! Worker liveness on etcd leases (cargo features `etcd` and `nats`; docs/distributed.md, "A
//! lost worker").
//!
//! A worker process holds a lease on `/PREFIX/kv/claims/WORKER/lease/RUN` ([`hold`]; under its
//! own claims, the one prefix besides its books its etcd role may write): granted before it
//! registers, renewed every third of its TTL. A process paused past the TTL finds its lease
//! gone when it runs again, takes a new one and writes its key again. The supervisor process
//! watches `/PREFIX/kv/claims/` ([`watch`], keeping its run's workers' lease keys only) and tells its actor when a worker's key is deleted
//! (its lease expired: [`WorkerLiveness`] `live: false`, which the core turns into
//! `handle_worker_lost`) and when it is written again (`live: true`, `handle_worker_renewed`).
//! The shell only watches and delivers: the time and what follows are the core's.

use quorate_coordinator::WorkerLiveness;
use quorate_protocols::{AgentId, RunId};

use super::ProcessError;

/// The prefix (below the etcd URL's root) the workers' lease keys are under: their claims.
const CLAIMS: &str = "kv/claims/";

/// The name (below the etcd URL's root) of worker `worker`'s lease key in run `run`.
#[must_use]
pub fn lease_name(run: RunId, worker: AgentId) -> String {
    format!("{CLAIMS}{}", below_claims(run, worker))
}

/// Worker `worker`'s lease key in run `run`, as named below [`CLAIMS`].
fn below_claims(run: RunId, worker: AgentId) -> String {
    format!("{worker}/lease/{run}")
}

/// The supervisor's watch of its workers' leases, once started ([`watch`]).
#[derive(Debug, Default)]
pub(super) struct LeaseWatch {
    #[cfg(feature = "etcd")]
    task: Option<tokio::task::JoinHandle<()>>,
    #[cfg(feature = "etcd")]
    to: Option<tokio::sync::oneshot::Sender<actix::Recipient<WorkerLiveness>>>,
}

impl LeaseWatch {
    /// From now on the changes go to `actor` (the run's supervisor actor).
    #[cfg_attr(not(feature = "etcd"), allow(clippy::unused_self, unused_variables))]
    pub(super) fn deliver_to(&mut self, actor: actix::Recipient<WorkerLiveness>) {
        #[cfg(feature = "etcd")]
        if let Some(to) = self.to.take() {
            let _ = to.send(actor);
        }
    }

    /// Stops watching.
    pub(super) fn stop(self) {
        #[cfg(feature = "etcd")]
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

/// Watches the leases of `workers` (in link order) of run `run` on the etcd cluster at `url`,
/// on runtime `rt`; nothing without a `url`. For a new run (`fresh`), a worker that holds no
/// lease is refused ([`ProcessError::Unleased`]: it was started without `--store`, or on
/// another cluster or prefix, and would be taken for lost at once); for a resumed one, a
/// worker whose key is absent already is reported lost as soon as the actor is known.
#[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
pub(super) fn watch(
    rt: &tokio::runtime::Runtime,
    url: Option<&quorate_state::EtcdUrl>,
    security: &crate::security::Security,
    run: RunId,
    workers: &[AgentId],
    fresh: bool,
) -> Result<LeaseWatch, ProcessError> {
    let Some(url) = url else {
        return Ok(LeaseWatch::default());
    };
    #[cfg(not(feature = "etcd"))]
    return Err(ProcessError::Store {
        url: url.to_string(),
        message: "this quorate was built without the cargo feature `etcd`".into(),
    });
    #[cfg(feature = "etcd")]
    {
        let etcd = crate::durable::connect_etcd(url, security).map_err(|e| store_err(url, e))?;
        let (present, mut changes) = rt
            .block_on(etcd.watch_keys(CLAIMS))
            .map_err(|e| store_err(url, e))?;
        let keys: Vec<String> = workers.iter().map(|&w| below_claims(run, w)).collect();
        if fresh {
            if let Some(w) = (0..workers.len()).find(|&w| !present.contains(&keys[w])) {
                return Err(ProcessError::Unleased {
                    worker: workers[w],
                    store: url.to_string(),
                });
            }
        }
        let names: Vec<String> = workers.iter().map(ToString::to_string).collect();
        let (to, actor) = tokio::sync::oneshot::channel::<actix::Recipient<WorkerLiveness>>();
        let task = rt.spawn(async move {
            let _etcd = etcd;
            let Ok(actor) = actor.await else { return };
            for (worker, name) in names.iter().enumerate() {
                if !present.contains(&keys[worker]) {
                    eprintln!("quorate: worker {name} holds no lease: its tasks go elsewhere");
                    actor.do_send(WorkerLiveness {
                        worker,
                        live: false,
                    });
                }
            }
            while let Some(change) = changes.recv().await {
                let (key, live) = match change {
                    quorate_state::KeyChange::Put(key) => (key, true),
                    quorate_state::KeyChange::Deleted(key) => (key, false),
                };
                let Some(worker) = keys.iter().position(|k| *k == key) else {
                    continue;
                };
                let name = &names[worker];
                if live {
                    eprintln!("quorate: worker {name} holds a lease again");
                } else {
                    eprintln!("quorate: worker {name}'s lease expired: its tasks go elsewhere");
                }
                if !actor.connected() {
                    return;
                }
                actor.do_send(WorkerLiveness { worker, live });
            }
        });
        Ok(LeaseWatch {
            task: Some(task),
            to: Some(to),
        })
    }
}

#[cfg(feature = "etcd")]
fn store_err(url: &quorate_state::EtcdUrl, e: impl std::fmt::Display) -> ProcessError {
    ProcessError::Store {
        url: url.to_string(),
        message: e.to_string(),
    }
}

/// A worker's lease, held by a task on the process's runtime until [`Held::release`].
#[cfg(feature = "etcd")]
#[derive(Debug)]
pub(super) struct Held {
    task: tokio::task::JoinHandle<()>,
    lease: std::sync::Arc<std::sync::atomic::AtomicI64>,
    etcd: quorate_state::Etcd,
}

#[cfg(feature = "etcd")]
impl Held {
    /// Stops renewing and revokes the lease (its key is deleted now).
    pub(super) async fn release(self) {
        self.task.abort();
        let id = self.lease.load(std::sync::atomic::Ordering::Relaxed);
        let _ = self.etcd.revoke(id).await;
    }
}

/// Takes a lease of `ttl` on worker `me`'s key of run `run` and keeps it on `rt`: renewed every
/// third of `ttl`; when a renewal finds it expired (the process was paused past it), a new one
/// is taken and the key written again.
#[cfg(feature = "etcd")]
pub(super) fn hold(
    rt: &tokio::runtime::Runtime,
    etcd: &quorate_state::Etcd,
    run: RunId,
    me: AgentId,
    ttl: std::time::Duration,
) -> Result<Held, ProcessError> {
    use std::sync::atomic::Ordering;
    let name = lease_name(run, me);
    let value = me.to_string().into_bytes();
    let first = rt
        .block_on(etcd.put_leased(&name, value.clone(), ttl))
        .map_err(|e| store_err(etcd.url(), e))?;
    let lease = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(first));
    let (etcd2, lease2) = (etcd.clone(), lease.clone());
    let task = rt.spawn(async move {
        let every = (ttl / 3).max(std::time::Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            let id = lease2.load(Ordering::Relaxed);
            match etcd2.keep_alive(id).await {
                Ok(false) => {
                    eprintln!("quorate: worker {me}: its lease had expired; taking a new one");
                    match etcd2.put_leased(&name, value.clone(), ttl).await {
                        Ok(new) => lease2.store(new, Ordering::Relaxed),
                        Err(e) => eprintln!("quorate: worker {me}: taking a lease: {e}"),
                    }
                }
                Ok(true) => {}
                Err(e) => eprintln!("quorate: worker {me}: renewing its lease: {e}"),
            }
        }
    });
    Ok(Held {
        task,
        lease,
        etcd: etcd.clone(),
    })
}

/// A worker process's part in failover: its scripted world and its tasks' books in the store of
/// record, and its lease ([`attach`]); nothing without `--store`.
#[derive(Debug, Default)]
pub(super) struct Attached {
    #[cfg(feature = "etcd")]
    inner: Option<(super::failover::Shared, Held)>,
}

impl Attached {
    /// Where the worker actor keeps its tasks' books, if in a store.
    pub(super) fn books(&self) -> Option<std::sync::Arc<dyn quorate_workers::BookStore>> {
        #[cfg(feature = "etcd")]
        if let Some((shared, _)) = &self.inner {
            return Some(std::sync::Arc::new(shared.clone()));
        }
        None
    }

    /// Book writes and claims the store refused (this worker was fenced off).
    pub(super) fn fenced(&self) -> u64 {
        #[cfg(feature = "etcd")]
        if let Some((shared, _)) = &self.inner {
            return shared.fenced();
        }
        0
    }

    /// Gives the lease up (at the end of the run).
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub(super) fn release(self, rt: &tokio::runtime::Runtime) {
        #[cfg(feature = "etcd")]
        if let Some((_, held)) = self.inner {
            rt.block_on(held.release());
        }
    }
}

/// Connects worker `me` of run `run` to the store of record at `url` (if any): `world` commits
/// its effects and answers its queries there, and a lease of `ttl` is taken on the worker's key.
#[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
pub(super) fn attach(
    rt: &tokio::runtime::Runtime,
    url: Option<&quorate_state::EtcdUrl>,
    security: &crate::security::Security,
    run: RunId,
    me: AgentId,
    world: &quorate_workers::World,
    ttl: std::time::Duration,
) -> Result<Attached, ProcessError> {
    let Some(url) = url else {
        return Ok(Attached::default());
    };
    #[cfg(not(feature = "etcd"))]
    return Err(ProcessError::Store {
        url: url.to_string(),
        message: "this quorate was built without the cargo feature `etcd`".into(),
    });
    #[cfg(feature = "etcd")]
    {
        let etcd = crate::durable::connect_etcd(url, security).map_err(|e| store_err(url, e))?;
        let shared = super::failover::Shared::new(&etcd, run, me, rt.handle().clone());
        let held = hold(rt, &etcd, run, me, ttl)?;
        world.set_store(std::sync::Arc::new(shared.clone()));
        Ok(Attached {
            inner: Some((shared, held)),
        })
    }
}
