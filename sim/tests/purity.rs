//! The cores read no clock and no operating-system randomness: time enters as a `Millis`
//! argument and ids come from the `IdSource` a core is built with. The real clock and the OS's
//! randomness enter only in the shells, through `quorate_workers::edge` (`Clock`,
//! `random_ids`). This scans the sources of `quorate-protocols` and of every core (supervisor,
//! peer, worker, gate, action book, ledgers) for the ways a clock or randomness is read.
//!
//! (Hash maps in the cores keep std's or ahash's per-map random keys against flooding; their
//! iteration order never reaches an effect or an event, which `determinism.rs` checks: every
//! schedule there builds its maps with fresh keys, and the same seed still prints the same
//! trace.)

use std::path::{Path, PathBuf};

/// Sources of protocols and of the cores, relative to the workspace root.
const PURE: &[&str] = &[
    "protocols/src",
    "coordinator/src/core",
    "coordinator/src/peer/core",
    "coordinator/src/peer/slot.rs",
    "workers/src/core.rs",
    "workers/src/core",
    "workers/src/attempt",
    "workers/src/gate.rs",
    "workers/src/book.rs",
    "workers/src/history.rs",
    "workers/src/progress.rs",
    "workers/src/delegate.rs",
    "shared-state/src/ledger",
];

/// Ways to read a clock or draw OS-seeded randomness.
const FORBIDDEN: &[&str] = &[
    "Instant",
    "SystemTime",
    "Utc::now",
    "Local::now",
    "elapsed(",
    "thread_rng",
    "OsRng",
    "getrandom",
    "rand::random",
    "fastrand::u",
    "fastrand::f",
    "Rng::new(",
    "RandomState::new",
    "hash_map::RandomState",
    "from_entropy",
    "now_v7",
    "new_v4",
    "random_ids",
];

fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("readable source dir") {
            files(&entry.expect("dir entry").path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

#[test]
fn no_clock_and_no_os_randomness_in_protocols_or_any_core() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = Vec::new();
    for p in PURE {
        let path = root.join(p);
        assert!(path.exists(), "{p} moved: update this list");
        files(&path, &mut sources);
    }
    assert!(sources.len() > 40, "only {} files found", sources.len());
    let mut found = Vec::new();
    for file in &sources {
        let text = std::fs::read_to_string(file).expect("utf-8 source");
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue; // comments may name what the code must not do
            }
            for word in FORBIDDEN {
                if line.contains(word) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "clock or randomness read in a core:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_finds_what_it_looks_for() {
    // The shells' edge module reads both, so the scan must see it there.
    let edge = Path::new(env!("CARGO_MANIFEST_DIR")).join("../workers/src/edge.rs");
    let text = std::fs::read_to_string(edge).expect("the edge module");
    for word in ["Instant", "SystemTime", "hash_map::RandomState"] {
        assert!(text.contains(word), "{word} not in edge.rs");
    }
}
