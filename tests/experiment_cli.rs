//! The `experiment` subcommands as the command line sees them: flags parse, files are written,
//! bad input exits 2.

use std::process::ExitCode;

use clap::Parser;
use quorate::experiment::cli::{run, ExperimentCommand};

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: ExperimentCommand,
}

fn exit(args: &[&str]) -> ExitCode {
    let mut argv = vec!["experiment"];
    argv.extend_from_slice(args);
    run(Cli::try_parse_from(argv).unwrap().command)
}

#[test]
fn every_experiment_writes_its_files() {
    let dir = std::env::temp_dir().join(format!("quorate-exp-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let (csv, json, svg) = (path("t.csv"), path("t.json"), path("t.svg"));
    let code = exit(&[
        "topology",
        "--agents",
        "2,3",
        "--rounds",
        "2",
        "--msg-tokens",
        "5",
        "--mode",
        "artifact",
        "--csv",
        &csv,
        "--json",
        &json,
        "--plot",
        &svg,
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    let table = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(table.lines().count(), 5, "{table}");
    // The match columns (messages, tokens, per-agent context) say true in every row.
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l.split(',').filter(|f| *f == "true").count() == 3),
        "{table}"
    );
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let text = std::fs::read_to_string(&json).unwrap();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 4);

    let (csv, svg) = (path("v.csv"), path("v.svg"));
    let code = exit(&[
        "voting",
        "--voters",
        "1,3",
        "--rho",
        "0,1",
        "--trials",
        "200",
        "--runtime-trials",
        "5",
        "--csv",
        &csv,
        "--plot",
        &svg,
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 5);
    let code = exit(&[
        "voting",
        "--model",
        "shared-evidence",
        "--blocs",
        "3,1,1",
        "--trials",
        "100",
        "--runtime-trials",
        "3",
        "--plot",
        &svg,
    ]);
    assert_eq!(code, ExitCode::SUCCESS);

    let (csv, svg) = (path("c.csv"), path("c.svg"));
    let code = exit(&[
        "critical-path",
        "--workers",
        "1,2",
        "--csv",
        &csv,
        "--plot",
        &svg,
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.contains("parallel-merge,3,2,10,"), "{rows}");
    assert!(rows.contains("chain-merge,3,2,16,"), "{rows}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_exits_2() {
    let bad = ExitCode::from(2);
    let cases: [&[&str]; 11] = [
        &[
            "voting", "--model", "bahadur", "--voters", "5", "--rho", "0.9", "--trials", "5",
        ],
        &["voting", "--model", "shared-evidence", "--blocs", "3,0"],
        &["voting", "--p", "1.5", "--trials", "5"],
        &["topology", "--agents", "0"],
        &["critical-path", "--dag", "/nonexistent/dag.toml"],
        &["critical-path", "--workers", "0"],
        &["voting", "--answers", "1", "--trials", "5"],
        &["voting", "--trials", "0"],
        &[
            "voting",
            "--accuracies",
            "0.9,0.8",
            "--voters",
            "3",
            "--trials",
            "5",
        ],
        &["vote-matrix", "--model", "bahadur", "--out", "-"],
        &["topology", "--repeats", "0"],
    ];
    for args in cases {
        assert_eq!(exit(args), bad, "{args:?}");
    }
}

#[test]
fn the_nats_transport_needs_its_address_and_the_address_its_transport() {
    let base = [
        "topology",
        "--agents",
        "2",
        "--rounds",
        "1",
        "--repeats",
        "1",
    ];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        exit(&args)
    };
    assert_eq!(with(&["--transport", "nats"]), ExitCode::from(2));
    assert_eq!(
        with(&["--nats", "nats://127.0.0.1:4222"]),
        ExitCode::from(2)
    );
    assert_eq!(with(&["--transport", "in-process"]), ExitCode::SUCCESS);
}
