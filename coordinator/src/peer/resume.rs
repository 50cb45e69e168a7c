//! Resuming a peer-mode run after its process ended, from what a durable run kept: its log
//! (every peer's events) and the records its peers won on the shared stores (terminal records,
//! the plan version, accepted results), each kept through the run's journal before the peer
//! acted on it.
//!
//! [`rebuild`] turns them into a [`PeerResume`]: the plan the run was on (its fallback if it
//! switched), every task's id (from the log's `dispatched` events, or the plan version's
//! record), its committed terminal record, the peer that ran its last attempt, and the root
//! account replayed from the log (`dispatched` allocates a slice once, `task-closed` returns
//! it). [`PeerCore::resume`](crate::PeerCore::resume) builds each peer's core from it: a
//! settled task stays settled, an attempt in flight runs again as a new attempt on the peer
//! that ran it, with the same task id and slice (its worker's action records, restored from the
//! journal, keep every effect once), and the rest is claimed as usual.

use std::collections::HashMap;

use quorate_protocols::{Budget, Plan, PlanSpec, RunId, TaskId, TaskState};
use quorate_state::{Account, AccountId};
use serde::{Deserialize, Serialize};

use super::{PlanVersion, Terminal};
use crate::event::EventKind;
use crate::{ResumeError, ResumeFrom};

/// A terminal record as a durable peer run keeps it (`state/<run>/<node>`): the record and the
/// store version it was committed at, which orders records run-wide (the stop reason is the
/// cause of the earliest non-completed one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeptTerminal {
    /// The record.
    pub record: Terminal,
    /// Its store version.
    pub version: u64,
}

impl KeptTerminal {
    pub(crate) fn of(record: &Terminal, version: u64) -> Self {
        Self {
            record: record.clone(),
            version,
        }
    }
}

/// The last attempt of a task, as the log has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastAttempt {
    /// The peer that ran it (its index).
    pub peer: usize,
    /// The attempt's number.
    pub attempt: u32,
    /// The task's slice.
    pub granted: Budget,
    /// What the slice was closed at, if it was.
    pub closed: Option<Budget>,
}

/// A peer-mode run rebuilt from what it kept (see the module docs).
#[derive(Clone, Debug)]
pub struct PeerResume {
    /// The plan the run was on.
    pub plan: Plan,
    /// Its version (2 if the run switched to its fallback).
    pub plan_version: u32,
    /// Each node's task id.
    pub tasks: Vec<TaskId>,
    /// Each node's committed terminal record and its version in the rebuilt state store (the
    /// kept records numbered 1, 2, ... in the order they were committed).
    pub terminals: Vec<Option<(Terminal, u64)>>,
    /// Each node's last attempt.
    pub attempts: Vec<Option<LastAttempt>>,
    /// Each peer's view of each node: the state its last logged transition left it in.
    pub views: Vec<Vec<TaskState>>,
    /// The run's root account, replayed from the log.
    pub root: Account,
    /// The next event's `seq`.
    pub seq: u64,
    /// Events replayed.
    pub replayed: u64,
}

/// Rebuilds the peer run `run` of `plan` (with `fallback`, its `[fallback]` if it has one),
/// run by `peers` peers, from `from`; tasks the log never dispatched get ids from `fresh`.
///
/// # Errors
/// As [`SupervisorCore::replay`](crate::SupervisorCore::replay): an event of another run, a
/// slice the ledger refuses, a peer index the run does not have, a switch of plan version
/// without the fallback (or to a plan of another size), a kept record that does not read.
pub fn rebuild(
    run: RunId,
    plan: Plan,
    fallback: Option<PlanSpec>,
    peers: usize,
    from: &ResumeFrom,
    mut fresh: impl FnMut() -> TaskId,
) -> Result<PeerResume, ResumeError> {
    let kept: HashMap<&str, &serde_json::Value> =
        from.results.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut root = crate::core::root_account(&plan);
    let mut ids: HashMap<String, TaskId> = HashMap::new();
    let mut attempts: HashMap<String, LastAttempt> = HashMap::new();
    let mut seq = 0;
    let mut views: HashMap<(usize, String), TaskState> = HashMap::new();
    for e in &from.events {
        if e.run_id != run {
            return Err(ResumeError::WrongRun {
                seq: e.seq,
                expected: run,
                found: e.run_id,
            });
        }
        seq = seq.max(e.seq + 1);
        let Some(name) = e.task.as_deref() else {
            continue;
        };
        match &e.kind {
            EventKind::Transition { to, .. } => {
                if let Some(peer) = e.peer {
                    views.insert((peer, name.to_string()), *to);
                }
            }
            EventKind::Dispatched {
                attempt,
                worker,
                task_id,
                granted,
            } => {
                if *worker >= peers {
                    return Err(ResumeError::UnknownWorker {
                        seq: e.seq,
                        worker: *worker,
                        workers: peers,
                    });
                }
                if ids.insert(name.to_string(), *task_id).is_none() {
                    root.allocate(AccountId::Root, AccountId::Task(*task_id), *granted)
                        .map_err(|error| ResumeError::Ledger { seq: e.seq, error })?;
                }
                attempts.insert(
                    name.to_string(),
                    LastAttempt {
                        peer: *worker,
                        attempt: *attempt,
                        granted: *granted,
                        closed: None,
                    },
                );
            }
            EventKind::TaskClosed { spent } => {
                if let (Some(&id), Some(last)) = (ids.get(name), attempts.get_mut(name)) {
                    if last.closed.is_none() {
                        last.closed = Some(*spent);
                        root.child_closed(AccountId::Task(id), *spent)
                            .map_err(|error| ResumeError::Ledger { seq: e.seq, error })?;
                    }
                }
            }
            _ => {}
        }
    }
    let read = |key: String| -> Option<Result<serde_json::Value, ResumeError>> {
        kept.get(key.as_str()).map(|v| Ok((*v).clone()))
    };
    let switched: Option<PlanVersion> = match read(super::PeerStores::plan_key(run)) {
        Some(value) => {
            Some(
                serde_json::from_value(value?).map_err(|_| ResumeError::MissingResult {
                    task: "-".into(),
                    key: super::PeerStores::plan_key(run),
                })?,
            )
        }
        None => None,
    };
    let (plan, plan_version, tasks) = match switched {
        Some(record) => {
            let Some(spec) = fallback else {
                return Err(ResumeError::Replanned { seq });
            };
            let new = spec.validate().map_err(|e| ResumeError::BadFallback {
                seq,
                error: e.into(),
            })?;
            if new.len() != record.tasks.len() {
                return Err(ResumeError::FallbackMismatch {
                    seq,
                    logged: record.tasks.len(),
                    given: new.len(),
                });
            }
            // Tasks the switch dropped that never returned their slice: charged whole.
            for (name, last) in &attempts {
                let id = quorate_protocols::NodeId::new(name.as_str()).ok();
                let dropped = id.is_none_or(|id| new.index_of(&id).is_none());
                if dropped && last.closed.is_none() {
                    let _ = root.child_closed(AccountId::Task(ids[name]), last.granted);
                }
            }
            (new, record.version, record.tasks)
        }
        None => {
            let tasks = (0..plan.len() as u32)
                .map(|i| {
                    let name = plan.node(i).id.as_str();
                    ids.get(name).copied().unwrap_or_else(&mut fresh)
                })
                .collect();
            (plan, 1, tasks)
        }
    };
    let mut terminals = Vec::with_capacity(plan.len());
    let mut last = Vec::with_capacity(plan.len());
    for i in 0..plan.len() as u32 {
        let name = plan.node(i).id.as_str();
        let key = super::PeerStores::state_key(run, name);
        let terminal = match read(key.clone()) {
            Some(value) => {
                let kept: KeptTerminal =
                    serde_json::from_value(value?).map_err(|_| ResumeError::MissingResult {
                        task: name.to_string(),
                        key,
                    })?;
                let mut record = kept.record;
                record.node = i;
                Some((record, kept.version))
            }
            None => None,
        };
        terminals.push(terminal);
        last.push(attempts.get(name).copied());
    }
    // The rebuilt state store numbers the kept records 1, 2, ... in their order (and what the
    // resumed run commits after them): their versions become those ranks.
    let mut order: Vec<usize> = (0..terminals.len())
        .filter(|&i| terminals[i].is_some())
        .collect();
    order.sort_by_key(|&i| terminals[i].as_ref().map(|(_, v)| *v));
    for (rank, i) in order.into_iter().enumerate() {
        if let Some((_, version)) = &mut terminals[i] {
            *version = rank as u64 + 1;
        }
    }
    let views = (0..peers)
        .map(|p| {
            (0..plan.len() as u32)
                .map(|i| {
                    let name = plan.node(i).id.to_string();
                    views.get(&(p, name)).copied().unwrap_or(TaskState::Pending)
                })
                .collect()
        })
        .collect();
    Ok(PeerResume {
        views,
        plan,
        plan_version,
        tasks,
        terminals,
        attempts: last,
        root,
        seq,
        replayed: from.events.len() as u64,
    })
}

impl super::PeerStores {
    /// Fills these fresh stores for the resumed run `run` rebuilt as `from`, whose kept
    /// records are `kept` (accepted results and `[data]` go to the result store, terminal
    /// records to the state store in the order they were committed, the plan version to its
    /// key), with its root account, the claims of the attempts it runs again, and `seq`.
    pub(crate) fn restore(
        &self,
        run: RunId,
        from: &PeerResume,
        kept: &[(String, serde_json::Value)],
    ) {
        let (states, plan) = (format!("state/{run}/"), Self::plan_key(run));
        for (key, value) in kept {
            if !key.starts_with(&states) && *key != plan {
                let _ = self.results.cas_now(key, None, value.clone().into());
            }
        }
        let mut records: Vec<&(Terminal, u64)> = from.terminals.iter().flatten().collect();
        records.sort_by_key(|(_, version)| *version);
        for (record, _) in records {
            let key = Self::state_key(run, from.plan.node(record.node).id.as_str());
            let _ = self.states.cas_now(&key, None, record.clone());
        }
        if from.plan_version > 1 {
            let record = PlanVersion {
                version: from.plan_version,
                tasks: from.tasks.clone(),
                by: 0,
            };
            let _ = self.plans.cas_now(&plan, None, record);
        }
        for (i, last) in from.attempts.iter().enumerate() {
            if let Some(last) = last {
                let key = Self::claim_key(run, from.plan.node(i as u32).id.as_str());
                let _ = self.claims.cas_now(&key, None, last.peer);
            }
        }
        let _ = self
            .budget
            .cas_now(&Self::budget_key(run), None, from.root.clone());
        self.seq
            .store(from.seq, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;
    use quorate_protocols::{NodeSpec, PlanSpec};

    fn plan() -> Plan {
        PlanSpec {
            budget: Budget::steps(20),
            nodes: vec![
                NodeSpec::named("a").with_budget(Budget::steps(4)),
                NodeSpec::named("b").with_budget(Budget::steps(4)),
            ],
            ..PlanSpec::default()
        }
        .validate()
        .expect("plan")
    }

    fn event(seq: u64, peer: usize, task: &str, kind: EventKind) -> Event {
        Event {
            seq,
            run_id: RunId::from_u128(1),
            peer: Some(peer),
            task: Some(task.into()),
            at_ms: 0,
            kind,
        }
    }

    fn dispatched(seq: u64, peer: usize, task: &str, id: u128) -> Event {
        let kind = EventKind::Dispatched {
            attempt: 1,
            worker: peer,
            task_id: TaskId::from_u128(id),
            granted: Budget::steps(4),
        };
        event(seq, peer, task, kind)
    }

    fn fresh() -> impl FnMut() -> TaskId {
        let mut next = 100;
        move || {
            next += 1;
            TaskId::from_u128(next)
        }
    }

    #[test]
    fn the_log_gives_ids_slices_views_and_the_attempt_in_flight() {
        let record = Terminal {
            node: 0,
            state: quorate_protocols::TaskState::Completed,
            result: Some(serde_json::json!(1).into()),
            evidence: Vec::new(),
            cause: None,
            by: 0,
            dropped_by: None,
        };
        let kept = KeptTerminal { record, version: 9 };
        let from = ResumeFrom {
            events: vec![
                dispatched(0, 0, "a", 7),
                event(
                    1,
                    0,
                    "a",
                    EventKind::TaskClosed {
                        spent: Budget::steps(1),
                    },
                ),
                dispatched(2, 1, "b", 8),
            ],
            results: vec![(
                format!("state/{}/a", RunId::from_u128(1)),
                serde_json::to_value(kept).expect("serializes"),
            )],
        };
        let r = rebuild(RunId::from_u128(1), plan(), None, 2, &from, fresh()).expect("rebuilt");
        assert_eq!(r.tasks, [TaskId::from_u128(7), TaskId::from_u128(8)]);
        assert_eq!(r.seq, 3);
        let (a, version) = r.terminals[0].as_ref().expect("a's record");
        assert_eq!((a.node, *version), (0, 1), "renumbered from 9");
        assert!(r.terminals[1].is_none());
        let b = r.attempts[1].expect("b is in flight");
        assert_eq!((b.peer, b.attempt, b.closed), (1, 1, None));
        assert_eq!(r.attempts[0].and_then(|a| a.closed), Some(Budget::steps(1)));
        // a's slice was returned (1 spent); b's is still out.
        assert_eq!(r.root.children.len(), 1);
    }

    #[test]
    fn a_log_that_does_not_fit_the_run_is_refused_with_a_typed_error() {
        let run = RunId::from_u128(1);
        let unknown_peer = ResumeFrom {
            events: vec![dispatched(0, 3, "a", 7)],
            results: Vec::new(),
        };
        let err = rebuild(run, plan(), None, 2, &unknown_peer, fresh()).unwrap_err();
        assert!(
            matches!(
                err,
                ResumeError::UnknownWorker {
                    worker: 3,
                    workers: 2,
                    ..
                }
            ),
            "{err}"
        );
        let other_run = rebuild(RunId::from_u128(2), plan(), None, 2, &unknown_peer, fresh());
        assert!(matches!(other_run, Err(ResumeError::WrongRun { .. })));
        let switched = ResumeFrom {
            events: Vec::new(),
            results: vec![(
                format!("plan/{run}"),
                serde_json::to_value(PlanVersion {
                    version: 2,
                    tasks: vec![TaskId::from_u128(1)],
                    by: 0,
                })
                .expect("serializes"),
            )],
        };
        let err = rebuild(run, plan(), None, 2, &switched, fresh()).unwrap_err();
        assert!(matches!(err, ResumeError::Replanned { .. }), "{err}");
        let fallback = plan().spec().clone();
        let err = rebuild(run, plan(), Some(fallback), 2, &switched, fresh()).unwrap_err();
        assert!(
            matches!(
                err,
                ResumeError::FallbackMismatch {
                    logged: 1,
                    given: 2,
                    ..
                }
            ),
            "{err}"
        );
    }
}
