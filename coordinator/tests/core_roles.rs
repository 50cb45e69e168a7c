//! Worker roles in the supervisor core: a task goes only to a live worker serving its plan
//! node's role (a worker given no roles serves every role); failover moves it only to such a
//! worker, and with none live the task waits without holding back the others.

mod support;

use quorate_coordinator::{InputRefused, SupervisorConfig};
use quorate_protocols::{NodeSpec, TaskState};

use support::{node, Harness};

fn role(id: &str, role: &str) -> NodeSpec {
    node(id, &[]).with_role(role)
}

/// A harness of two workers serving `roles` (by worker index).
fn serving(nodes: Vec<NodeSpec>, roles: [&[&str]; 2]) -> Harness {
    Harness::with_setup(nodes, SupervisorConfig::default(), |core| {
        for (w, r) in roles.iter().enumerate() {
            let r = r.iter().map(|s| s.to_string()).collect();
            core.set_worker_roles(w, r).expect("a worker of the run");
        }
    })
}

/// The role of the node each dispatched assignment is for, with its worker.
fn dispatched_roles(h: &Harness) -> Vec<(usize, String)> {
    h.dispatched
        .iter()
        .map(|(w, e)| {
            let i = (0..h.core.plan().len() as u32)
                .find(|&i| h.core.task_id(i) == e.task)
                .expect("a task of the plan");
            (*w, h.core.plan().node(i).role.to_string())
        })
        .collect()
}

#[test]
fn a_task_goes_only_to_a_worker_serving_its_role() {
    let nodes = vec![
        role("a1", "alpha"),
        role("b1", "beta"),
        role("a2", "alpha"),
        role("a3", "alpha"),
        role("b2", "beta"),
    ];
    let h = serving(nodes, [&["beta"], &["alpha", "gamma"]]);
    let got = dispatched_roles(&h);
    assert_eq!(got.len(), 5, "every task was dispatched");
    for (w, r) in &got {
        assert!(h.core.worker_serves(*w, r), "worker {w} got a {r} task");
    }
    assert_eq!(got.iter().filter(|(w, _)| *w == 1).count(), 3);
}

#[test]
fn failover_moves_a_task_only_to_a_live_worker_serving_its_role() {
    // Worker 0 serves alpha only; worker 1 was given no roles: it serves every role.
    let mut h = serving(
        vec![role("a", "alpha"), role("b", "beta")],
        [&["alpha"], &[]],
    );
    assert_eq!((h.assignment("a").0, h.assignment("b").0), (0, 1));
    // Worker 0 lost: its alpha task moves to worker 1, which serves every role.
    h.core.handle_worker_lost(5, 0).unwrap();
    h.drain();
    assert_eq!(h.assignment("a").0, 1);
    // Worker 0 back, worker 1 lost: a moves back to 0; b (beta) has nowhere to go and waits.
    h.core.handle_worker_renewed(6, 0).unwrap();
    h.core.handle_worker_lost(7, 1).unwrap();
    h.drain();
    assert_eq!(h.assignment("a").0, 0);
    assert_eq!(h.dispatched.len(), 4, "b is not sent to worker 0");
    assert_eq!(h.state(1), TaskState::Ready);
    // Retries after a timeout keep to the role too.
    let timeout = h.config.attempt_timeout_ms;
    h.tick(7 + timeout);
    assert!(dispatched_roles(&h)[4..]
        .iter()
        .all(|(w, r)| *w == 0 && r == "alpha"));
    // Worker 1 renews: b goes to it.
    let before = h.dispatched.len();
    h.core.handle_worker_renewed(8 + timeout, 1).unwrap();
    h.drain();
    assert_eq!(h.dispatched.len(), before + 1);
    assert_eq!(h.assignment("b").0, 1);
}

#[test]
fn a_task_no_worker_serves_waits_without_holding_back_the_others() {
    let nodes = vec![role("b", "beta"), role("a", "alpha"), role("c", "alpha")];
    let h = serving(nodes, [&["alpha"], &["gamma"]]);
    assert_eq!(
        dispatched_roles(&h),
        vec![(0, "alpha".to_string()), (0, "alpha".to_string())]
    );
    assert_eq!(
        h.state(0),
        TaskState::Ready,
        "b waits for a worker serving beta"
    );
}

#[test]
fn roles_name_a_worker_of_the_run() {
    let mut h = serving(vec![role("a", "alpha")], [&[], &[]]);
    assert_eq!(
        h.core.set_worker_roles(2, vec!["alpha".into()]),
        Err(InputRefused::UnknownWorker {
            worker: 2,
            workers: 2
        })
    );
    assert!(h.core.worker_serves(0, "anything"));
    assert!(!h.core.worker_serves(2, "alpha"), "no such worker");
}
