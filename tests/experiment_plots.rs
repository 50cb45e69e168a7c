//! The figures as a reader sees them (through the binary, `--plot -`): every rho value has its
//! legend entry, the legend sits beside the chart, tick labels are not repeated, bloc layouts are
//! labelled categories, and measured points carry interval bars.

use std::process::Command;

/// `(x, y, text)` of every `<text>` element of an SVG written by plotters.
fn placed(svg: &str) -> Vec<(f64, f64, String)> {
    let attr = |el: &str, name: &str| {
        el.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    svg.split("<text")
        .skip(1)
        .map(|el| {
            let body = el.split('>').nth(1).unwrap_or("");
            let text = body.split("</text").next().unwrap_or("").trim().to_owned();
            (attr(el, "x"), attr(el, "y"), text)
        })
        .collect()
}

/// `(x, text)` of every `<text>` element.
fn texts(svg: &str) -> Vec<(f64, String)> {
    placed(svg).into_iter().map(|(x, _, t)| (x, t)).collect()
}

fn plot(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["experiment", "voting"])
        .args(args)
        .args(["--runtime-trials", "0", "--plot", "-"])
        .output()
        .expect("the binary runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_rho_gets_a_legend_entry_beside_the_chart() {
    let rhos = [
        "0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9",
    ];
    let svg = plot(&[
        "--voters",
        "1,3,5",
        "--rho",
        &rhos.join(","),
        "--trials",
        "200",
    ]);
    let texts = texts(&svg);
    for r in rhos {
        let label = format!("rho = {:.2}", r.parse::<f64>().unwrap());
        let hits: Vec<&(f64, String)> = texts.iter().filter(|(_, t)| *t == label).collect();
        assert_eq!(hits.len(), 1, "{label} once in the legend");
        assert!(
            hits[0].0 >= 700.0,
            "{label} in the legend panel, right of the chart"
        );
    }
    // Interval bars: a vertical segment and two caps per measured point (30 points here).
    assert!(
        svg.matches("<polyline").count() >= 30 * 3,
        "error bars drawn"
    );
}

#[test]
fn tick_labels_are_not_repeated() {
    // Two voter counts: a narrow x range whose ticks fall between whole numbers.
    let svg = plot(&["--voters", "1,2", "--rho", "0", "--trials", "300"]);
    let numbers: Vec<(f64, f64, String)> = placed(&svg)
        .into_iter()
        .filter(|(_, _, t)| t.parse::<f64>().is_ok())
        .collect();
    // The x axis' labels share one y, the y axis' one x: check each axis on its own.
    let bottom = numbers.iter().map(|n| n.1).fold(f64::MIN, f64::max);
    let left = numbers.iter().map(|n| n.0).fold(f64::MAX, f64::min);
    for (axis, ticks) in [
        (
            "x",
            numbers.iter().filter(|n| n.1 == bottom).collect::<Vec<_>>(),
        ),
        (
            "y",
            numbers.iter().filter(|n| n.0 == left).collect::<Vec<_>>(),
        ),
    ] {
        let mut labels: Vec<&str> = ticks.iter().map(|n| n.2.as_str()).collect();
        assert!(labels.len() > 3, "{axis}: {labels:?}");
        let all = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(
            labels.len(),
            all,
            "{axis} axis repeats a tick label: {ticks:?}"
        );
    }
}

#[test]
fn bloc_layouts_are_labelled_categories() {
    let svg = plot(&[
        "--model",
        "shared-evidence",
        "--blocs",
        "3,1,1",
        "--blocs",
        "1,1,1",
        "--blocs",
        "5,1,1",
        "--trials",
        "200",
    ]);
    let texts = texts(&svg);
    for layout in ["3+1+1", "1+1+1", "5+1+1"] {
        assert_eq!(
            texts.iter().filter(|(_, t)| t == layout).count(),
            1,
            "{layout} is one tick label"
        );
    }
    // Given out of n order: the ticks keep the order given (x of 3+1+1 < 1+1+1 < 5+1+1).
    let x = |l: &str| texts.iter().find(|(_, t)| t == l).unwrap().0;
    assert!(x("3+1+1") < x("1+1+1") && x("1+1+1") < x("5+1+1"));
}
