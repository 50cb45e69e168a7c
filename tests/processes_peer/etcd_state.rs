//! What etcd holds for a peer run, read back by the tests: the roster, the effects, and per
//! task its claim, its fence and its terminal record; and the waits and checks made over it
//! (an effect in flight, a takeover, every effect once).

use std::time::{Duration, Instant};

use quorate::coordinator::peer::{PeerStores, Terminal};
use quorate::process::failover::{fence_key, StoredEffect};
use quorate::process::peer::roster::{roster_key, Roster};
use quorate::protocols::RunId;
use quorate_state::{Etcd, EtcdUrl, Store};

use super::{peer_id, RUN};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// What etcd holds for the run: the roster, the effects, and per task its claim (the peer's
/// index), its fence and its terminal record.
pub(crate) struct Shared {
    etcd: Etcd,
    run: RunId,
}

impl Shared {
    pub(crate) fn new(url: &EtcdUrl) -> Self {
        Self {
            etcd: Etcd::connect_blocking(url).expect("connected"),
            run: quorate::process::parse_id(RUN).expect("a run id"),
        }
    }

    pub(crate) fn roster(&self) -> Option<Roster> {
        let store = self.etcd.store::<Roster>("peer-roster");
        runtime()
            .block_on(store.get(&roster_key(self.run)))
            .ok()
            .flatten()
            .map(|v| v.value)
    }

    /// `task`'s claim: the index of the peer holding it.
    pub(crate) fn claim(&self, task: &str) -> Option<usize> {
        let store = self.etcd.store::<usize>("peer-claims");
        let key = PeerStores::claim_key(self.run, task);
        runtime()
            .block_on(store.get(&key))
            .ok()
            .flatten()
            .map(|v| v.value)
    }

    /// Every effect of the run in etcd (`kv/world/RUN/...`), by key, whichever process made it.
    fn effects(&self) -> Vec<(String, StoredEffect)> {
        let world = self.etcd.store::<StoredEffect>("world");
        let found = runtime()
            .block_on(world.scan(&format!("{}/", self.run)))
            .expect("scan");
        found.into_iter().map(|(k, v)| (k, v.value)).collect()
    }

    /// The attempt `task`'s fence names (`kv/fence/RUN/TASK-ID`).
    fn fence(&self, task: &str) -> Option<u32> {
        let i: usize = task.strip_prefix('t')?.parse().ok()?;
        let id = *self.roster()?.tasks.get(i)?;
        let store = self.etcd.store::<u32>("fence");
        runtime()
            .block_on(store.get(&fence_key(self.run, id)))
            .ok()
            .flatten()
            .map(|v| v.value)
    }

    pub(crate) fn record(&self, task: &str) -> Option<Terminal> {
        let store = self.etcd.store::<Terminal>("peer-states");
        let key = PeerStores::state_key(self.run, task);
        runtime()
            .block_on(store.get(&key))
            .ok()
            .flatten()
            .map(|v| v.value)
    }
}

/// The first `db.step` effect in etcd whose task has no terminal record yet (waits up to
/// 20 s): the task's name, the effect, and the test's process index of the peer that made it.
pub(crate) fn effect_in_flight(shared: &Shared) -> (String, StoredEffect, usize) {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no effect seen"
        );
        let tasks = shared.roster().map(|r| r.tasks).unwrap_or_default();
        let found = shared.effects().into_iter().find_map(|(_, e)| {
            let i = tasks.iter().position(|&t| t == e.effect.action.task)?;
            let task = format!("t{i}");
            (e.effect.tool == "db.step" && shared.record(&task).is_none()).then_some((task, e))
        });
        if let Some((task, effect)) = found {
            let by = effect.by.to_string();
            let process = (0..3).find(|&i| peer_id(i) == by).expect("a test peer");
            return (task, effect, process);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (up to 20 s) until `task`'s fence names an attempt after the first: a peer took the
/// task over. The attempt.
pub(crate) fn wait_for_takeover(shared: &Shared, task: &str) -> u32 {
    let started = Instant::now();
    loop {
        if let Some(attempt) = shared.fence(task).filter(|&a| a >= 2) {
            return attempt;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not taken over"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Checks that etcd holds exactly one effect for each of the plan's `2 * tasks` actions,
/// counting every process (no duplicate written beside one).
pub(crate) fn assert_each_effect_once(
    shared: &Shared,
    tasks: usize,
) -> Vec<(String, StoredEffect)> {
    let effects = shared.effects();
    let again: Vec<&String> = effects
        .iter()
        .map(|(k, _)| k)
        .filter(|k| k.contains("/again/"))
        .collect();
    assert!(again.is_empty(), "duplicate effects: {again:?}");
    let mut actions: Vec<_> = effects.iter().map(|(_, e)| e.effect.action).collect();
    actions.sort();
    actions.dedup();
    assert_eq!(actions.len(), effects.len(), "{effects:?}");
    for tool in ["db.step", "db.mark"] {
        let n = effects
            .iter()
            .filter(|(_, e)| e.effect.tool == tool)
            .count();
        assert_eq!(n, tasks, "{tool} effects: {effects:?}");
    }
    effects
}
