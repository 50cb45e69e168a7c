//! [`DagBench::summary`]: the report `quorate bench dag` prints without `--json`.

use std::time::Duration;

use super::durable::CONCURRENT;
use super::DagBench;

impl DagBench {
    /// The human-readable report `quorate bench dag` prints without `--json`, one line per
    /// figure group. The elapsed time is printed in the unit that keeps its digits (s, ms, µs,
    /// ns, three decimals: `Duration`'s `{:.3?}`), so a short run never reads as 0.
    ///
    /// ```
    /// use quorate::bench_dag::DagBench;
    /// let b = DagBench {
    ///     layers: 2, width: 3, workers: 1, threads: 0, tasks: 6, result_bytes: 0,
    ///     cites: quorate::bench_dag::Cites::Inputs, elapsed_s: 0.5,
    ///     tasks_per_s: 12.0, tasks_per_s_runs: vec![12.0], baseline_round_trips_per_s_runs: vec![48.0],
    ///     baseline_round_trips_per_s: 48.0, ratio: 0.25, warmup: true, first_run_tasks_per_s: 6.0,
    ///     peak_rss_bytes_per_task: None, durable: None, distributed: None,
    /// };
    /// let text = b.summary();
    /// assert!(text.starts_with("tasks 6  elapsed 500.000ms  tasks_per_s 12  (2 layers x 3 wide"));
    /// // A run shorter than a millisecond keeps its digits.
    /// let quick = DagBench { elapsed_s: 0.000_042_5, ..b.clone() };
    /// assert!(quick.summary().starts_with("tasks 6  elapsed 42.500µs  "));
    /// assert!(text.contains("ratio 0.250"));
    /// assert!(!text.contains("RSS"), "no memory line without a figure");
    /// assert!(!text.contains("durable"), "no durable line without --store");
    /// let kept = DagBench {
    ///     durable: Some(quorate::bench_dag::DurableBench {
    ///         store: "b.redb".into(), tasks_per_s: 3.0, tasks_per_s_runs: vec![3.0],
    ///         ratio_to_memory: 0.25, writes_per_task: 6.5, commits_per_task: 2.25,
    ///         bytes_per_task: Some(1300.0), file_bytes: Some(7800), raw: None,
    ///     }),
    ///     ..b.clone()
    /// };
    /// assert!(kept.summary().contains(
    ///     "durable (--store b.redb): tasks_per_s 3 (runs: [3]); ratio to in memory 0.250; 6.5 writes and 2.25 commits per task; 1300 bytes on disk per task (7800 bytes)\n"
    /// ));
    /// assert!(!kept.summary().contains("raw etcd"), "no raw line without etcd");
    /// let etcd = DagBench {
    ///     durable: Some(quorate::bench_dag::DurableBench {
    ///         store: "etcd://127.0.0.1:2379/q".into(), bytes_per_task: None, file_bytes: None,
    ///         raw: Some(quorate::bench_dag::RawCas {
    ///             sequential_cas_per_s: 400.0, concurrent_cas_per_s: 1600.0,
    ///             batched_writes_per_s: 20000.0,
    ///             tasks_ratio_to_sequential: 0.0075, writes_ratio_to_batched: 0.000975,
    ///         }),
    ///         ..kept.durable.clone().unwrap()
    ///     }),
    ///     ..b.clone()
    /// };
    /// let text = etcd.summary();
    /// assert!(text.contains("2.25 commits per task\n"), "no bytes on disk for etcd: {text}");
    /// assert!(text.contains("raw etcd CAS in the same run: 400 sequential CAS/s, 1600 concurrent CAS/s (16 tasks), 20000 batched writes/s"));
    /// assert!(!text.contains("distributed"), "no distributed lines without --nats");
    /// let big = DagBench { result_bytes: 1024, ..b.clone() };
    /// assert!(big.summary().contains("(2 layers x 3 wide, 1 workers, 0 worker threads, answers of 1024 bytes;"));
    /// let uncited = DagBench { cites: quorate::bench_dag::Cites::Nothing, ..b.clone() };
    /// assert!(uncited.summary().contains("0 worker threads, answers citing nothing;"));
    /// ```
    #[must_use]
    pub fn summary(&self) -> String {
        let mut answers = match self.result_bytes {
            0 => String::new(),
            n => format!(", answers of {n} bytes"),
        };
        if self.cites == super::Cites::Nothing {
            answers += ", answers citing nothing";
        }
        let mut out = format!(
            "tasks {}  elapsed {:.3?}  tasks_per_s {:.0}  ({} layers x {} wide, {} workers, {} worker threads{answers}; every run completed; the median of {} runs: {:.0?})\n",
            self.tasks,
            Duration::from_secs_f64(self.elapsed_s.max(0.0)),
            self.tasks_per_s,
            self.layers,
            self.width,
            self.workers,
            self.threads,
            self.tasks_per_s_runs.len(),
            self.tasks_per_s_runs
        );
        out += &format!(
            "baseline: raw actix request/response {:.0} round trips/s in the same process; ratio {:.3}\n",
            self.baseline_round_trips_per_s, self.ratio
        );
        let warm = if self.warmup {
            "each measured run after an unmeasured warm-up run"
        } else {
            "no warm-up runs"
        };
        out += &format!(
            "{warm}; the process's first run: {:.0} tasks/s\n",
            self.first_run_tasks_per_s
        );
        if let Some(m) = self.peak_rss_bytes_per_task {
            out += &format!("peak RSS growth per task: {m:.0} bytes\n");
        }
        if let Some(d) = &self.durable {
            out += &format!(
                "durable (--store {}): tasks_per_s {:.0} (runs: {:.0?}); ratio to in memory {:.3}; {:.1} writes and {:.2} commits per task",
                d.store, d.tasks_per_s, d.tasks_per_s_runs, d.ratio_to_memory, d.writes_per_task, d.commits_per_task
            );
            if let (Some(per_task), Some(bytes)) = (d.bytes_per_task, d.file_bytes) {
                out += &format!("; {per_task:.0} bytes on disk per task ({bytes} bytes)");
            }
            out += "\n";
        }
        if let Some(r) = self.durable.as_ref().and_then(|d| d.raw.as_ref()) {
            out += &format!(
                "raw etcd CAS in the same run: {:.0} sequential CAS/s, {:.0} concurrent CAS/s ({CONCURRENT} tasks), {:.0} batched writes/s (100 per transaction); durable tasks/s over sequential CAS/s {:.3}, durable writes/s over batched writes/s {:.3}\n",
                r.sequential_cas_per_s, r.concurrent_cas_per_s, r.batched_writes_per_s, r.tasks_ratio_to_sequential, r.writes_ratio_to_batched
            );
        }
        if let Some(d) = &self.distributed {
            out += &d.summary();
        }
        out
    }
}
