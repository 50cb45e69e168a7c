//! Same-run baselines for criterion benches: every measured closure records its total time and
//! iteration count here, and `report` prints each subject's mean beside its baseline's and the
//! ratio, so a result never depends on numbers from another run or machine.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static TOTALS: Mutex<BTreeMap<&'static str, (Duration, u64)>> = Mutex::new(BTreeMap::new());

/// Adds one criterion sample for `name`.
pub(crate) fn record(name: &'static str, elapsed: Duration, iters: u64) {
    let mut t = TOTALS.lock().unwrap();
    let e = t.entry(name).or_default();
    e.0 += elapsed;
    e.1 += iters;
}

/// Runs `f` once, timed, records the time as `iters` iterations of `name` and returns it (for
/// `iter_custom`, where `f` does the `iters` operations itself).
pub(crate) fn timed(name: &'static str, iters: u64, f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    let elapsed = start.elapsed();
    record(name, elapsed, iters);
    elapsed
}

/// Like [`timed`], for one operation: runs `f` `iters` times (each result through `black_box`).
#[allow(dead_code)] // Not every bench that includes this file calls it.
pub(crate) fn timed_each<T>(name: &'static str, iters: u64, mut f: impl FnMut() -> T) -> Duration {
    timed(name, iters, || {
        for _ in 0..iters {
            black_box(f());
        }
    })
}

fn mean_ns(name: &str) -> Option<f64> {
    let t = TOTALS.lock().unwrap();
    t.get(name)
        .filter(|(_, n)| *n > 0)
        .map(|(d, n)| d.as_nanos() as f64 / *n as f64)
}

/// Prints `subject / baseline` for each pair (and a target if given), and returns the ratios.
pub(crate) fn report(title: &str, pairs: &[(&str, &str, Option<f64>)]) {
    println!("\n== {title}: ratio to a baseline measured in the same run ==");
    println!(
        "{:<34} {:>12} {:<34} {:>12} {:>8}  target",
        "subject", "ns/op", "baseline", "ns/op", "ratio"
    );
    for &(subject, baseline, target) in pairs {
        let (Some(s), Some(b)) = (mean_ns(subject), mean_ns(baseline)) else {
            println!("{subject:<34} (not run; filtered out?)");
            continue;
        };
        let ratio = s / b;
        let verdict = match target {
            Some(t) if ratio <= t => format!("<= {t} ok"),
            Some(t) => format!("<= {t} MISSED"),
            None => String::new(),
        };
        println!("{subject:<34} {s:>12.1} {baseline:<34} {b:>12.1} {ratio:>8.2}  {verdict}");
    }
}
