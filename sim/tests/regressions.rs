//! Seeds the long runs found violating, kept as regressions.

use quorate_sim::{run_schedule, Fault, Options};

/// Seed 860 677 (found by the 1 000 000-schedule run): worker 0 waits for a human's approval on
/// attempt 2 of `n1` and has not called anything yet (no action book in the store); it pauses
/// past its lease and `n1` goes to worker 1 as attempt 3. When worker 0 comes back, the held
/// `Approve` of attempt 2 arrives and it calls the non-idempotent tool; worker 1's attempt 3,
/// approved later, calls the same action again: two effects for one `ActionId`. A new attempt
/// now claims the task's book in the store even when none was written yet, so attempt 2's write
/// before its call is fenced off.
#[test]
fn a_paused_attempt_without_a_book_is_fenced_off_by_the_next_attempt() {
    let out = run_schedule(860_677, Options::default());
    assert!(out.violation.is_none(), "{:?}", out.violation);
    assert!(!out.peer);
    assert!(out.faults.get(Fault::WorkerPaused) > 0);
    assert!(out.faults.get(Fault::Fenced) > 0, "{:?}", out.faults);
}
