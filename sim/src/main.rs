//! `quorate-sim`: runs a campaign of seeded schedules and prints what it found.
//!
//! ```text
//! quorate-sim [--schedules N] [--start SEED] [--liveness] [--volatile-books] [--seed SEED]
//! ```
//!
//! `QUORATE_SIM_SCHEDULES` sets the default of `--schedules` (10 000). `--seed S` runs one
//! schedule and prints its outcome and trace hash. Exit code 1 if any invariant broke.

use quorate_sim::{run_campaign, run_schedule, Campaign, Options, Persistence};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut schedules: u64 = std::env::var("QUORATE_SIM_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let mut start = 0;
    let mut opts = Options::default();
    let mut one = None;
    while let Some(arg) = args.next() {
        let mut num = |name: &str| -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match arg.as_str() {
            "--schedules" => schedules = num("--schedules"),
            "--start" => start = num("--start"),
            "--seed" => one = Some(num("--seed")),
            "--liveness" => opts.liveness = Some((3_000, 10_000)),
            "--volatile-books" => opts.persistence = Persistence::Volatile,
            "--trace" => opts.trace = true,
            other => {
                eprintln!("unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    if let Some(seed) = one {
        let out = run_schedule(seed, opts);
        let hash: String = out.trace_hash.iter().map(|b| format!("{b:02x}")).collect();
        println!(
            "seed {seed}: {} tasks, {} steps, stop {:?}, trace {hash}",
            out.tasks, out.steps, out.stop
        );
        for f in quorate_sim::Fault::ALL {
            if out.faults.get(f) > 0 {
                println!("  {}: {}", f.name(), out.faults.get(f));
            }
        }
        match out.violation {
            Some(v) => {
                println!("VIOLATION {v}");
                std::process::exit(1);
            }
            None => return,
        }
    }
    let report = run_campaign(&Campaign {
        start,
        schedules,
        opts,
        stop_at_first: false,
    });
    print!("{report}");
    if report.unexpected > 0 {
        std::process::exit(1);
    }
}
