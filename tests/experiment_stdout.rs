//! `-` is stdout for every `--json`, `--csv` and `--plot` of `quorate experiment` and
//! `quorate eval`, through the binary; and `eval` runs every example plan in both topologies.

mod support;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary in a fresh directory (so a file named `-` would show up there).
fn quorate(args: &[&str]) -> (Output, std::path::PathBuf) {
    let dir = support::temp_path("cwd");
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(args)
        .current_dir(&dir)
        .output()
        .expect("the binary runs");
    (out, dir)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn no_dash_file(dir: &Path) {
    assert!(!dir.join("-").exists(), "a file named `-` was written");
}

#[test]
fn json_dash_is_stdout_for_every_experiment() {
    let cases: [&[&str]; 3] = [
        &[
            "experiment",
            "critical-path",
            "--workers",
            "1,2",
            "--json",
            "-",
        ],
        &[
            "experiment",
            "topology",
            "--agents",
            "2,3",
            "--rounds",
            "1",
            "--repeats",
            "1",
            "--json",
            "-",
        ],
        &[
            "experiment",
            "voting",
            "--voters",
            "1,3",
            "--rho",
            "0",
            "--trials",
            "50",
            "--runtime-trials",
            "0",
            "--json",
            "-",
        ],
    ];
    for args in cases {
        let (out, dir) = quorate(args);
        assert_eq!(out.status.code(), Some(0), "{args:?} {out:?}");
        let text = stdout(&out);
        let value: serde_json::Value =
            serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"));
        assert!(value.is_object() || value.is_array(), "{args:?}");
        no_dash_file(&dir);
    }
}

#[test]
fn csv_and_plot_dash_are_stdout() {
    let (out, dir) = quorate(&[
        "experiment",
        "critical-path",
        "--workers",
        "1,2",
        "--csv",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("dag,tasks,workers,"),
        "only the CSV: {text}"
    );
    assert!(text.lines().count() > 2, "{text}");
    no_dash_file(&dir);

    let (out, dir) = quorate(&[
        "experiment",
        "critical-path",
        "--workers",
        "1,2",
        "--plot",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("<svg") && text.trim_end().ends_with("</svg>"),
        "{text}"
    );
    no_dash_file(&dir);

    // Two outputs on stdout would interleave: refused as bad input.
    let (out, _) = quorate(&["experiment", "critical-path", "--csv", "-", "--json", "-"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn eval_csv_dash_is_stdout() {
    let plan = support::plan("all_inputs.toml");
    let plan = plan.to_str().unwrap();
    let (out, dir) = quorate(&[
        "eval",
        plan,
        "--seeds",
        "1",
        "--topology",
        "star",
        "--csv",
        "-",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.starts_with("plan,topology,seed,"),
        "only the CSV: {text}"
    );
    assert_eq!(text.lines().count(), 2, "{text}");
    no_dash_file(&dir);
}

/// The delegation plans hold unit variants TOML cannot write back: eval used to re-serialise
/// each plan to switch its topology and aborted with "unsupported unit type" (exit 2).
#[test]
fn eval_runs_every_example_plan_in_both_topologies() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plans");
    let mut plans: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        // A plan whose agents are models needs a model server (and the cargo feature `llm`):
        // the model tier runs those (tests/model_tier.rs).
        .filter(|p| !std::fs::read_to_string(p).unwrap().contains("[models."))
        .map(|p| p.display().to_string())
        .collect();
    plans.sort();
    assert!(plans.iter().any(|p| p.ends_with("delegation.toml")));
    assert!(!plans.iter().any(|p| p.ends_with("llm_pipeline.toml")));
    let mut args = vec!["eval", "--topology", "both", "--seeds", "1", "--json", "-"];
    args.extend(plans.iter().map(String::as_str));
    let (out, _) = quorate(&args);
    assert_ne!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2 * plans.len());
    for plan in &plans {
        for topology in ["star", "peer"] {
            let run = runs
                .iter()
                .find(|r| r["plan"] == plan.as_str() && r["topology"] == topology)
                .unwrap_or_else(|| panic!("{plan} {topology} missing"));
            assert!(run.get("error").is_none(), "{run}");
        }
    }
}
