//! The `quorate` command line. docs/cli.md lists every command, flag and exit code.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use cli::{BenchCommand, Cli, Command};
use quorate::plan_file::{PlanFile, PlanWarning};
use quorate::runner::{run_compiled, FileRun, RunArgs, RunFileError};
use quorate::security::{Security, SecurityArgs};
use quorate::telemetry::Tracing;

/// The runtime allocates many small, short-lived messages; mimalloc serves them at a fraction of
/// the system allocator's cost (`quorate bench dag` measures the difference).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Characters of a task's result the `quorate run` table shows (the whole one is in `--json`).
const RESULT_WIDTH: usize = 40;

/// Exit code for bad input (unreadable or invalid plan, bad flag).
const EXIT_BAD_INPUT: u8 = 2;

mod cli;
mod kept;
mod remote;
mod remote_peer;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp_endpoint = match &cli.command {
        Command::Run { otlp_endpoint, .. } => otlp_endpoint.as_deref(),
        _ => None,
    };
    let tracing = match Tracing::init(otlp_endpoint) {
        Ok(tracing) => tracing,
        Err(e) => {
            eprintln!("quorate: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let code = command(cli.command, &tracing);
    tracing.finish();
    code
}

fn command(command: Command, tracing: &Tracing) -> ExitCode {
    match command {
        Command::Check {
            plan,
            deny_warnings,
        } => check(&plan, deny_warnings),
        Command::Report { trace, output } => {
            match quorate::report::write_report(&trace, output.as_deref()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("quorate: {e}");
                    ExitCode::from(EXIT_BAD_INPUT)
                }
            }
        }
        Command::Runs {
            store,
            json,
            security,
        } => match resolve(&security) {
            Ok(security) => kept::runs(&store, &security, json),
            Err(code) => code,
        },
        Command::Worker(cli) => remote::worker(&cli),
        Command::Peer(cli) => match remote_peer::peer(&cli) {
            Ok(run) => {
                print_run(&run, cli.json, false);
                ExitCode::from(run.output.report.stop_exit_code())
            }
            Err(code) => code,
        },
        Command::Show {
            run_id,
            store,
            json,
            html,
            security,
        } => match (resolve(&security), html) {
            (Err(code), _) => code,
            (Ok(security), Some(page)) => kept::show_html(&run_id, &store, &security, &page),
            (Ok(security), None) => kept::show(&run_id, &store, &security, json),
        },
        Command::Resume {
            run_id,
            store,
            approve,
            grant,
            reject,
            json,
            trace,
            security,
            nats,
        } => {
            let security = match resolve(&security) {
                Ok(security) => security,
                Err(code) => return code,
            };
            kept::resume(
                &run_id,
                &store,
                &security,
                kept::Answers {
                    approve,
                    grant,
                    reject,
                },
                json,
                trace,
                nats.split(&store, &security),
            )
        }
        Command::Experiment(cmd) => quorate::experiment::cli::run(cmd),
        Command::Eval(args) => quorate::experiment::eval::run(args),
        Command::Bench(BenchCommand::Dag {
            layers,
            width,
            workers,
            threads,
            runs,
            no_warmup,
            result_bytes,
            cites,
            json,
            store,
            nats,
            security,
        }) => {
            let security = match resolve(&security) {
                Ok(security) => security,
                Err(code) => return code,
            };
            let args = quorate::bench_dag::DagArgs {
                layers,
                width,
                workers,
                threads,
                runs,
                warmup: !no_warmup,
                result_bytes,
                cites,
            };
            let checked = args
                .check()
                .and_then(|()| match &store {
                    Some(at) => quorate::bench_dag::check_store(at),
                    None => Ok(()),
                })
                .and_then(|()| {
                    quorate::bench_dag::check_nats(store.as_ref(), nats.as_deref(), result_bytes)
                });
            if let Err(e) = checked {
                eprintln!("quorate: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            match quorate::bench_dag::run_distributed(
                args,
                store.as_ref(),
                nats.as_deref(),
                &security,
            ) {
                Ok(b) if json => {
                    quorate::outln!("{}", serde_json::to_string(&b).expect("serializes"));
                    ExitCode::SUCCESS
                }
                Ok(b) => {
                    quorate::out!("{}", b.summary());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("quorate: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Run {
            plan,
            json,
            seed,
            chaos,
            approve,
            cancel_after_steps,
            trace,
            worker_threads,
            metrics_addr,
            metrics_hold_ms,
            otlp_endpoint: _,
            store,
            nats,
            remote_workers,
            run,
            wait_ms,
            security,
        } => {
            let security = match resolve(&security) {
                Ok(security) => security,
                Err(code) => return code,
            };
            if let Some(addr) = metrics_addr {
                if let Err(e) = quorate::telemetry::serve_metrics(addr) {
                    eprintln!("quorate: {e}");
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
            }
            let args = RunArgs {
                seed,
                chaos,
                approve: approve.unwrap_or_default(),
                cancel_after_steps,
                trace,
                worker_threads,
                durable: None,
                top_ups: Default::default(),
            };
            let hold = || {
                if let Some(ms) = metrics_hold_ms {
                    // The run's spans go out now, not after the hold.
                    tracing.flush();
                    let _ = std::io::Write::flush(&mut std::io::stdout());
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                }
            };
            if let (Some(nats), Some(workers)) = (nats, remote_workers) {
                let remote = remote::Remote {
                    nats,
                    workers,
                    run,
                    wait_ms,
                    store: store.clone(),
                    security: security.clone(),
                };
                if let Some(quorate::durable::StoreAt::File(path)) = &store {
                    // Refused before the file is made: the workers share the store of record.
                    eprintln!(
                        "quorate: --store {}: with --nats the store must be an etcd cluster, \
                         etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
                        path.display()
                    );
                    return ExitCode::from(EXIT_BAD_INPUT);
                }
                if let Some(store) = store {
                    // A kept supervisor process: `resume --nats` brings it back.
                    let split = Some(remote::Split::Start(remote));
                    return kept::run(&plan, &store, &security, args, json, &hold, split);
                }
                return match remote::supervise(&plan, &args, remote) {
                    Ok(run) => {
                        print_run(&run, json, false);
                        hold();
                        ExitCode::from(run.output.report.stop_exit_code())
                    }
                    Err(code) => code,
                };
            }
            if let Some(store) = store {
                return kept::run(&plan, &store, &security, args, json, &hold, None);
            }
            match run_plan(&plan, &args) {
                Ok(run) => {
                    print_run(&run, json, args.chaos.is_some());
                    hold();
                    ExitCode::from(run.output.report.stop_exit_code())
                }
                Err(e) => {
                    eprintln!("quorate: {e}");
                    ExitCode::from(run_error_code(&e))
                }
            }
        }
    }
}

/// The connection security the flags give; exit 2 after a message when a password variable is
/// unset or a file is missing.
fn resolve(args: &SecurityArgs) -> Result<Security, ExitCode> {
    args.resolve().map_err(|e| {
        eprintln!("quorate: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    })
}

/// Exit code of a run that could not be carried out: bad input (the plan file, the trace path)
/// is 2; a failure of the runtime itself is 8.
fn run_error_code(e: &RunFileError) -> u8 {
    use quorate::coordinator::RunError;
    match e {
        RunFileError::PlanFile(_)
        | RunFileError::UnknownApproval { .. }
        | RunFileError::Durable(_)
        | RunFileError::TopUp(_)
        | RunFileError::UnknownTopUpTask { .. }
        | RunFileError::TwoTopUpAnswers { .. }
        | RunFileError::NoModelClient
        | RunFileError::Run(
            RunError::Trace { .. }
            | RunError::NoPeers
            | RunError::Config(_)
            | RunError::WorkerRoles(_),
        ) => EXIT_BAD_INPUT,
        // A missing API key variable or a bad model name: the input.
        #[cfg(feature = "llm")]
        RunFileError::ModelTool(_) => EXIT_BAD_INPUT,
        RunFileError::Run(_) => quorate::coordinator::StopReason::EXIT_RUNTIME,
    }
}

/// Loads, compiles and runs `path` as `quorate run` does: the plan's warnings go to stderr
/// before it runs.
fn run_plan(path: &Path, args: &RunArgs) -> Result<FileRun, RunFileError> {
    let file = PlanFile::load(path)?;
    let compiled = file.compile(path)?;
    print_warnings(path, &file.warnings());
    run_compiled(path, &file, compiled, args)
}

fn print_warnings(path: &Path, warnings: &[PlanWarning]) {
    for w in warnings {
        eprintln!("quorate: warning: {}: {w}", path.display());
    }
}

fn check(path: &Path, deny_warnings: bool) -> ExitCode {
    let result = PlanFile::load(path).and_then(|f| {
        let (plan, _) = f.compile(path)?;
        Ok((plan, f.warnings()))
    });
    match result {
        Ok((plan, warnings)) => {
            print_warnings(path, &warnings);
            let verdict = match warnings.len() {
                0 => "valid".to_owned(),
                1 => "valid, 1 warning".to_owned(),
                n => format!("valid, {n} warnings"),
            };
            quorate::outln!("{}: {} tasks, {verdict}", path.display(), plan.len());
            for &i in plan.topological_order() {
                let node = plan.node(i);
                let deps: Vec<String> = node.deps.iter().map(ToString::to_string).collect();
                quorate::outln!(
                    "  {:<24} deps [{}]  budget {}",
                    node.id.to_string(),
                    deps.join(", "),
                    node.budget
                );
            }
            if deny_warnings && !warnings.is_empty() {
                eprintln!("quorate: {}: warnings denied", path.display());
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quorate: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The report as `run --json` prints it.
fn report_json(run: &FileRun) -> serde_json::Value {
    let mut value = serde_json::to_value(&run.output.report).expect("reports serialize");
    value["chaos"] = serde_json::to_value(run.output.chaos).expect("counts serialize");
    value["effects"] = serde_json::json!(run.world.effects().len());
    value
}

/// Prints the report: one JSON object, or the table (docs/cli.md, "Table output"), with the
/// chaos transport's counts when `chaos` was on.
fn print_run(run: &FileRun, json: bool, chaos: bool) {
    let r = &run.output.report;
    if json {
        quorate::outln!("{}", report_json(run));
        return;
    }
    quorate::outln!(
        "run {}  stop: {}",
        r.run_id,
        r.stop_detail.as_deref().unwrap_or("-")
    );
    quorate::outln!(
        "{:<20} {:<16} {:>8} {:>8} {:>8}  result",
        "task",
        "state",
        "attempts",
        "steps",
        "calls"
    );
    for t in &r.tasks {
        quorate::outln!(
            "{:<20} {:<16} {:>8} {:>8} {:>8}  {}",
            t.id,
            t.state.to_string(),
            t.attempts,
            format!("{}/{}", t.spent.steps, t.granted.steps),
            format!("{}/{}", t.spent.tool_calls, t.granted.tool_calls),
            quorate::report::clip(t.result.as_deref(), RESULT_WIDTH),
        );
    }
    for t in &r.tasks {
        if let Some(ask) = &t.top_up {
            quorate::outln!(
                "top-up   {} ran out of {}: needs {} more to go on; spent {} of {}; the run has {} left to grant",
                t.id,
                ask.component,
                ask.needed,
                ask.spent,
                ask.granted,
                ask.left
            );
        }
    }
    let b = &r.budget;
    quorate::outln!(
        "budget   limit {}  reserve {}  granted {}  spent {}  returned {}",
        b.limit,
        b.reserve,
        b.granted,
        b.spent,
        b.returned
    );
    let m = &r.messages;
    // Two directions: what the supervisor sent (assignments, controls) and the workers'
    // replies that reached it. They need not match: one assignment may get several replies (an
    // approval request, a `Quiet`, the answer), and chaos duplicates and re-sends.
    quorate::outln!(
        "messages to workers: sent {}  from workers: delivered {}  rejected: duplicate {} late {} stale {} unauthorized {}  acknowledged {}",
        m.sent,
        m.delivered,
        m.rejected_duplicate,
        m.rejected_late,
        m.rejected_stale,
        m.rejected_unauthorized,
        m.acknowledged
    );
    let a = &r.actions;
    quorate::outln!(
        "actions  executed {}  rejected {}  unknown {}  recovered {}  duplicate effects {}  (world effects {})",
        a.executed,
        a.rejected,
        a.unknown,
        a.recovered,
        a.duplicate_effects,
        run.world.effects().len()
    );
    if chaos {
        let c = &run.output.chaos;
        quorate::outln!(
            "chaos    messages {}  duplicated {}  reordered {}  dropped {} (each re-sent)",
            c.messages,
            c.duplicated,
            c.reordered,
            c.dropped
        );
    }
}
