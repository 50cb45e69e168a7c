//! Writing results: JSON, CSV, SVG line plots (plotters), and a progress bar on stderr.

use std::io::Write;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use plotters::prelude::*;
use serde::Serialize;

/// Writing an output file failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// I/O.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Plotting.
    #[error("{path}: plot failed: {message}")]
    Plot {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A progress bar on stderr; hidden when stderr is not a terminal.
#[must_use]
pub fn progress(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// Writes `value` as pretty JSON.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| OutputError::Io {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(path, text + "\n").map_err(io(path))
}

/// Writes a CSV file (fields containing a comma or quote are quoted).
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), OutputError> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io(path))?);
    let quote = |f: &str| {
        if f.contains([',', '"', '\n']) {
            format!("\"{}\"", f.replace('"', "\"\""))
        } else {
            f.to_owned()
        }
    };
    writeln!(file, "{}", header.join(",")).map_err(io(path))?;
    for row in rows {
        let line: Vec<String> = row.iter().map(|f| quote(f)).collect();
        writeln!(file, "{}", line.join(",")).map_err(io(path))?;
    }
    file.flush().map_err(io(path))
}

/// One line of a plot.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend label (empty: not in the legend).
    pub label: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
    /// Palette index.
    pub color: usize,
    /// Draw markers (measured data) or a thin plain line (closed form / bound).
    pub markers: bool,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Axis titles and ranges of a plot.
#[derive(Clone, Debug)]
pub struct Axes<'a> {
    /// Title.
    pub title: &'a str,
    /// X axis label.
    pub x: &'a str,
    /// Y axis label.
    pub y: &'a str,
    /// Plot log10 of y (labels show the exponent).
    pub log_y: bool,
    /// Where the legend goes.
    pub legend: Legend,
}

/// Corner of the legend box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Legend {
    /// Upper left.
    UpperLeft,
    /// Upper right.
    UpperRight,
    /// Lower right.
    LowerRight,
}

/// Draws `series` into an SVG file of 720 x 440 pixels.
pub fn plot_lines(path: &Path, axes: &Axes<'_>, series: &[Series]) -> Result<(), OutputError> {
    let fail = |e: &dyn std::fmt::Display| OutputError::Plot {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let tf = |y: f64| if axes.log_y { y.max(1e-9).log10() } else { y };
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(tf(y));
        y1 = y1.max(tf(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = ((y1 - y0) * 0.05).max(1e-3);
    let xpad = ((x1 - x0) * 0.02).max(1e-3);
    let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(axes.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d((x0 - xpad)..(x1 + xpad), (y0 - pad)..(y1 + pad))
        .map_err(|e| fail(&e))?;
    let y_desc = if axes.log_y {
        format!("log10 {}", axes.y)
    } else {
        axes.y.to_owned()
    };
    chart
        .configure_mesh()
        .x_desc(axes.x)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| fail(&e))?;
    for s in series {
        let color = PALETTE[s.color % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x, tf(y))).collect();
        let width = if s.markers { 2 } else { 1 };
        let drawn = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))
            .map_err(|e| fail(&e))?;
        // An empty label keeps the series out of the legend.
        if !s.label.is_empty() {
            drawn.label(s.label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
            });
        }
        if s.markers {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| fail(&e))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(match axes.legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        })
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}
