//! What `experiment voting` prints and writes: the table, CSV, JSON and the SVG figure (Monte
//! Carlo points with their 95% Wilson intervals as error bars, exact closed forms as thin lines).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::models::Model;
use super::output::{plot_lines, write_csv, Axes, Series};
use super::present::{f, json_and_table, written};
use super::voting::{VotingCell, VotingReport};

fn opt(x: Option<f64>) -> String {
    x.map_or("-".to_owned(), |x| format!("{x:.4}"))
}

fn rho(r: Option<f64>) -> String {
    r.map_or("-".to_owned(), |r| format!("{r:.2}"))
}

fn layout(blocs: &[usize]) -> String {
    let parts: Vec<String> = blocs.iter().map(ToString::to_string).collect();
    parts.join("+")
}

pub(super) fn voting_outputs(
    report: &VotingReport,
    json: Option<Option<PathBuf>>,
    csv: Option<&Path>,
    plot: Option<&Path>,
) -> Result<(), ExitCode> {
    json_and_table(report, &json, csv, plot, || table(report))?;
    if let Some(path) = csv {
        write_cells_csv(path, &report.cells)?;
    }
    if let Some(path) = plot {
        plot_voting(path, report)?;
    }
    Ok(())
}

fn table(report: &VotingReport) {
    let c = &report.config;
    let runtime: u64 = report.cells.iter().map(|c| c.runtime_trials).sum();
    let direct: u64 = report.cells.iter().map(|c| c.direct_trials).sum();
    let mismatches: u64 = report.cells.iter().map(|c| c.runtime_mismatches).sum();
    let kind = if c.answers > 2 {
        format!(
            "plurality over {} answers, wrong answers {:?}",
            c.answers, c.wrong
        )
    } else {
        "majority (right/wrong)".to_owned()
    };
    crate::outln!(
        "voting: model {}, p = {}, {kind}, {} questions per cell, seed {}",
        c.model.name(),
        c.p,
        c.trials,
        c.seed
    );
    if !c.accuracies.is_empty() {
        crate::outln!("per-voter accuracies: {:?}", c.accuracies);
    }
    crate::outln!(
        "paths: {runtime} questions through worker actors (VoterAgent in WorkerActor, Report envelopes), \
         {direct} by calling the vote directly; runtime decisions differing from direct: {mismatches}"
    );
    crate::outln!(
        "{:>5} {:>9} {:>5} {:>7} {:>17} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
        "n",
        "blocs",
        "rho",
        "naive",
        "95% CI",
        "exact",
        "dedup",
        "exact",
        "corr",
        "agree",
        "model"
    );
    for cell in &report.cells {
        let blocs = if cell.blocs.iter().all(|&b| b == 1) {
            "-".to_owned()
        } else {
            layout(&cell.blocs)
        };
        crate::outln!(
            "{:>5} {:>9} {:>5} {:>7.4} [{:.4}, {:.4}] {:>7} {:>7.4} {:>7} {:>7} {:>7} {:>7.4}",
            cell.n,
            blocs,
            rho(cell.rho),
            cell.naive_accuracy,
            cell.naive_ci.0,
            cell.naive_ci.1,
            opt(cell.naive_closed_form),
            cell.dedup_accuracy,
            opt(cell.dedup_closed_form),
            cell.measured_correlation
                .map_or("-".to_owned(), |c| format!("{c:.3}")),
            cell.measured_error_agreement
                .map_or("-".to_owned(), |c| format!("{c:.3}")),
            cell.implied_correlation
        );
    }
    if report.cells.iter().any(|c| c.naive_closed_form.is_none()) {
        crate::outln!(
            "(exact `-`: no closed form at this size; the Monte Carlo estimate and its interval stand alone)"
        );
    }
    if c.model != Model::SharedEvidence {
        crate::outln!("(every voter is its own source in this model, so dedup = naive)");
    }
    for peak in &report.peaks {
        crate::outln!(
            "peak at rho {}: n = {} (exact accuracy {}), measured peak n = {}",
            rho(peak.rho),
            peak.n_closed_form.map_or("-".to_owned(), |n| n.to_string()),
            opt(peak.accuracy),
            peak.n_measured
        );
    }
}

fn write_cells_csv(path: &Path, cells: &[VotingCell]) -> Result<(), ExitCode> {
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let blank = |x: Option<f64>| x.map_or(String::new(), f);
            vec![
                c.model.clone(),
                c.n.to_string(),
                layout(&c.blocs),
                c.rho.map_or(String::new(), |r| r.to_string()),
                c.p.to_string(),
                c.answers.to_string(),
                c.trials.to_string(),
                c.runtime_trials.to_string(),
                c.direct_trials.to_string(),
                c.runtime_mismatches.to_string(),
                f(c.naive_accuracy),
                f(c.naive_ci.0),
                f(c.naive_ci.1),
                blank(c.naive_closed_form),
                f(c.dedup_accuracy),
                f(c.dedup_ci.0),
                f(c.dedup_ci.1),
                blank(c.dedup_closed_form),
                blank(c.measured_correlation),
                blank(c.measured_error_agreement),
                f(c.implied_correlation),
            ]
        })
        .collect();
    written(write_csv(
        path,
        &[
            "model",
            "n",
            "blocs",
            "rho",
            "p",
            "answers",
            "trials",
            "runtime_trials",
            "direct_trials",
            "runtime_mismatches",
            "naive_accuracy",
            "naive_lo",
            "naive_hi",
            "naive_closed_form",
            "dedup_accuracy",
            "dedup_lo",
            "dedup_hi",
            "dedup_closed_form",
            "measured_correlation",
            "measured_error_agreement",
            "implied_correlation",
        ],
        &rows,
    ))
}

/// Measured points with their Wilson bars and the exact line, one colour.
fn pair(
    label: String,
    color: usize,
    cells: &[&VotingCell],
    x: &dyn Fn(usize, &VotingCell) -> f64,
    dedup: bool,
) -> [Series; 2] {
    let acc = |c: &VotingCell| {
        if dedup {
            c.dedup_accuracy
        } else {
            c.naive_accuracy
        }
    };
    let ci = |c: &VotingCell| if dedup { c.dedup_ci } else { c.naive_ci };
    let exact = |c: &VotingCell| {
        if dedup {
            c.dedup_closed_form
        } else {
            c.naive_closed_form
        }
    };
    [
        Series {
            label,
            points: cells
                .iter()
                .enumerate()
                .map(|(i, c)| (x(i, c), acc(c)))
                .collect(),
            color,
            markers: true,
            interval: cells.iter().map(|c| ci(c)).collect(),
            ..Series::default()
        },
        Series {
            label: String::new(),
            points: cells
                .iter()
                .enumerate()
                .filter_map(|(i, c)| exact(c).map(|e| (x(i, c), e)))
                .collect(),
            color,
            markers: false,
            ..Series::default()
        },
    ]
}

fn plot_voting(path: &Path, report: &VotingReport) -> Result<(), ExitCode> {
    let config = &report.config;
    let mut series = Vec::new();
    let mut x_labels = Vec::new();
    let x_desc;
    if config.model == Model::SharedEvidence {
        // One point per bloc layout, in the order given, labelled by the layout: the layouts
        // need not grow in n, so n on the x axis would zigzag.
        let cells: Vec<&VotingCell> = report.cells.iter().collect();
        x_labels = cells.iter().map(|c| layout(&c.blocs)).collect();
        let x = |i: usize, _: &VotingCell| i as f64;
        series.extend(pair("every vote counts".to_owned(), 0, &cells, &x, false));
        series.extend(pair("one vote per source".to_owned(), 2, &cells, &x, true));
        x_desc = "voters per source (bloc layout)";
    } else {
        let mut columns: Vec<Option<f64>> = Vec::new();
        for c in &report.cells {
            if !columns.contains(&c.rho) {
                columns.push(c.rho);
            }
        }
        // Every column is drawn (the palette has 12 colours; the legend lists each one).
        for (i, col) in columns.iter().enumerate() {
            let cells: Vec<&VotingCell> = report.cells.iter().filter(|c| c.rho == *col).collect();
            let label = match col {
                Some(r) => format!("rho = {r:.2}"),
                None => config.model.name().to_owned(),
            };
            series.extend(pair(label, i, &cells, &|_, c| c.n as f64, false));
        }
        x_desc = "voters n";
    }
    let kind = if config.answers > 2 {
        format!("plurality of {} answers", config.answers)
    } else {
        "majority".to_owned()
    };
    let accuracy = if config.accuracies.is_empty() {
        format!("p = {:.3}", report.cells.first().map_or(config.p, |c| c.p))
    } else {
        let each: Vec<String> = config.accuracies.iter().map(ToString::to_string).collect();
        format!("voter accuracies {}", each.join(","))
    };
    let title = format!(
        "{kind}, {} model, {accuracy}: dots with 95% Wilson bars = Monte Carlo ({} questions), {} = exact",
        config.model.name(),
        config.trials,
        if config.model == Model::SharedEvidence { "dash" } else { "thin line" }
    );
    let axes = Axes {
        title: &title,
        x: x_desc,
        y: "accuracy",
        log_y: false,
        x_labels,
    };
    written(plot_lines(path, &axes, &series))
}
