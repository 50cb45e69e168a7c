//! What the `experiment` subcommands print and write: tables, CSV, JSON and SVG figures.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::critical_path::ScheduleRow;
use super::output::{is_stdout, plot_lines, write_csv, write_json, Axes, OutputError, Series};
use super::topology::{Topology, TopologyReport, TopologyRow};

/// Exit code for bad input.
const EXIT_BAD_INPUT: u8 = 2;

pub(super) fn bad(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(EXIT_BAD_INPUT)
}

pub(super) fn written(result: Result<(), OutputError>) -> Result<(), ExitCode> {
    result.map_err(bad)
}

/// Whether an output goes to stdout (bare `--json`, or `-` as any file), which then replaces
/// the table. Two outputs on stdout would interleave: that is bad input.
fn to_stdout(
    json: &Option<Option<PathBuf>>,
    csv: Option<&Path>,
    plot: Option<&Path>,
) -> Result<bool, ExitCode> {
    let json = match json {
        Some(Some(path)) => is_stdout(path),
        Some(None) => true,
        None => false,
    };
    let on_stdout = [
        json,
        csv.is_some_and(is_stdout),
        plot.is_some_and(is_stdout),
    ];
    match on_stdout.iter().filter(|&&b| b).count() {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(bad(
            "only one of --json, --csv and --plot can go to stdout (`-` or a bare --json)",
        )),
    }
}

/// Writes `value` as JSON where `--json` asks: to a file (`--json FILE`) or to stdout (bare
/// `--json`, or `--json -`: one line).
fn emit_json<T: serde::Serialize>(
    value: &T,
    json: &Option<Option<PathBuf>>,
) -> Result<(), ExitCode> {
    match json {
        Some(Some(path)) if !is_stdout(path) => written(write_json(path, value)),
        Some(_) => {
            crate::outln!("{}", serde_json::to_string(value).unwrap_or_default());
            Ok(())
        }
        None => Ok(()),
    }
}

/// The start every `*_outputs` shares: checks that at most one output goes to stdout, writes
/// `value` as JSON where `--json` asks, and prints the table (`table`) unless an output took
/// stdout.
pub(super) fn json_and_table<T: serde::Serialize>(
    value: &T,
    json: &Option<Option<PathBuf>>,
    csv: Option<&Path>,
    plot: Option<&Path>,
    table: impl FnOnce(),
) -> Result<(), ExitCode> {
    let quiet = to_stdout(json, csv, plot)?;
    emit_json(value, json)?;
    if !quiet {
        table();
    }
    Ok(())
}

pub(super) fn f(x: f64) -> String {
    format!("{x:.4}")
}

pub(super) fn topology_outputs(
    report: &TopologyReport,
    json: Option<Option<PathBuf>>,
    csv: Option<&Path>,
    plot: Option<&Path>,
) -> Result<(), ExitCode> {
    let yes = |b: bool| if b { "yes" } else { "NO" };
    let over_nats = report.rows.iter().any(|r| r.nats.is_some());
    json_and_table(report, &json, csv, plot, || {
        let c = &report.config;
        crate::outln!(
            "topology: R = {} rounds, M = {} tokens/message, mode {}, seed {}, {} repeats",
            c.rounds,
            c.msg_tokens,
            c.mode.name(),
            c.seed,
            c.repeats
        );
        crate::outln!(
            "{:<11} {:>4} {:>9} {:>9} {:>4} {:>11} {:>10} {:>10} {:>4} {:>9} {:>9} {:>4} {:>22}",
            "topology",
            "n",
            "messages",
            "formula",
            "ok",
            "bytes",
            "tokens",
            "closed",
            "ok",
            "hub/rnd",
            "agent/rnd",
            "ok",
            "wall ms median [min,max]"
        );
        for r in &report.rows {
            crate::outln!(
                "{:<11} {:>4} {:>9} {:>9} {:>4} {:>11} {:>10} {:>10} {:>4} {:>9} {:>9} {:>4} {:>22}",
                r.topology.name(),
                r.n,
                r.messages,
                r.formula_messages,
                yes(r.messages_match && r.repeats_agree),
                r.bytes,
                r.tokens,
                r.closed_form_tokens,
                yes(r.tokens_match),
                r.hub_context.get(c.mode),
                r.worker_context.get(c.mode),
                yes(r.context_match),
                format!("{:.2} [{:.2}, {:.2}]", r.wall_ms, r.wall_ms_min, r.wall_ms_max)
            );
        }
        crate::outln!(
            "formulas: star 2(n-1)R, all-to-all n(n-1)R messages; tokens: see `experiment::topology` docs"
        );
        crate::outln!(
            "hub/rnd, agent/rnd: the largest context the hub (star participant 0) and one worker \
             or peer reads in one round, mode {}",
            c.mode.name()
        );
        if over_nats {
            crate::outln!("carried by NATS JetStream (stream and consumer counts of the server):");
            crate::outln!(
                "{:<11} {:>4} {:>9} {:>9} {:>9} {:>5} {:>4}",
                "topology",
                "n",
                "formula",
                "stored",
                "delivered",
                "held",
                "ok"
            );
            for r in &report.rows {
                let c = r.nats.unwrap_or_default();
                crate::outln!(
                    "{:<11} {:>4} {:>9} {:>9} {:>9} {:>5} {:>4}",
                    r.topology.name(),
                    r.n,
                    r.formula_messages,
                    c.stored,
                    c.delivered,
                    c.held,
                    yes(c.matches && r.repeats_agree)
                );
            }
        }
    })?;
    if let Some(path) = csv {
        let mut rows: Vec<Vec<String>> = report
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.topology.name().to_owned(),
                    r.n.to_string(),
                    r.rounds.to_string(),
                    r.messages.to_string(),
                    r.formula_messages.to_string(),
                    r.messages_match.to_string(),
                    r.bytes.to_string(),
                    r.tokens.to_string(),
                    r.closed_form_tokens.to_string(),
                    r.tokens_match.to_string(),
                    r.hub_context.full.to_string(),
                    r.hub_context.delta.to_string(),
                    r.hub_context.artifact.to_string(),
                    r.worker_context.full.to_string(),
                    r.worker_context.delta.to_string(),
                    r.worker_context.artifact.to_string(),
                    r.context_match.to_string(),
                    r.wall_ms_runs.len().to_string(),
                    format!("{:.3}", r.wall_ms),
                    format!("{:.3}", r.wall_ms_min),
                    format!("{:.3}", r.wall_ms_max),
                ]
            })
            .collect();
        let mut header = vec![
            "topology",
            "n",
            "rounds",
            "messages",
            "formula_messages",
            "messages_match",
            "bytes",
            "tokens",
            "closed_form_tokens",
            "tokens_match",
            "hub_context_full",
            "hub_context_delta",
            "hub_context_artifact",
            "agent_context_full",
            "agent_context_delta",
            "agent_context_artifact",
            "context_match",
            "repeats",
            "wall_ms_median",
            "wall_ms_min",
            "wall_ms_max",
        ];
        if over_nats {
            // `--transport nats`: what the server carried, after the columns of today.
            header.extend(["nats_stored", "nats_delivered", "nats_held", "nats_match"]);
            for (row, r) in rows.iter_mut().zip(&report.rows) {
                let c = r.nats.unwrap_or_default();
                row.extend([
                    c.stored.to_string(),
                    c.delivered.to_string(),
                    c.held.to_string(),
                    c.matches.to_string(),
                ]);
            }
        }
        written(write_csv(path, &header, &rows))?;
    }
    if let Some(path) = plot {
        let mode = report.config.mode;
        let mut series = Vec::new();
        for (i, t) in [Topology::Star, Topology::AllToAll].into_iter().enumerate() {
            let rows: Vec<_> = report.rows.iter().filter(|r| r.topology == t).collect();
            let line = |label: String, color: usize, y: &dyn Fn(&TopologyRow) -> u64| Series {
                label,
                points: rows.iter().map(|r| (r.n as f64, y(r) as f64)).collect(),
                color,
                markers: true,
                ..Series::default()
            };
            series.push(line(format!("{}: messages", t.name()), 3 * i, &|r| {
                r.messages
            }));
            series.push(line(
                format!("{}: tokens read, all agents", t.name()),
                3 * i + 1,
                &|r| r.tokens,
            ));
            let who = if t == Topology::Star {
                "star: hub reads / round"
            } else {
                "all-to-all: one peer reads / round (thin)"
            };
            let mut most = line(who.to_owned(), 3 * i + 2, &|r| r.hub_context.get(mode));
            // A peer reads what the hub reads: a thin line over the hub's keeps both visible.
            most.markers = t == Topology::Star;
            series.push(most);
        }
        series.push(Series {
            label: "star: one worker reads / round".to_owned(),
            points: report
                .rows
                .iter()
                .filter(|r| r.topology == Topology::Star)
                .map(|r| (r.n as f64, r.worker_context.get(mode) as f64))
                .collect(),
            color: 8,
            markers: true,
            ..Series::default()
        });
        let title = format!(
            "Star vs all-to-all, R = {}, M = {}, mode {} (exact counts: no interval)",
            report.config.rounds,
            report.config.msg_tokens,
            mode.name()
        );
        let axes = Axes {
            title: &title,
            x: "participants n",
            y: "count",
            log_y: true,
            x_labels: Vec::new(),
        };
        written(plot_lines(path, &axes, &series))?;
    }
    Ok(())
}

pub(super) fn critical_path_outputs(
    rows: &[ScheduleRow],
    json: Option<Option<PathBuf>>,
    csv: Option<&Path>,
    plot: Option<&Path>,
) -> Result<(), ExitCode> {
    json_and_table(&rows, &json, csv, plot, || {
        crate::outln!("critical path: list scheduler on a virtual clock (exact, ms resolution)");
        crate::outln!(
            "{:<26} {:>5} {:>3} {:>10} {:>10} {:>10} {:>10} {:>7}",
            "dag",
            "tasks",
            "W",
            "makespan",
            "crit path",
            "work/W",
            "bound",
            "ratio"
        );
        for r in rows {
            crate::outln!(
                "{:<26} {:>5} {:>3} {:>9.3}s {:>9.3}s {:>9.3}s {:>9.3}s {:>7.3}",
                r.dag,
                r.tasks,
                r.workers,
                r.makespan_s,
                r.critical_path_s,
                r.work_per_worker_s,
                r.lower_bound_s,
                r.ratio
            );
        }
    })?;
    if let Some(path) = csv {
        let out: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.dag.clone(),
                    r.tasks.to_string(),
                    r.workers.to_string(),
                    r.makespan_s.to_string(),
                    r.critical_path_s.to_string(),
                    r.work_per_worker_s.to_string(),
                    r.lower_bound_s.to_string(),
                    f(r.ratio),
                ]
            })
            .collect();
        written(write_csv(
            path,
            &[
                "dag",
                "tasks",
                "workers",
                "makespan_s",
                "critical_path_s",
                "work_per_worker_s",
                "lower_bound_s",
                "ratio",
            ],
            &out,
        ))?;
    }
    if let Some(path) = plot {
        let mut names: Vec<&str> = Vec::new();
        for r in rows {
            if !names.contains(&r.dag.as_str()) {
                names.push(&r.dag);
            }
        }
        let mut series = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let mine: Vec<_> = rows.iter().filter(|r| r.dag == *name).collect();
            series.push(Series {
                label: (*name).to_owned(),
                points: mine.iter().map(|r| (r.workers as f64, r.ratio)).collect(),
                color: i,
                markers: true,
                ..Series::default()
            });
        }
        let axes = Axes {
            title: "List-schedule makespan / max(critical path, work / W)",
            x: "workers W",
            y: "makespan / lower bound",
            log_y: false,
            x_labels: Vec::new(),
        };
        written(plot_lines(path, &axes, &series))?;
    }
    Ok(())
}
