//! The supervisor's fences (cargo feature `etcd`; docs/distributed.md, "A lost worker"): before
//! it publishes an assignment of any attempt after a task's first, the supervisor process writes
//! the attempt to `/PREFIX/kv/fence/RUN/TASK` (a prefix only its etcd role may write). A worker
//! writes its action book only in a transaction that requires the fence to name its attempt
//! (`failover.rs`), so the worker of an older attempt is refused at its next write, and no worker
//! ever writes another's keys. The fence only goes up.

use quorate_protocols::{RunId, TaskId};

use super::ProcessError;

/// The fences of one run's tasks, if the run has a store of record; nothing without one.
#[derive(Clone, Debug, Default)]
pub(super) struct Fences {
    #[cfg(feature = "etcd")]
    inner: Option<(quorate_state::EtcdStore<u32>, RunId, tokio::runtime::Handle)>,
}

impl Fences {
    /// The fences of run `run` on the etcd cluster at `url` (none without a `url`); store calls
    /// run on `rt`.
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub(super) fn connect(
        rt: &tokio::runtime::Runtime,
        url: Option<&quorate_state::EtcdUrl>,
        security: &crate::security::Security,
        run: RunId,
    ) -> Result<Self, ProcessError> {
        let Some(url) = url else {
            return Ok(Self::default());
        };
        #[cfg(not(feature = "etcd"))]
        return Err(ProcessError::Store {
            url: url.to_string(),
            message: "this quorate was built without the cargo feature `etcd`".into(),
        });
        #[cfg(feature = "etcd")]
        {
            let etcd =
                crate::durable::connect_etcd(url, security).map_err(|e| ProcessError::Store {
                    url: url.to_string(),
                    message: e.to_string(),
                })?;
            Ok(Self {
                inner: Some((etcd.store("fence"), run, rt.handle().clone())),
            })
        }
    }

    /// Before attempt `attempt` of `task` is published: raises the task's fence to it (attempt
    /// 1 needs none: a worker's first attempt writes while no fence exists). Blocks until etcd
    /// answered; a cluster that does not answer for 15 s ends the process (exit 8: publishing
    /// without the fence would leave the old attempt's worker free to write, and the new one
    /// refused), after which `quorate resume` goes on.
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables, clippy::unused_self))]
    pub(super) fn raise(&self, task: TaskId, attempt: u32) {
        #[cfg(feature = "etcd")]
        if let Some((store, run, handle)) = &self.inner {
            if attempt > 1 {
                raise(
                    store,
                    handle,
                    &super::failover::fence_key(*run, task),
                    attempt,
                );
            }
        }
    }
}

/// Raises `key` of `store` to `attempt` unless it is there already.
#[cfg(feature = "etcd")]
fn raise(
    store: &quorate_state::EtcdStore<u32>,
    handle: &tokio::runtime::Handle,
    key: &str,
    attempt: u32,
) {
    use quorate_state::Store;
    use std::time::{Duration, Instant};
    let started = Instant::now();
    loop {
        let (store2, key2) = (store.clone(), key.to_owned());
        let (tx, rx) = std::sync::mpsc::channel();
        handle.spawn(async move {
            let done = async {
                let current = store2.get(&key2).await?;
                if current.as_ref().is_some_and(|c| c.value >= attempt) {
                    return Ok(true);
                }
                let outcome = store2
                    .cas(&key2, current.map(|c| c.version), attempt)
                    .await?;
                Ok::<bool, quorate_state::StoreError>(outcome.is_committed())
            };
            let _ = tx.send(done.await);
        });
        let error = match rx.recv() {
            Ok(Ok(true)) => return,
            // Raised by another writer between the read and the write: read again.
            Ok(Ok(false)) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "the runtime stopped".to_owned(),
        };
        if started.elapsed() > Duration::from_secs(15) {
            eprintln!("quorate: writing the fence {key}: {error}; giving up");
            std::process::exit(i32::from(quorate_coordinator::StopReason::EXIT_RUNTIME));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
