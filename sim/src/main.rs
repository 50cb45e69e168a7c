//! `quorate-sim`: runs a campaign of seeded schedules and prints what it found.
//!
//! ```text
//! quorate-sim [--schedules N] [--start SEED] [--liveness] [--volatile-books] [--topology star|peer|both]
//!             [--seed SEED] [--trace]
//! ```
//!
//! `QUORATE_SIM_SCHEDULES` sets the default of `--schedules` (10 000). `--seed S` runs one
//! schedule and prints its outcome and trace hash; with `--trace`, first its trace: one line per
//! delivery, tick and event, with their ids (the same seed prints the same bytes). Exit code 1
//! if any invariant broke, 2 for a bad argument.

use clap::Parser;
use quorate_sim::{run_campaign, run_schedule, Campaign, Options, Persistence, Topology};

/// Seeded schedules over the real supervisor, worker and store cores with network, crash and
/// tool faults; the invariants are checked after every step.
#[derive(Parser, Debug)]
#[command(name = "quorate-sim")]
struct Args {
    /// Schedules to run [default: $QUORATE_SIM_SCHEDULES, else 10000]
    #[arg(long)]
    schedules: Option<u64>,
    /// Seed of the first schedule (the campaign runs seeds start..start+schedules)
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Run this one schedule and print its outcome, its faults and its trace hash
    #[arg(long)]
    seed: Option<u64>,
    /// Liveness mode: faults stop at 3 s of simulated time and every task must be terminal
    /// 10 s later
    #[arg(long)]
    liveness: bool,
    /// A crashed worker restarts empty (its action records are lost) instead of durable
    #[arg(long)]
    volatile_books: bool,
    /// With --seed: print the schedule's trace first, one line per delivery, tick and event,
    /// each with its ids (run, task, attempt, dedupe key, correlation id; events as trace-file
    /// JSON lines). The same seed prints the same bytes; the trace hash covers these lines
    #[arg(long, requires = "seed")]
    trace: bool,
    /// Which topology the schedules run: `star` (the supervisor core dispatches), `peer` (peer
    /// cores claim tasks by CAS over shared stores, each with its own worker), or `both` (each
    /// seed draws its own: one schedule in four in peer mode)
    #[arg(long, value_enum, default_value_t = TopologyArg::Both)]
    topology: TopologyArg,
}

/// `--topology`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum TopologyArg {
    Star,
    Peer,
    Both,
}

fn main() {
    let args = Args::parse();
    let schedules = args.schedules.unwrap_or_else(|| {
        std::env::var("QUORATE_SIM_SCHEDULES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000)
    });
    let mut opts = Options::default();
    if args.liveness {
        opts.liveness = Some((3_000, 10_000));
    }
    if args.volatile_books {
        opts.persistence = Persistence::Volatile;
    }
    opts.trace = args.trace;
    opts.topology = match args.topology {
        TopologyArg::Star => Topology::Star,
        TopologyArg::Peer => Topology::Peer,
        TopologyArg::Both => Topology::Both,
    };
    if let Some(seed) = args.seed {
        let out = run_schedule(seed, opts);
        if let Some(trace) = &out.trace {
            print!("{trace}");
        }
        let hash: String = out.trace_hash.iter().map(|b| format!("{b:02x}")).collect();
        let topology = if out.peer { "peer" } else { "star" };
        println!(
            "seed {seed}: {topology}, {} tasks, {} steps, stop {:?}, trace {hash}",
            out.tasks, out.steps, out.stop
        );
        for f in quorate_sim::Fault::ALL {
            if out.faults.get(f) > 0 {
                println!("  {}: {}", f.name(), out.faults.get(f));
            }
        }
        if let Some(v) = out.violation {
            println!("VIOLATION {v}");
            std::process::exit(1);
        }
        return;
    }
    let report = run_campaign(&Campaign {
        start: args.start,
        schedules,
        opts,
        stop_at_first: false,
    });
    print!("{report}");
    if report.unexpected > 0 {
        std::process::exit(1);
    }
}
