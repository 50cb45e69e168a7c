//! Experiment 3: makespan of task DAGs under a list scheduler, on a virtual clock.
//!
//! A [`Dag`] has tasks with durations and dependencies; every dependency edge costs a hand-off
//! (the result travels as a message before the dependent may start, whichever worker picks it
//! up). [`simulate`] runs a greedy list scheduler with `W` workers on an event queue in integer
//! milliseconds (exact, no sleeping): whenever a worker is free and a task is ready, the ready
//! task with the longest remaining path (its bottom level) starts, ties by declaration order.
//!
//! The lower bound is `max(critical path, total work / W)`: no schedule beats the longest
//! chain of durations and hand-offs, nor the work spread perfectly over `W` workers. Graham's
//! bound says a list schedule is within `2 - 1/W` of the optimum.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One task of a DAG file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique id.
    pub id: String,
    /// Duration in seconds.
    pub duration_s: f64,
    /// Ids of the tasks it needs.
    #[serde(default)]
    pub deps: Vec<String>,
    /// Hand-off cost of each of its incoming edges, overriding the DAG's default.
    #[serde(default)]
    pub handoff_s: Option<f64>,
}

/// A DAG file (TOML or JSON): `name`, default `handoff_s`, and `[[task]]` entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DagSpec {
    /// Name used in output.
    pub name: String,
    /// Default hand-off cost per dependency edge, in seconds.
    #[serde(default)]
    pub handoff_s: f64,
    /// The tasks.
    #[serde(rename = "task")]
    pub tasks: Vec<TaskSpec>,
}

/// A checked DAG in milliseconds, tasks in topological order.
#[derive(Clone, Debug, PartialEq)]
pub struct Dag {
    /// Name.
    pub name: String,
    ids: Vec<String>,
    duration: Vec<u64>,
    /// `(dependency, hand-off ms)` per task.
    deps: Vec<Vec<(usize, u64)>>,
}

/// A DAG file or spec was invalid.
#[derive(Debug, thiserror::Error)]
pub enum DagError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file did not parse.
    #[error("{path}: {message}")]
    Parse {
        /// The path.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// Two tasks share an id.
    #[error("task id {0:?} is used twice")]
    DuplicateId(String),
    /// A dependency names no task.
    #[error("task {task:?} depends on unknown task {dep:?}")]
    UnknownDep {
        /// The task.
        task: String,
        /// The missing dependency.
        dep: String,
    },
    /// A duration or hand-off is negative or not finite.
    #[error("task {task:?}: {what} must be a finite number of seconds >= 0, got {value}")]
    BadTime {
        /// The task.
        task: String,
        /// Which number.
        what: &'static str,
        /// The value.
        value: f64,
    },
    /// The dependencies form a cycle.
    #[error("the dependencies form a cycle through {0:?}")]
    Cycle(String),
    /// No tasks.
    #[error("the DAG has no tasks")]
    Empty,
}

fn ms(task: &str, what: &'static str, value: f64) -> Result<u64, DagError> {
    if value.is_finite() && value >= 0.0 {
        Ok((value * 1000.0).round() as u64)
    } else {
        Err(DagError::BadTime {
            task: task.to_owned(),
            what,
            value,
        })
    }
}

impl Dag {
    /// Checks `spec` and orders its tasks topologically.
    pub fn from_spec(spec: &DagSpec) -> Result<Self, DagError> {
        if spec.tasks.is_empty() {
            return Err(DagError::Empty);
        }
        let mut index = BTreeMap::new();
        for (i, t) in spec.tasks.iter().enumerate() {
            if index.insert(t.id.clone(), i).is_some() {
                return Err(DagError::DuplicateId(t.id.clone()));
            }
        }
        // Kahn's algorithm, keeping declaration order among ready tasks.
        let count = spec.tasks.len();
        let mut indegree = vec![0usize; count];
        let mut users = vec![Vec::new(); count];
        for (i, t) in spec.tasks.iter().enumerate() {
            for d in &t.deps {
                let &j = index.get(d).ok_or_else(|| DagError::UnknownDep {
                    task: t.id.clone(),
                    dep: d.clone(),
                })?;
                indegree[i] += 1;
                users[j].push(i);
            }
        }
        let mut order = Vec::with_capacity(count);
        let mut ready: std::collections::BTreeSet<usize> =
            (0..count).filter(|&i| indegree[i] == 0).collect();
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &u in &users[i] {
                indegree[u] -= 1;
                if indegree[u] == 0 {
                    ready.insert(u);
                }
            }
        }
        if order.len() < count {
            let stuck = (0..count).find(|&i| indegree[i] > 0).unwrap_or(0);
            return Err(DagError::Cycle(spec.tasks[stuck].id.clone()));
        }
        let position: BTreeMap<usize, usize> =
            order.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        let mut dag = Dag {
            name: spec.name.clone(),
            ids: Vec::new(),
            duration: Vec::new(),
            deps: Vec::new(),
        };
        for &i in &order {
            let t = &spec.tasks[i];
            dag.ids.push(t.id.clone());
            dag.duration.push(ms(&t.id, "duration_s", t.duration_s)?);
            let handoff = ms(&t.id, "handoff_s", t.handoff_s.unwrap_or(spec.handoff_s))?;
            dag.deps.push(
                t.deps
                    .iter()
                    .map(|d| (position[&index[d]], handoff))
                    .collect(),
            );
        }
        Ok(dag)
    }

    /// Reads a TOML (`.toml`) or JSON (anything else) DAG file.
    pub fn load(path: &Path) -> Result<Self, DagError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| DagError::Read {
            path: shown.clone(),
            source,
        })?;
        let spec: DagSpec = if path.extension().is_some_and(|e| e == "toml") {
            toml::from_str(&text).map_err(|e| DagError::Parse {
                path: shown.clone(),
                message: e.to_string(),
            })?
        } else {
            serde_json::from_str(&text).map_err(|e| DagError::Parse {
                path: shown.clone(),
                message: e.to_string(),
            })?
        };
        Self::from_spec(&spec)
    }

    /// Number of tasks.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no tasks (never true for a checked DAG).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Sum of durations, ms.
    #[must_use]
    pub fn total_work_ms(&self) -> u64 {
        self.duration.iter().sum()
    }

    /// Longest chain of durations and hand-offs, ms.
    #[must_use]
    pub fn critical_path_ms(&self) -> u64 {
        let mut finish = vec![0u64; self.len()];
        for i in 0..self.len() {
            let start = self.deps[i]
                .iter()
                .map(|&(d, h)| finish[d] + h)
                .max()
                .unwrap_or(0);
            finish[i] = start + self.duration[i];
        }
        finish.into_iter().max().unwrap_or(0)
    }

    /// Longest path from each task's start to the end (its priority).
    fn bottom_levels(&self) -> Vec<u64> {
        let mut level = self.duration.clone();
        for i in (0..self.len()).rev() {
            for &(d, h) in &self.deps[i] {
                level[d] = level[d].max(self.duration[d] + h + level[i]);
            }
        }
        level
    }
}

/// One task as scheduled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Slot {
    /// Task id.
    pub task: String,
    /// Worker (0-based).
    pub worker: usize,
    /// Start, ms.
    pub start_ms: u64,
    /// End, ms.
    pub end_ms: u64,
}

/// Makespan and bounds of one (DAG, W).
#[derive(Clone, Debug, Serialize)]
pub struct ScheduleRow {
    /// DAG name.
    pub dag: String,
    /// Tasks.
    pub tasks: usize,
    /// Workers.
    pub workers: usize,
    /// Makespan of the list schedule, seconds.
    pub makespan_s: f64,
    /// Critical path (durations and hand-offs), seconds.
    pub critical_path_s: f64,
    /// Total work / W, seconds.
    pub work_per_worker_s: f64,
    /// max(critical path, work / W), seconds.
    pub lower_bound_s: f64,
    /// makespan / lower bound (1 is optimal).
    pub ratio: f64,
    /// The schedule.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<Slot>,
}

/// Runs the list scheduler on `workers` workers (at least 1) and returns the schedule.
#[must_use]
pub fn simulate(dag: &Dag, workers: usize) -> Vec<Slot> {
    let workers = workers.max(1);
    let level = dag.bottom_levels();
    let count = dag.len();
    let mut end = vec![None::<u64>; count];
    let mut started = vec![false; count];
    let mut free: Vec<usize> = (0..workers).rev().collect();
    // (end time, task, worker), earliest first.
    let mut running: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    let mut slots = Vec::with_capacity(count);
    let mut now = 0u64;
    loop {
        // Finish everything that ends now.
        while let Some(&Reverse((t, task, worker))) = running.peek() {
            if t > now {
                break;
            }
            running.pop();
            end[task] = Some(t);
            free.push(worker);
        }
        // Ready at `now`: all deps ended and hand-offs arrived.
        let ready_at = |i: usize| -> Option<u64> {
            dag.deps[i]
                .iter()
                .map(|&(d, h)| end[d].map(|e| e + h))
                .try_fold(0u64, |acc, t| t.map(|t| acc.max(t)))
        };
        let mut ready: Vec<usize> = (0..count)
            .filter(|&i| !started[i] && ready_at(i).is_some_and(|t| t <= now))
            .collect();
        ready.sort_by_key(|&i| (Reverse(level[i]), i));
        free.sort_unstable_by(|a, b| b.cmp(a));
        for task in ready {
            let Some(worker) = free.pop() else { break };
            started[task] = true;
            let stop = now + dag.duration[task];
            running.push(Reverse((stop, task, worker)));
            slots.push(Slot {
                task: dag.ids[task].clone(),
                worker,
                start_ms: now,
                end_ms: stop,
            });
        }
        // Next event: a task ends or a hand-off arrives.
        let next_end = running.peek().map(|Reverse((t, _, _))| *t);
        let next_handoff = (0..count)
            .filter(|&i| !started[i])
            .filter_map(ready_at)
            .filter(|&t| t > now)
            .min();
        match (next_end, next_handoff) {
            (None, None) => break,
            (a, b) => now = a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)),
        }
    }
    slots
}

/// Schedules `dag` on `workers` workers and compares with the lower bound.
#[must_use]
pub fn evaluate(dag: &Dag, workers: usize, keep_schedule: bool) -> ScheduleRow {
    let workers = workers.max(1);
    let slots = simulate(dag, workers);
    let makespan = slots.iter().map(|s| s.end_ms).max().unwrap_or(0);
    let cp = dag.critical_path_ms();
    let work = dag.total_work_ms() as f64 / workers as f64;
    let lb = (cp as f64).max(work);
    ScheduleRow {
        dag: dag.name.clone(),
        tasks: dag.len(),
        workers,
        makespan_s: makespan as f64 / 1e3,
        critical_path_s: cp as f64 / 1e3,
        work_per_worker_s: work / 1e3,
        lower_bound_s: lb / 1e3,
        ratio: if lb > 0.0 { makespan as f64 / lb } else { 1.0 },
        schedule: if keep_schedule { slots } else { Vec::new() },
    }
}

fn task(id: &str, duration_s: f64, deps: &[&str]) -> TaskSpec {
    TaskSpec {
        id: id.to_owned(),
        duration_s,
        deps: deps.iter().map(|d| (*d).to_owned()).collect(),
        handoff_s: None,
    }
}

fn spec(name: &str, handoff_s: f64, tasks: Vec<TaskSpec>) -> DagSpec {
    DagSpec {
        name: name.to_owned(),
        handoff_s,
        tasks,
    }
}

/// The built-in DAGs: the seed's two examples, the same with a 1 s hand-off, a fan-out, a
/// diamond chain and a layered graph.
#[must_use]
pub fn builtin_specs() -> Vec<DagSpec> {
    let parallel = vec![
        task("a", 6.0, &[]),
        task("b", 8.0, &[]),
        task("merge", 2.0, &["a", "b"]),
    ];
    let chained = vec![
        task("a", 6.0, &[]),
        task("b", 8.0, &["a"]),
        task("merge", 2.0, &["a", "b"]),
    ];
    let mut fan = vec![task("split", 1.0, &[])];
    let leaves: Vec<String> = (0..8).map(|i| format!("leaf{i}")).collect();
    for (i, id) in leaves.iter().enumerate() {
        fan.push(task(id, 2.0 + i as f64, &["split"]));
    }
    let leaf_refs: Vec<&str> = leaves.iter().map(String::as_str).collect();
    fan.push(task("join", 1.0, &leaf_refs));
    let diamonds = vec![
        task("s", 1.0, &[]),
        task("l1", 3.0, &["s"]),
        task("r1", 5.0, &["s"]),
        task("m1", 1.0, &["l1", "r1"]),
        task("l2", 4.0, &["m1"]),
        task("r2", 2.0, &["m1"]),
        task("m2", 1.0, &["l2", "r2"]),
    ];
    let mut layered = Vec::new();
    for layer in 0..4 {
        for k in 0..4 {
            let id = format!("t{layer}{k}");
            let deps: Vec<String> = if layer == 0 {
                Vec::new()
            } else {
                vec![
                    format!("t{}{}", layer - 1, k),
                    format!("t{}{}", layer - 1, (k + 1) % 4),
                ]
            };
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            layered.push(task(&id, (1 + (layer * 4 + k) % 5) as f64, &deps));
        }
    }
    vec![
        spec("parallel-merge", 0.0, parallel.clone()),
        spec("chain-merge", 0.0, chained),
        spec("parallel-merge-handoff-1s", 1.0, parallel),
        spec("fan-out-8", 0.0, fan),
        spec("diamond-chain", 0.5, diamonds),
        spec("layered-4x4", 0.0, layered),
    ]
}

/// The built-in DAGs, checked.
#[must_use]
pub fn builtin() -> Vec<Dag> {
    builtin_specs()
        .iter()
        .filter_map(|s| Dag::from_spec(s).ok())
        .collect()
}
