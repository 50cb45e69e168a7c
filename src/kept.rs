//! `quorate run --store`, `runs`, `resume` and `show`: runs kept in a store file or on etcd.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use quorate::durable::{
    resume_events, unix_ms, ApprovalGiven, DurableError, RunRecord, RunStore, StoreAt, TopUpGiven,
};
use quorate::plan_file::{PlanFile, Topology};

/// Why a peer run that stopped waiting for an approval does not resume.
const PEER_PARKED: &str = "a peer run cannot take an approval after it stopped (the parked \
     task's terminal record is final in peer mode): run the plan again with --approve";
use quorate::runner::{
    check_top_ups, run_compiled, top_up_policy, Approve, DurableArgs, FileRun, Grant, RunArgs,
    RunFileError,
};
use quorate::security::Security;
use quorate::state::StoreError;
use quorate_coordinator::ResumeFrom;

use super::remote::Split;
use super::{print_run, print_warnings, report_json, run_error_code, EXIT_BAD_INPUT};

fn fail(e: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("quorate: {e}");
    ExitCode::from(code)
}

/// The exit code of a store that could not be opened or read: 8 (the runtime could not go on)
/// for a cluster that does not answer, 2 (bad input) for the rest (an unusable file, an unknown
/// run).
fn store_code(e: &DurableError) -> u8 {
    match e {
        DurableError::Store(StoreError::Unavailable { .. }) => {
            quorate_coordinator::StopReason::EXIT_RUNTIME
        }
        _ => EXIT_BAD_INPUT,
    }
}

fn approve_text(a: &Approve) -> Option<String> {
    match a {
        Approve::Ask => None,
        Approve::All => Some("all".into()),
        Approve::None => Some("none".into()),
        Approve::Tasks(ids) => {
            let mut ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            ids.sort_unstable();
            Some(ids.join(","))
        }
    }
}

/// `quorate run PLAN --store FILE`; `after_report` is called once the run's report is on
/// stdout (`--metrics-hold-ms`).
/// With `split`, the run's supervisor is a process of its own over NATS (`--nats`).
pub(crate) fn run(
    plan: &Path,
    store: &StoreAt,
    security: &Security,
    mut args: RunArgs,
    json: bool,
    after_report: &dyn Fn(),
    split: Option<Split>,
) -> ExitCode {
    let run_id = match &split {
        Some(Split::Start(remote)) => match super::remote::run_id(remote) {
            Ok(run) => run,
            Err(code) => return code,
        },
        _ => quorate_workers::edge::random_ids().run_id(),
    };
    let loaded = std::fs::read_to_string(plan)
        .map_err(|source| quorate::plan_file::PlanFileError::Read {
            path: plan.to_path_buf(),
            source,
        })
        .and_then(|text| PlanFile::parse(plan, &text).map(|f| (f, text)));
    let (file, text) = match loaded {
        Ok(found) => found,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if let Err(e) = args.approve.check(&[(plan, &file)]) {
        return fail(e, EXIT_BAD_INPUT);
    }
    let kept = match RunStore::open_at(store, security) {
        Ok(kept) => kept,
        Err(e) => {
            let code = store_code(&e);
            return fail(e, code);
        }
    };
    let at = unix_ms();
    let mut record = RunRecord {
        run_id,
        plan_path: plan.display().to_string(),
        plan_text: text,
        started_unix_ms: at,
        approvals: approve_text(&args.approve)
            .map(|approve| ApprovalGiven {
                approve,
                at_unix_ms: at,
            })
            .into_iter()
            .collect(),
        top_ups: Vec::new(),
        report: None,
        exit_code: None,
        processes: None,
    };
    args.durable = Some(DurableArgs {
        store: kept.clone(),
        run: record.run_id,
        resume: None,
        intents: Vec::new(),
        effects: Vec::new(),
    });
    go(
        &kept,
        &mut record,
        &args,
        json,
        after_report,
        split.as_ref(),
    )
}

/// Runs (or continues) `record`'s run and keeps its report: here, or with `split` as a
/// supervisor process over NATS.
fn go(
    kept: &RunStore,
    record: &mut RunRecord,
    args: &RunArgs,
    json: bool,
    after_report: &dyn Fn(),
    split: Option<&Split>,
) -> ExitCode {
    if let Err(e) = kept.put_run(record) {
        return fail(e, quorate_coordinator::StopReason::EXIT_RUNTIME);
    }
    let path = PathBuf::from(&record.plan_path);
    let compiled = PlanFile::parse(&path, &record.plan_text)
        .and_then(|file| file.compile(&path).map(|c| (file, c)));
    let peer = compiled
        .as_ref()
        .is_ok_and(|(file, _)| file.run.topology == Topology::Peer);
    let result = match compiled {
        Err(e) => Err(RunFileError::from(e)),
        Ok((file, compiled)) => {
            print_warnings(&path, &file.warnings());
            match split {
                None => run_compiled(&path, &file, compiled, args),
                Some(split) => {
                    match super::remote::supervise_kept(&path, &file, args, split, record) {
                        Ok(run) => Ok(run),
                        Err(code) => return code,
                    }
                }
            }
        }
    };
    match result {
        Ok(run) => {
            let code = finish(kept, record, &run, json, args.chaos.is_some(), peer);
            after_report();
            code
        }
        Err(e) => fail(&e, run_error_code(&e)),
    }
}

fn finish(
    kept: &RunStore,
    record: &mut RunRecord,
    run: &FileRun,
    json: bool,
    chaos: bool,
    peer: bool,
) -> ExitCode {
    let code = run.output.report.stop_exit_code();
    record.report = Some(report_json(run));
    record.exit_code = Some(code);
    if let Err(e) = kept.put_run(record) {
        return fail(e, quorate_coordinator::StopReason::EXIT_RUNTIME);
    }
    print_run(run, json, chaos);
    if record.stop_reason() == Some("waiting-approval") && peer {
        eprintln!("quorate: run {} is kept; {PEER_PARKED}", record.run_id);
    } else if record.stop_reason() == Some("waiting-approval") {
        let asking = run.output.report.tasks.iter().any(|t| t.top_up.is_some());
        eprintln!(
            "quorate: run {} is kept; continue it with: quorate resume {} --store {} {}",
            record.run_id,
            record.run_id,
            kept.at(),
            if asking {
                "--grant TASK=COMPONENT:N,... (or --reject TASK)"
            } else {
                "--approve ..."
            }
        );
    }
    ExitCode::from(code)
}

/// What `resume` was told to answer: approvals and top-ups.
pub(crate) struct Answers {
    /// `--approve`.
    pub(crate) approve: Option<Approve>,
    /// `--grant`.
    pub(crate) grant: Vec<Grant>,
    /// `--reject`.
    pub(crate) reject: Vec<String>,
}

/// `quorate resume RUN_ID --store FILE`; with `split` (`--nats`), as a supervisor process
/// whose workers are still running.
pub(crate) fn resume(
    id: &str,
    store: &StoreAt,
    security: &Security,
    answers: Answers,
    json: bool,
    trace: Option<PathBuf>,
    split: Option<Split>,
) -> ExitCode {
    let found = RunStore::open_at(store, security).and_then(|kept| kept.run(id).map(|r| (kept, r)));
    let (kept, mut record) = match found {
        Ok(found) => found,
        Err(e) => {
            let code = store_code(&e);
            return fail(e, code);
        }
    };
    if !record.resumable() {
        eprintln!(
            "quorate: run {} already stopped ({}); nothing to resume",
            record.run_id,
            record.stop_reason().unwrap_or("-")
        );
        return ExitCode::from(record.exit_code.unwrap_or(1));
    }
    if let (Some(p), None) = (&record.processes, &split) {
        let e = DurableError::ProcessRun {
            run: record.run_id,
            workers: p.workers.len(),
        };
        return fail(e, EXIT_BAD_INPUT);
    }
    #[cfg(feature = "nats")]
    if let Some(Split::Resume { workers, .. }) = &split {
        if let Err(e) = quorate::process::check_resume(&record, *workers) {
            return fail(&e, e.exit_code());
        }
    }
    let path = PathBuf::from(&record.plan_path);
    let approve = answers.approve.unwrap_or_default();
    let file = match PlanFile::parse(&path, &record.plan_text) {
        Ok(file) => file,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if file.run.topology == Topology::Peer && record.stop_reason() == Some("waiting-approval") {
        eprintln!(
            "quorate: run {} stopped waiting-approval; {PEER_PARKED}",
            record.run_id
        );
        return ExitCode::from(record.exit_code.unwrap_or(7));
    }
    if let Err(e) = approve.check(&[(&path, &file)]) {
        return fail(e, EXIT_BAD_INPUT);
    }
    let top_ups = match top_up_policy(&path, &file, &answers.grant, &answers.reject) {
        Ok(policy) => policy,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    let run = record.run_id;
    let loaded = (|| {
        Ok::<_, DurableError>(DurableArgs {
            store: kept.clone(),
            run,
            resume: Some(ResumeFrom {
                events: resume_events(kept.events(run)?),
                results: kept.results(run)?,
            }),
            intents: kept.intents(run)?,
            effects: kept.effects(run)?,
        })
    })();
    let durable = match loaded {
        Ok(d) => d,
        Err(e) => return fail(e, quorate_coordinator::StopReason::EXIT_RUNTIME),
    };
    if !top_ups.0.is_empty() {
        // Checked against the replayed run before anything is written: a grant that does not
        // fit changes nothing.
        let from = durable.resume.as_ref().expect("a resume has a log");
        match check_top_ups(&path, &file, from, &top_ups) {
            Ok(idle) => {
                for task in idle {
                    eprintln!(
                        "quorate: task {task} is not waiting for a top-up; its answer is ignored"
                    );
                }
            }
            Err(e) => return fail(&e, super::run_error_code(&e)),
        }
    }
    let at = unix_ms();
    record
        .top_ups
        .extend(top_ups.0.iter().map(|(task, answer)| TopUpGiven {
            task: task.clone(),
            answer: *answer,
            at_unix_ms: at,
        }));
    if let Some(approve) = approve_text(&approve) {
        record.approvals.push(ApprovalGiven {
            approve,
            at_unix_ms: unix_ms(),
        });
    }
    record.report = None;
    record.exit_code = None;
    let args = RunArgs {
        approve,
        trace,
        durable: Some(durable),
        top_ups,
        ..RunArgs::default()
    };
    go(&kept, &mut record, &args, json, &|| {}, split.as_ref())
}

fn tasks_by_state(
    kept: &RunStore,
    record: &RunRecord,
) -> Result<BTreeMap<String, u32>, DurableError> {
    let mut counts = BTreeMap::new();
    for state in kept.task_states(record.run_id)?.into_values() {
        *counts.entry(state).or_insert(0) += 1;
    }
    Ok(counts)
}

/// `quorate runs --store FILE`.
pub(crate) fn runs(store: &StoreAt, security: &Security, json: bool) -> ExitCode {
    let listed = RunStore::open_at(store, security).and_then(|kept| {
        kept.runs()?
            .into_iter()
            .map(|r| tasks_by_state(&kept, &r).map(|t| (r, t)))
            .collect::<Result<Vec<_>, _>>()
    });
    let listed = match listed {
        Ok(listed) => listed,
        Err(e) => {
            let code = store_code(&e);
            return fail(e, code);
        }
    };
    if json {
        let rows: Vec<serde_json::Value> = listed
            .iter()
            .map(|(r, tasks)| {
                serde_json::json!({
                    "run_id": r.run_id,
                    "plan": r.plan_path,
                    "status": r.status(),
                    "started_unix_ms": r.started_unix_ms,
                    "tasks": tasks,
                })
            })
            .collect();
        quorate::outln!("{}", serde_json::Value::Array(rows));
        return ExitCode::SUCCESS;
    }
    quorate::outln!(
        "{:<36}  {:<18} {:<15}  {:<40}  tasks",
        "run",
        "status",
        "started (ms)",
        "plan"
    );
    for (r, tasks) in &listed {
        let tasks: Vec<String> = tasks.iter().map(|(s, n)| format!("{s} {n}")).collect();
        quorate::outln!(
            "{:<36}  {:<18} {:<15}  {:<40}  {}",
            r.run_id.to_string(),
            r.status(),
            r.started_unix_ms,
            r.plan_path,
            tasks.join(", ")
        );
    }
    ExitCode::SUCCESS
}

/// `quorate show RUN_ID --store FILE`.
pub(crate) fn show(id: &str, store: &StoreAt, security: &Security, json: bool) -> ExitCode {
    let found = RunStore::open_at(store, security).and_then(|kept| {
        let r = kept.run(id)?;
        let results = kept.results(r.run_id)?;
        let states = kept.task_states(r.run_id)?;
        Ok((r, results, states))
    });
    let (record, results, states) = match found {
        Ok(found) => found,
        Err(e) => {
            let code = store_code(&e);
            return fail(e, code);
        }
    };
    let prefix = quorate_coordinator::result_key(record.run_id, "");
    let results: BTreeMap<String, serde_json::Value> = results
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), v)))
        .collect();
    if json {
        let mut value = record
            .report
            .clone()
            .unwrap_or_else(|| serde_json::json!({ "run_id": record.run_id, "stop_reason": null }));
        value["status"] = serde_json::json!(record.status());
        value["results"] = serde_json::json!(results);
        if !record.top_ups.is_empty() {
            value["top_ups"] = serde_json::json!(record.top_ups);
        }
        quorate::outln!("{value}");
        return ExitCode::SUCCESS;
    }
    quorate::outln!(
        "run {}  plan {}  status {}",
        record.run_id,
        record.plan_path,
        record.status()
    );
    for a in &record.approvals {
        quorate::outln!("approve {}  at {} ms", a.approve, a.at_unix_ms);
    }
    for t in &record.top_ups {
        let answer = match t.answer {
            quorate_coordinator::TopUp::Grant(b) => format!("grant {b}"),
            quorate_coordinator::TopUp::Reject => "reject".to_string(),
        };
        quorate::outln!("top-up {}  {answer}  at {} ms", t.task, t.at_unix_ms);
    }
    for (task, state) in &states {
        let result = results
            .get(task)
            .map_or("-".to_string(), ToString::to_string);
        quorate::outln!("{task:<20} {state:<16} {result}");
    }
    ExitCode::SUCCESS
}

/// `quorate show RUN --store FILE --html PAGE`: the kept run's page, rendered from its log as
/// `quorate report` renders a trace (`-` writes it to stdout).
pub(crate) fn show_html(id: &str, store: &StoreAt, security: &Security, page: &Path) -> ExitCode {
    let events = RunStore::open_at(store, security).and_then(|kept| {
        let record = kept.run(id)?;
        kept.events(record.run_id)
    });
    let events = match events {
        Ok(events) => events,
        Err(e) => {
            let code = store_code(&e);
            return fail(e, code);
        }
    };
    let html = quorate::report::render_html(&events);
    if page.as_os_str() == "-" {
        quorate::outln!("{html}");
        return ExitCode::SUCCESS;
    }
    match std::fs::write(page, html) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(
            format!("cannot write the page to {}: {e}", page.display()),
            EXIT_BAD_INPUT,
        ),
    }
}
