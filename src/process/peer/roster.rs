//! How the peers of a run find each other: the roster, one etcd key per run
//! (`/PREFIX/kv/peer-roster/roster/<run>`), grown by compare-and-swap. The first peer creates it
//! with the run's task ids; each later peer appends itself until `--peers` joined. A peer's
//! index is its place in the roster. The first peer then writes the plan's data, opens the
//! run's root account, creates the run's stream with one consumer per peer, and marks the
//! roster `stream = true`; the others wait for that mark before they bind to their consumers.

use std::time::{Duration, Instant};

use quorate_protocols::{AgentId, IdSource, RunId, TaskId};
use quorate_state::{CasOutcome, EtcdStore, Store};
use serde::{Deserialize, Serialize};

use super::{retry, PeerProcessError};

/// The roster of run `run`: who joined, in order, and the ids every peer gives the plan's tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Roster {
    /// The peers' agent ids; a peer's index is its place here.
    pub peers: Vec<AgentId>,
    /// How many peers the run waits for.
    pub wanted: usize,
    /// The plan's node ids, in plan order (every peer must run the same plan).
    pub nodes: Vec<String>,
    /// The run-wide task ids, one per node.
    pub tasks: Vec<TaskId>,
    /// The first peer created the stream and its consumers, opened the root account and wrote
    /// the plan's data.
    pub stream: bool,
}

/// The roster's key in the `peer-roster` store.
#[must_use]
pub fn roster_key(run: RunId) -> String {
    format!("roster/{run}")
}

/// Joins run `run`'s roster as `me` (or finds itself in it) and waits until `wanted` peers
/// joined; the full roster.
///
/// # Errors
/// [`PeerProcessError::NotEnoughPeers`] after `wait`; [`PeerProcessError::PeersDisagree`] if
/// the roster was made for another plan or another number of peers, or is full without `me`.
pub(super) async fn join(
    store: &EtcdStore<Roster>,
    run: RunId,
    me: AgentId,
    wanted: usize,
    nodes: &[String],
    wait: Duration,
) -> Result<Roster, PeerProcessError> {
    let key = roster_key(run);
    let deadline = Instant::now() + wait;
    let mut ids = quorate_workers::edge::random_ids();
    loop {
        let current = retry("read the roster", || store.get(&key)).await?;
        let (expected, mut roster) = match current {
            None => (None, fresh(&mut ids, wanted, nodes)),
            Some(r) => (Some(r.version), r.value),
        };
        if roster.wanted != wanted || roster.nodes != nodes {
            return Err(PeerProcessError::PeersDisagree {
                run,
                detail: format!(
                    "the roster was made for {} peers and nodes [{}]; this peer has --peers \
                     {wanted} and nodes [{}]",
                    roster.wanted,
                    roster.nodes.join(", "),
                    nodes.join(", ")
                ),
            });
        }
        if roster.peers.contains(&me) {
            if roster.peers.len() == wanted {
                return Ok(roster);
            }
        } else if roster.peers.len() < wanted {
            roster.peers.push(me);
            let written = retry("join the roster", || {
                store.cas(&key, expected, roster.clone())
            });
            if let CasOutcome::Committed(_) = written.await? {
                eprintln!(
                    "quorate: peer {me}: joined run {run} ({}/{wanted})",
                    roster.peers.len()
                );
            }
            continue;
        } else {
            return Err(PeerProcessError::PeersDisagree {
                run,
                detail: format!("its {wanted} peers joined already, without this one ({me})"),
            });
        }
        if Instant::now() >= deadline {
            return Err(PeerProcessError::NotEnoughPeers {
                joined: roster.peers.len(),
                wanted,
                waited: wait,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the first peer marked the roster `stream = true`.
///
/// # Errors
/// [`PeerProcessError::NotEnoughPeers`] (with every peer joined) after `wait`.
pub(super) async fn wait_for_stream(
    store: &EtcdStore<Roster>,
    run: RunId,
    wait: Duration,
) -> Result<(), PeerProcessError> {
    let key = roster_key(run);
    let deadline = Instant::now() + wait;
    loop {
        let roster = retry("read the roster", || store.get(&key)).await?;
        if roster.as_ref().is_some_and(|r| r.value.stream) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let (joined, wanted) = roster.map_or((0, 0), |r| (r.value.peers.len(), r.value.wanted));
            return Err(PeerProcessError::NotEnoughPeers {
                joined,
                wanted,
                waited: wait,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Marks the roster `stream = true` (the first peer, once the stream exists).
///
/// # Errors
/// A store error after the retries.
pub(super) async fn mark_stream(
    store: &EtcdStore<Roster>,
    run: RunId,
) -> Result<(), PeerProcessError> {
    let key = roster_key(run);
    loop {
        let Some(current) = retry("read the roster", || store.get(&key)).await? else {
            return Err(PeerProcessError::PeersDisagree {
                run,
                detail: "the roster vanished from the store".into(),
            });
        };
        let mut roster = current.value;
        if roster.stream {
            return Ok(());
        }
        roster.stream = true;
        let written = retry("mark the roster", || {
            store.cas(&key, Some(current.version), roster.clone())
        });
        if written.await?.is_committed() {
            return Ok(());
        }
    }
}

fn fresh(ids: &mut IdSource, wanted: usize, nodes: &[String]) -> Roster {
    Roster {
        peers: Vec::new(),
        wanted,
        nodes: nodes.to_vec(),
        tasks: nodes.iter().map(|_| ids.task_id()).collect(),
        stream: false,
    }
}
