//! Writing results: JSON, CSV, SVG line plots (plotters), and a progress bar on stderr.
//!
//! Every writer takes a path; the path `-` means standard output (see [`is_stdout`]).

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

/// Whether `path` is `-`, which every `--json`, `--csv` and `--plot` takes for standard output.
#[must_use]
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Writes `text` to `path`, or to standard output for `-` (through [`crate::out!`], so a
/// closed stdout stops the output, not the command).
pub fn write_text(path: &Path, text: &str) -> Result<(), OutputError> {
    if is_stdout(path) {
        crate::out!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text).map_err(io(path))
    }
}

/// Writes `value` as pretty JSON (`-`: to stdout).
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| OutputError::Io {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    })?;
    write_text(path, &(text + "\n"))
}

/// Writes a CSV file (fields containing a comma or quote are quoted; `-`: to stdout).
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<(), OutputError> {
    let mut file: Vec<u8> = Vec::new();
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
    write_text(path, &String::from_utf8_lossy(&file))
}

/// One line of a plot.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend label (empty: not in the legend).
    pub label: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
    /// Palette index.
    pub color: usize,
    /// Draw markers (measured data) or a thin plain line (closed form / bound).
    pub markers: bool,
    /// An interval `(lo, hi)` per point (same order as `points`), or empty for none.
    pub interval: Vec<(f64, f64)>,
    /// How `interval` is drawn.
    pub interval_style: IntervalStyle,
}

/// How a series' intervals are drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IntervalStyle {
    /// A vertical error bar with caps at each point.
    #[default]
    Bars,
    /// A translucent band between the lower and the upper ends.
    Band,
}

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(0, 0, 128),
    RGBColor(128, 0, 0),
];

/// Axis titles of a plot. The legend is drawn in a panel right of the chart, so it never
/// covers data.
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
    /// Categorical x axis: point `x = i` is labelled `x_labels[i]` (and only whole `i` get
    /// a tick); points are not joined by lines, and a series without markers is drawn as a
    /// short dash at each category. Empty: numeric x.
    pub x_labels: Vec<String>,
}

/// A tick label of a numeric axis: as few decimals as tell it apart (no repeated `2, 2, 3`).
fn tick(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').to_owned()
    }
}

/// Draws `series` into an SVG 1000 pixels wide at `path` (`-`: stdout): the chart on the
/// left 700 pixels, the legend in the 300 beside it. The SVG is 460 pixels high, or as high
/// as the legend needs (`svg_height`): every labelled series gets its row.
pub fn plot_lines(path: &Path, axes: &Axes<'_>, series: &[Series]) -> Result<(), OutputError> {
    let mut svg = String::new();
    draw(&mut svg, axes, series).map_err(|message| OutputError::Plot {
        path: path.display().to_string(),
        message,
    })?;
    write_text(path, &(svg + "\n"))
}

/// Title band above the chart and the legend, in pixels.
const TITLE_HEIGHT: u32 = 34;
/// Height of one legend row, in pixels (the first row's line sits one row down).
const LEGEND_ROW: u32 = 20;

/// The SVG's height for a legend of `labelled` rows: 460 pixels, or more when the rows (below
/// the title, with a row's margin top and bottom) do not fit.
fn svg_height(labelled: usize) -> u32 {
    let rows = u32::try_from(labelled).unwrap_or(u32::MAX / LEGEND_ROW);
    460.max(TITLE_HEIGHT + LEGEND_ROW * (rows + 1))
}

fn draw(svg: &mut String, axes: &Axes<'_>, series: &[Series]) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| e.to_string();
    let tf = |y: f64| if axes.log_y { y.max(1e-9).log10() } else { y };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for s in series {
        let ends = s.interval.iter().flat_map(|&(lo, hi)| [lo, hi]);
        for y in s.points.iter().map(|p| p.1).chain(ends) {
            y0 = y0.min(tf(y));
            y1 = y1.max(tf(y));
        }
        for &(x, _) in &s.points {
            x0 = x0.min(x);
            x1 = x1.max(x);
        }
    }
    if x0 > x1 || y0 > y1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = ((y1 - y0) * 0.05).max(1e-3);
    let xpad = ((x1 - x0) * 0.03).max(0.3);
    let labelled = series.iter().filter(|s| !s.label.is_empty()).count();
    let root = SVGBackend::with_string(svg, (1000, svg_height(labelled))).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let (title, body) = root.split_vertically(TITLE_HEIGHT);
    title
        .draw(&Text::new(
            axes.title.to_owned(),
            (12, 10),
            ("sans-serif", 16).into_font(),
        ))
        .map_err(|e| fail(&e))?;
    let (left, legend) = body.split_horizontally(700);
    let mut chart = ChartBuilder::on(&left)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0 - xpad)..(x1 + xpad), (y0 - pad)..(y1 + pad))
        .map_err(|e| fail(&e))?;
    let y_desc = if axes.log_y {
        format!("log10 {}", axes.y)
    } else {
        axes.y.to_owned()
    };
    let labels = &axes.x_labels;
    let categorical = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-9 && i >= 0.0 && (i as usize) < labels.len() {
            labels[i as usize].clone()
        } else {
            String::new()
        }
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(axes.x)
        .y_desc(y_desc)
        .light_line_style(WHITE.mix(0.0));
    if labels.is_empty() {
        mesh.x_label_formatter(&|x| tick(*x));
    } else {
        mesh.x_labels(labels.len() + 2)
            .x_label_formatter(&categorical);
    }
    mesh.draw().map_err(|e| fail(&e))?;
    for s in series {
        let color = PALETTE[s.color % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&(x, y)| (x, tf(y))).collect();
        let ends: Vec<(f64, f64, f64)> = s
            .points
            .iter()
            .zip(&s.interval)
            .map(|(&(x, _), &(lo, hi))| (x, tf(lo), tf(hi)))
            .collect();
        match s.interval_style {
            IntervalStyle::Band if !ends.is_empty() => {
                let mut outline: Vec<(f64, f64)> = ends.iter().map(|&(x, lo, _)| (x, lo)).collect();
                outline.extend(ends.iter().rev().map(|&(x, _, hi)| (x, hi)));
                chart
                    .draw_series(std::iter::once(Polygon::new(
                        outline,
                        color.mix(0.18).filled(),
                    )))
                    .map_err(|e| fail(&e))?;
            }
            _ => {
                let cap = (x1 - x0 + 2.0 * xpad) * 0.006;
                chart
                    .draw_series(ends.iter().flat_map(|&(x, lo, hi)| {
                        [
                            PathElement::new(vec![(x, lo), (x, hi)], color.stroke_width(1)),
                            PathElement::new(
                                vec![(x - cap, lo), (x + cap, lo)],
                                color.stroke_width(1),
                            ),
                            PathElement::new(
                                vec![(x - cap, hi), (x + cap, hi)],
                                color.stroke_width(1),
                            ),
                        ]
                    }))
                    .map_err(|e| fail(&e))?;
            }
        }
        let width = if s.markers { 2 } else { 1 };
        if labels.is_empty() {
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(width)))
                .map_err(|e| fail(&e))?;
        } else if !s.markers {
            // Categories are not a scale: no line joins them; an exact value is a short dash.
            chart
                .draw_series(pts.iter().map(|&(x, y)| {
                    PathElement::new(vec![(x - 0.25, y), (x + 0.25, y)], color.stroke_width(1))
                }))
                .map_err(|e| fail(&e))?;
        }
        if s.markers {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| fail(&e))?;
        }
    }
    // The legend panel: one row per labelled series, beside the chart.
    let mut y = LEGEND_ROW as i32;
    for s in series.iter().filter(|s| !s.label.is_empty()) {
        let color = PALETTE[s.color % PALETTE.len()];
        let width = if s.markers { 2 } else { 1 };
        legend
            .draw(&PathElement::new(
                vec![(4, y), (26, y)],
                color.stroke_width(width),
            ))
            .map_err(|e| fail(&e))?;
        if s.markers {
            legend
                .draw(&Circle::new((15, y), 3, color.filled()))
                .map_err(|e| fail(&e))?;
        }
        legend
            .draw(&Text::new(
                s.label.clone(),
                (32, y - 7),
                ("sans-serif", 13).into_font(),
            ))
            .map_err(|e| fail(&e))?;
        y += LEGEND_ROW as i32;
    }
    root.present().map_err(|e| fail(&e))
}

#[cfg(test)]
mod tests {
    use super::{draw, Axes, Series};

    /// The `height` attribute of the SVG's root element.
    fn height(svg: &str) -> u32 {
        let at = svg.find("height=\"").expect("a height") + "height=\"".len();
        let len = svg[at..].find('"').expect("the height ends");
        svg[at..at + len].parse().expect("a number")
    }

    #[test]
    fn a_long_legend_makes_the_svg_taller_so_no_row_falls_off() {
        let axes = Axes {
            title: "t",
            x: "x",
            y: "y",
            log_y: false,
            x_labels: Vec::new(),
        };
        let series: Vec<Series> = (0..30)
            .map(|i| Series {
                label: format!("rho = {i}"),
                points: vec![(1.0, f64::from(i)), (2.0, f64::from(i) + 1.0)],
                color: i as usize,
                markers: true,
                interval: Vec::new(),
                interval_style: Default::default(),
            })
            .collect();
        let mut few = String::new();
        draw(&mut few, &axes, &series[..3]).expect("drawn");
        assert_eq!(height(&few), 460, "a short legend keeps the usual size");
        let mut many = String::new();
        draw(&mut many, &axes, &series).expect("drawn");
        // The last row's text sits at 34 + 30 * 20 - 7 (title band, row offset, baseline).
        assert!(height(&many) >= 34 + 30 * 20, "height {}", height(&many));
        for i in 0..30 {
            assert!(many.contains(&format!("\nrho = {i}\n")), "row {i} drawn");
        }
    }
}
