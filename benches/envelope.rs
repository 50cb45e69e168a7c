//! Envelope encode and bounded decode beside plain serde_json, measured in the same run.
//!
//! `cargo bench --bench envelope`. The difference is the cost of the pre-parse limits scan and
//! the sender check.

use std::hint::black_box;
use std::time::Duration;

use criterion::Criterion;
use quorate_protocols::{
    decode_envelope, encode_envelope, Envelope, EvidenceRef, IdSource, Limits, ResultKind, Role,
    Sender, Version,
};

#[path = "support/ratio.rs"]
mod ratio;

use ratio::timed_each;

fn sample() -> (Envelope<serde_json::Value>, Sender) {
    let mut ids = IdSource::seeded(1);
    let sender = Sender {
        agent: ids.agent_id(),
        role: Role::Worker,
    };
    let (run, task) = (ids.run_id(), ids.task_id());
    let mut e = Envelope::new(
        run,
        task,
        sender,
        serde_json::json!({"answer": "42 units in stock", "confidence": 0.93, "rows": [1, 2, 3]}),
        &mut ids,
    );
    e.result_kind = Some(ResultKind::VerifiedConclusion);
    e.parent = Some(ids.task_id());
    e.evidence = (0..4)
        .map(|i| EvidenceRef::Record {
            key: format!("memory/inventory/{i}"),
            version: Version::new(i),
        })
        .collect();
    (e, sender)
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let (env, sender) = sample();
    let bytes = encode_envelope(&env);
    let limits = Limits::default();
    let mut g = c.benchmark_group("envelope");
    g.bench_function("encode", |b| {
        b.iter_custom(|n| timed_each("encode", n, || encode_envelope(black_box(&env))))
    });
    g.bench_function("serde_json::to_vec", |b| {
        b.iter_custom(|n| {
            timed_each("serde_json::to_vec", n, || {
                serde_json::to_vec(black_box(&env)).unwrap()
            })
        })
    });
    g.bench_function("decode_envelope", |b| {
        b.iter_custom(|n| {
            timed_each("decode_envelope", n, || {
                decode_envelope::<serde_json::Value>(black_box(&bytes), &limits, sender).unwrap()
            })
        })
    });
    g.bench_function("serde_json::from_slice", |b| {
        b.iter_custom(|n| {
            timed_each("serde_json::from_slice", n, || {
                serde_json::from_slice::<Envelope<serde_json::Value>>(black_box(&bytes)).unwrap()
            })
        })
    });
    g.finish();
    c.final_summary();
    println!("envelope size: {} bytes", bytes.len());
    ratio::report(
        "bounded envelope codec vs plain serde_json",
        &[
            ("encode", "serde_json::to_vec", None),
            ("decode_envelope", "serde_json::from_slice", None),
        ],
    );
}
