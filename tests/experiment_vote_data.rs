//! `experiment voting --from-csv`: a vote matrix made by the runtime's voter actors with a
//! known error correlation, and what the analysis recovers from it.

use std::path::{Path, PathBuf};

use quorate::experiment::models::Model;
use quorate::experiment::plurality::WrongAnswers;
use quorate::experiment::vote_data::{analyse, attractor_for_agreement, VoteDataError, VoteMatrix};
use quorate::experiment::vote_matrix::{make_vote_matrix, MatrixConfig};

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/experiments/vote-matrix.csv")
}

/// The configuration docs/experiments.md gives for the shipped matrix (the CLI defaults).
fn shipped_config() -> MatrixConfig {
    MatrixConfig {
        model: Model::CommonShock,
        voters: 7,
        questions: 400,
        p: 0.7,
        rho: 0.3,
        answers: 4,
        wrong: WrongAnswers::Uniform,
        seed: 0,
    }
}

#[test]
fn the_shipped_matrix_is_what_the_runtime_makes() {
    let made = make_vote_matrix(&shipped_config()).unwrap();
    let file = std::fs::read_to_string(shipped()).unwrap();
    assert_eq!(
        made, file,
        "regenerate with the command in docs/experiments.md"
    );
}

#[test]
fn the_known_correlation_is_recovered_within_its_interval() {
    let matrix = VoteMatrix::load(&shipped()).unwrap();
    assert_eq!((matrix.questions.len(), matrix.voters.len()), (400, 7));
    let report = analyse(&matrix, "vote-matrix.csv", 0);
    let c = report.error_correlation;
    assert!(c.lo <= 0.3 && 0.3 <= c.hi, "rho = 0.3 outside {c:?}");
    assert!(c.hi - c.lo < 0.2, "an informative interval: {c:?}");
    let p = report.mean_accuracy;
    assert!(p.lo <= 0.7 && 0.7 <= p.hi, "{p:?}");
    assert_eq!(report.answers, 4);
    // Common shock explains most agreement of wrong answers by the shared draws: the agreement
    // it leaves to independent wrong answers is close to the true uniform one, 1/(k-1) = 1/3,
    // where a model without shared draws needs far more (an attractor).
    let shock = report
        .fits
        .iter()
        .find(|f| f.model == "common-shock")
        .unwrap();
    assert!(
        (shock.wrong_answer_agreement - 1.0 / 3.0).abs() < 0.08,
        "{shock:?}"
    );
    let beta = report
        .fits
        .iter()
        .find(|f| f.model == "beta-binomial")
        .unwrap();
    assert!(beta.wrong_answer_agreement > 0.6, "{beta:?}");
    // Its predictions lie inside the data's bootstrap band at every n.
    let i = report
        .fits
        .iter()
        .position(|f| f.model == "common-shock")
        .unwrap();
    for row in &report.sizes {
        let predicted = row.predicted[i].unwrap();
        assert!(
            row.empirical.lo <= predicted && predicted <= row.empirical.hi,
            "{row:?}"
        );
    }
    // Independent voters (rho = 0) would predict more than the data shows at n = 7.
    let last = report.sizes.last().unwrap();
    assert!(
        last.predicted[0].unwrap() > last.empirical.value,
        "{last:?}"
    );
}

#[test]
fn uncorrelated_voters_show_no_correlation() {
    let mut config = shipped_config();
    config.rho = 0.0;
    config.questions = 300;
    config.seed = 5;
    let text = make_vote_matrix(&config).unwrap();
    let matrix = VoteMatrix::parse(Path::new("made.csv"), &text).unwrap();
    let c = analyse(&matrix, "made.csv", 1).error_correlation;
    assert!(c.lo <= 0.0 && 0.0 <= c.hi, "{c:?}");
    assert!(c.hi < 0.2, "{c:?}");
}

#[test]
fn attractor_weight_inverts_the_agreement() {
    for (k, w) in [(4, 1.0 / 3.0), (4, 0.6), (5, 0.9), (3, 0.5)] {
        let rest = (1.0 - w) / (k - 2) as f64;
        let s = w * w + (k - 2) as f64 * rest * rest;
        // At the uniform w = 1/(k-1) (the minimum of s(w)) the inverse is a square root:
        // a rounding error of s becomes ~1e-8 in w.
        assert!(
            (attractor_for_agreement(s, k) - w).abs() < 1e-6,
            "k {k} w {w}"
        );
    }
}

#[test]
fn bad_files_are_typed_errors_with_the_line() {
    let path = Path::new("bad.csv");
    let missing = VoteMatrix::parse(path, "question,voter,answer\nq,v,a\n").unwrap_err();
    assert!(
        matches!(
            missing,
            VoteDataError::MissingColumn {
                column: "correct",
                ..
            }
        ),
        "{missing}"
    );
    let text = "question,voter,answer,correct\nq1,a,x,x\nq1,b,y,y\n";
    let conflict = VoteMatrix::parse(path, text).unwrap_err();
    assert!(
        matches!(conflict, VoteDataError::Row { line: 3, .. }),
        "{conflict}"
    );
    let text = "question,voter,answer,correct\nq1,a,x,x\nq1,a,y,x\n";
    let twice = VoteMatrix::parse(path, text).unwrap_err();
    assert!(twice.to_string().contains("twice"), "{twice}");
    let text =
        "voter,correct,question,answer,extra\na,x,q1,\"x\",1\nb,x,q1,y,2\na,z,q2,z,3\nb,z,q2,z,4\n";
    let ok = VoteMatrix::parse(path, text).unwrap();
    assert_eq!(
        ok.answers,
        vec![vec![Some(0), Some(1)], vec![Some(0), Some(0)]]
    );
}

#[test]
fn from_csv_through_the_binary() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args(["experiment", "voting", "--from-csv"])
        .arg(shipped())
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["voters"], 7);
    assert_eq!(report["sizes"].as_array().unwrap().len(), 7);
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_quorate"))
        .args([
            "experiment",
            "voting",
            "--from-csv",
            "/nonexistent/votes.csv",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
