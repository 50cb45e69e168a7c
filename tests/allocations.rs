//! Heap allocations per task on the star path, counted by a global allocator (issue 14: a lean
//! per-task path). Runs the bench's layered DAG at two sizes in one process and takes the
//! difference, so that what a run costs once (the actor system, the plan, the registries) drops
//! out and what each further task costs stays.
//!
//! What a task allocates today, and why each one is there: three things the run keeps until
//! it ends: the result's key in the result store, the shared record of its evidence, and the
//! evidence list its agent wrote (the agent's own allocation).
//!
//! Its two messages allocate nothing once the run is under way: the assignment and the
//! worker's reply each travel in a box (an `Envelope` of a few hundred bytes moving from one
//! actor to another) that is handed back and reused (`quorate_protocols::BoxPool`); the batch
//! messages that carry them, and the lists of boxes handed back, are shared by up to
//! `quorate_workers::BATCH` envelopes.
//!
//! Nothing else: not the inputs (held inline in the assignment for up to two dependencies), not
//! a node id or the role (held inline), not the goal (shared with the plan), not the agent (it
//! holds nothing), not an empty evidence list, not a task id, not the store's batch of a
//! drive's commits (one list per drive, not per task). A new per-task allocation anywhere on the
//! path fails the test.

use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

use quorate::bench_dag::{answer_agent, layered_plan, Cites};
use quorate::coordinator::{run_star, ApprovalPolicy, RunOptions, SupervisorConfig};
use quorate::workers::{AgentRegistry, ToolRegistry};

/// Counts every allocation of the process (and every reallocation, which may move).
#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Allocations made by one completed star run of the `layers` x `width` layered DAG over
/// `workers` workers (the plan is built before counting starts).
fn allocations_of_run(layers: usize, width: usize, workers: usize) -> u64 {
    let plan = layered_plan(layers, width, Cites::Inputs)
        .validate()
        .expect("a valid plan");
    let options = RunOptions {
        supervisor: SupervisorConfig {
            workers,
            attempt_timeout_ms: 600_000,
            approvals: ApprovalPolicy::None,
            ..SupervisorConfig::default()
        },
        ..RunOptions::default()
    };
    let region = Region::new(GLOBAL);
    let out = run_star(plan, options, || {
        (
            // The bench's agent, answering numbers.
            AgentRegistry::new()
                .with_fallback(|_: &quorate::workers::Assignment| answer_agent(0, Cites::Inputs)),
            ToolRegistry::new(),
        )
    })
    .expect("the run starts");
    let counted = region.change();
    assert_eq!(
        out.report.stop_reason.as_deref(),
        Some("completed"),
        "{:?}",
        out.report.stop_detail
    );
    assert_eq!(out.report.tasks.len(), layers * width);
    (counted.allocations + counted.reallocations) as u64
}

/// Allocations per task beyond a run's fixed cost: runs of 1 000 and 4 000 tasks.
fn per_further_task(workers: usize) -> f64 {
    let (small, large) = ((10, 100), (40, 100));
    let a = allocations_of_run(small.0, small.1, workers);
    let b = allocations_of_run(large.0, large.1, workers);
    let tasks = (large.0 * large.1 - small.0 * small.1) as f64;
    let per_task = (b as f64 - a as f64) / tasks;
    eprintln!(
        "{workers} worker(s): {a} allocations for 1 000 tasks, {b} for 4 000: \
         {per_task:.3} per further task"
    );
    per_task
}

#[test]
fn a_task_allocates_only_what_the_run_keeps_of_it() {
    // Warm up whatever is made once per process (thread-locals, the id source, tracing).
    allocations_of_run(2, 50, 1);
    // 3 = what the run keeps (see the module doc); it was 5 while the two message boxes were
    // allocated per task. The fraction above it is what grows with the run in amortized steps
    // (the log's chunks, the store's table) and the messages: an actix message, its batch and
    // the boxes it hands back are three allocations for up to `quorate_workers::BATCH`
    // envelopes.
    let one = per_further_task(1);
    assert!(
        (2.75..=3.4).contains(&one),
        "{one:.3} allocations per task with one worker: not the three this test explains \
         (message boxes no longer reused?)"
    );
    // With several workers the supervisor still sends one batch per worker per drained
    // mailbox, not one per reply batch it handled (which made it 11 per task with 4 workers).
    let four = per_further_task(4);
    assert!(
        (2.75..=3.6).contains(&four),
        "{four:.3} allocations per task with four workers: messages no longer batched?"
    )
}
