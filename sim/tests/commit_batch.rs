//! The simulator commits a supervisor step's results as one batch, as the actor does, and its
//! coordinator crash can cut the step between the batch's writes and their answers: the keys are
//! then taken while the core never heard, and the resumed core must keep the stored results
//! (`result-kept`), with no invariant broken.

use quorate_sim::{run_schedule, Fault, Options, Topology};

#[test]
fn a_crash_between_a_batchs_writes_and_its_answers_resumes_to_the_kept_results() {
    let opts = Options {
        topology: Topology::Star,
        trace: true,
        ..Options::default()
    };
    let mut kept = Vec::new();
    for seed in 0..3_000 {
        let out = run_schedule(seed, opts);
        assert!(out.violation.is_none(), "seed {seed}: {:?}", out.violation);
        let trace = out.trace.as_deref().expect("the trace was asked for");
        if out.faults.get(Fault::CoordinatorCrash) > 0 && trace.contains("\"kind\":\"result-kept\"")
        {
            kept.push(seed);
        }
    }
    assert!(
        kept.len() >= 3,
        "a crash cut between a batch's writes and its answers in only {kept:?}"
    );
}
