//! What `experiment voting --from-csv` prints and writes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::output::{plot_lines, write_csv, Axes, IntervalStyle, Series};
use super::present::{f, json_and_table, written};
use super::vote_data::{Estimate, VoteDataReport};

fn est(e: &Estimate) -> String {
    format!("{:.4} [{:.4}, {:.4}]", e.value, e.lo, e.hi)
}

pub(super) fn vote_data_outputs(
    report: &VoteDataReport,
    json: Option<Option<PathBuf>>,
    csv: Option<&Path>,
    plot: Option<&Path>,
) -> Result<(), ExitCode> {
    json_and_table(report, &json, csv, plot, || table(report))?;
    if let Some(path) = csv {
        let mut header = vec![
            "n",
            "subsets",
            "all_subsets",
            "empirical",
            "empirical_lo",
            "empirical_hi",
        ];
        let names: Vec<String> = report
            .fits
            .iter()
            .map(|fit| fit.model.replace('-', "_"))
            .collect();
        header.extend(names.iter().map(String::as_str));
        let rows: Vec<Vec<String>> = report
            .sizes
            .iter()
            .map(|r| {
                let mut row = vec![
                    r.n.to_string(),
                    r.subsets.to_string(),
                    r.all_subsets.to_string(),
                    f(r.empirical.value),
                    f(r.empirical.lo),
                    f(r.empirical.hi),
                ];
                row.extend(r.predicted.iter().map(|p| p.map_or(String::new(), f)));
                row
            })
            .collect();
        written(write_csv(path, &header, &rows))?;
    }
    if let Some(path) = plot {
        let mut series = vec![Series {
            label: "data: random sub-ensembles, 95% band".to_owned(),
            points: report
                .sizes
                .iter()
                .map(|r| (r.n as f64, r.empirical.value))
                .collect(),
            color: 0,
            markers: true,
            interval: report
                .sizes
                .iter()
                .map(|r| (r.empirical.lo, r.empirical.hi))
                .collect(),
            interval_style: IntervalStyle::Band,
        }];
        for (i, fit) in report.fits.iter().enumerate() {
            series.push(Series {
                label: format!("{} fit (rho {:.3})", fit.model, fit.rho),
                points: report
                    .sizes
                    .iter()
                    .filter_map(|r| r.predicted[i].map(|p| (r.n as f64, p)))
                    .collect(),
                color: i + 1,
                markers: false,
                ..Series::default()
            });
        }
        let title = format!(
            "{}: plurality accuracy of n of {} voters, {} questions; fits (lines) vs data",
            report.file, report.voters, report.questions
        );
        let axes = Axes {
            title: &title,
            x: "ensemble size n",
            y: "accuracy",
            log_y: false,
            x_labels: Vec::new(),
        };
        written(plot_lines(path, &axes, &series))?;
    }
    Ok(())
}

fn table(r: &VoteDataReport) {
    crate::outln!(
        "vote data {}: {} questions, {} voters (95% intervals: Wilson per voter, bootstrap over questions otherwise, seed {})",
        r.file,
        r.questions,
        r.voters,
        r.seed
    );
    for a in &r.accuracies {
        crate::outln!(
            "  voter {:<12} accuracy {} ({}/{})",
            a.voter,
            est(&a.accuracy),
            a.right,
            a.answered
        );
    }
    crate::outln!(
        "mean accuracy                      {}",
        est(&r.mean_accuracy)
    );
    crate::outln!(
        "pairwise error correlation         {}",
        est(&r.error_correlation)
    );
    crate::outln!(
        "error agreement (both wrong, same) {}",
        est(&r.error_agreement)
    );
    crate::outln!(
        "  given both wrong                 {}",
        est(&r.error_agreement_given_both_wrong)
    );
    crate::outln!(
        "answers per question k = {} (the most distinct answers a question got)",
        r.answers
    );
    let mut head = format!("{:>4} {:>8} {:>26}", "n", "subsets", "data [95% CI]");
    for fit in &r.fits {
        head.push_str(&format!(
            " {:>14}",
            fit.model.chars().take(14).collect::<String>()
        ));
    }
    crate::outln!("{head}");
    for s in &r.sizes {
        let mut line = format!("{:>4} {:>8} {:>26}", s.n, s.subsets, est(&s.empirical));
        for p in &s.predicted {
            line.push_str(&format!(
                " {:>14}",
                p.map_or("-".to_owned(), |p| format!("{p:.4}"))
            ));
        }
        crate::outln!("{line}");
    }
    let fits: Vec<String> = r
        .fits
        .iter()
        .map(|fit| {
            format!(
                "{} rho {:.4} w {:.3} (s {:.3})",
                fit.model, fit.rho, fit.attractor_weight, fit.wrong_answer_agreement
            )
        })
        .collect();
    crate::outln!("fits: {}", fits.join("; "));
}
