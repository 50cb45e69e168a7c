//! Experiment 3: list scheduling on a virtual clock against the critical-path bound.

use quorate::experiment::critical_path::{builtin, evaluate, simulate, Dag, DagError, DagSpec};

fn named(name: &str) -> Dag {
    builtin().into_iter().find(|d| d.name == name).unwrap()
}

#[test]
fn the_seed_examples() {
    // Independent 6 s and 8 s tasks plus a 2 s merge: 10 s on two workers.
    let parallel = evaluate(&named("parallel-merge"), 2, false);
    assert_eq!(parallel.makespan_s, 10.0);
    assert_eq!(parallel.critical_path_s, 10.0);
    assert_eq!(parallel.ratio, 1.0);
    // One worker has to do all 16 s of work.
    assert_eq!(
        evaluate(&named("parallel-merge"), 1, false).makespan_s,
        16.0
    );
    // If the second depends on the first: no less than 16 s, however many workers.
    for w in [1, 2, 4] {
        let chained = evaluate(&named("chain-merge"), w, false);
        assert_eq!(chained.critical_path_s, 16.0);
        assert_eq!(chained.makespan_s, 16.0);
    }
    // A 1 s hand-off on each edge: 8 + 1 + 2.
    assert_eq!(
        evaluate(&named("parallel-merge-handoff-1s"), 2, false).makespan_s,
        11.0
    );
}

#[test]
fn makespan_between_the_bound_and_graham() {
    for dag in builtin() {
        for w in 1..=6 {
            let row = evaluate(&dag, w, true);
            assert!(row.makespan_s + 1e-9 >= row.lower_bound_s, "{row:?}");
            assert_eq!(row.schedule.len(), dag.len());
            if !dag.name.contains("handoff") && dag.name != "diamond-chain" {
                assert!(row.ratio <= 2.0 - 1.0 / w as f64 + 1e-9, "{row:?}");
            }
            // No worker runs two tasks at once.
            for a in &row.schedule {
                for b in &row.schedule {
                    if a.task != b.task && a.worker == b.worker {
                        assert!(a.end_ms <= b.start_ms || b.end_ms <= a.start_ms);
                    }
                }
            }
        }
    }
}

#[test]
fn dag_files_toml_and_json() {
    let dir = std::env::temp_dir().join(format!("quorate-cp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml_path = dir.join("dag.toml");
    std::fs::write(
        &toml_path,
        "name = \"mine\"\nhandoff_s = 0.5\n\n[[task]]\nid = \"a\"\nduration_s = 6\n\n[[task]]\nid = \"b\"\nduration_s = 8\n\n[[task]]\nid = \"merge\"\nduration_s = 2\ndeps = [\"a\", \"b\"]\n",
    )
    .unwrap();
    let dag = Dag::load(&toml_path).unwrap();
    assert_eq!(evaluate(&dag, 2, false).makespan_s, 10.5);
    let json_path = dir.join("dag.json");
    std::fs::write(
        &json_path,
        r#"{"name":"cyc","task":[{"id":"a","duration_s":1,"deps":["b"]},{"id":"b","duration_s":1,"deps":["a"]}]}"#,
    )
    .unwrap();
    assert!(matches!(Dag::load(&json_path), Err(DagError::Cycle(_))));
    let spec: DagSpec =
        serde_json::from_str(r#"{"name":"x","task":[{"id":"a","duration_s":-1}]}"#).unwrap();
    assert!(matches!(
        Dag::from_spec(&spec),
        Err(DagError::BadTime { .. })
    ));
    let spec: DagSpec =
        serde_json::from_str(r#"{"name":"x","task":[{"id":"a","duration_s":1,"deps":["zz"]}]}"#)
            .unwrap();
    assert!(matches!(
        Dag::from_spec(&spec),
        Err(DagError::UnknownDep { .. })
    ));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_layered_dag_schedules_to_its_known_makespans() {
    // layered-4x4 (16 tasks, critical path 15 s, 46 s of work): with 3 workers the list schedule
    // takes 16 s, one second above max(15, 46/3); with 4 it reaches the 15 s critical path.
    let dag = named("layered-4x4");
    let makespan = |w| simulate(&dag, w).iter().map(|s| s.end_ms).max().unwrap();
    assert_eq!(makespan(3), 16_000);
    assert_eq!(makespan(4), 15_000);
}
