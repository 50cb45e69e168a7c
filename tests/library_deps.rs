//! `quorate` as a library (without its default feature `cli`) pulls in no command-line,
//! plotting, progress-bar, allocator or experiment-only crate: the dependency tree that
//! `cargo tree -p quorate -e normal --no-default-features` prints names none of them. The same
//! command with the default features must name them all, so the check reads the tree right.

use std::collections::BTreeSet;
use std::process::Command;

/// The crates only the `quorate` binary, its experiments and its benchmarks use.
const CLI_ONLY: &[&str] = &[
    "clap",
    "plotters",
    "indicatif",
    "mimalloc",
    "statrs",
    "tracing-subscriber",
    "metrics-exporter-prometheus",
];

/// The names of the crates `cargo tree -p quorate -e normal` lists, with `extra` flags.
fn tree(extra: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "-p", "quorate", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .args(extra)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_library_pulls_in_no_cli_crate() {
    let library = tree(&["--no-default-features"]);
    assert!(library.contains("quorate-coordinator"), "{library:?}");
    let found: Vec<&str> = CLI_ONLY
        .iter()
        .copied()
        .filter(|name| library.contains(*name))
        .collect();
    assert!(
        found.is_empty(),
        "`quorate` without feature `cli` depends on {found:?}"
    );
}

#[test]
fn the_cli_feature_pulls_them_in() {
    let cli = tree(&[]);
    let missing: Vec<&str> = CLI_ONLY
        .iter()
        .copied()
        .filter(|name| !cli.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "the default build lacks {missing:?}: the list above is stale"
    );
}
