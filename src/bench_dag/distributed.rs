//! `bench dag --store etcd://... --nats nats://...`: the figures of the distributed runs (the
//! supervisor and its workers exchanging every envelope over NATS JetStream, the run kept on
//! etcd) beside the cluster's raw CAS rate measured in the same process.

use serde::Serialize;

use super::RawCas;

/// The issue's goal: the distributed path at this fraction of the raw sequential CAS rate.
pub const GOAL: f64 = 0.5;

/// What a distributed run's stream carried, beside what its processes sent and read (the
/// median run's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Carried {
    /// Envelopes the supervisor published (assignments and control messages), as acked by the
    /// stream.
    pub supervisor_published: u64,
    /// Envelopes the workers published (their replies), as acked by the stream.
    pub workers_published: u64,
    /// Of all those publishes, the ones the stream deduped by their `Nats-Msg-Id`.
    pub deduped: u64,
    /// Envelopes the supervisor core sent (the run report's `messages.sent`).
    pub report_sent: u64,
    /// Replies that reached the supervisor core (the run report's `messages.delivered`).
    pub report_delivered: u64,
    /// Messages the stream stored.
    pub stored: u64,
    /// Deliveries by all consumers, redeliveries included.
    pub delivered: u64,
    /// Of those, redeliveries.
    pub redelivered: u64,
    /// Messages the stream still held at the end (0: every one acked).
    pub held: u64,
    /// Delivered, not acked, at the end.
    pub ack_pending: u64,
}

impl Carried {
    /// Whether the stream carried exactly the envelopes the run sent: every publish stored
    /// once and delivered once, none redelivered, none left, and the publishes are the
    /// envelopes the supervisor core sent plus the replies it received.
    ///
    /// ```
    /// use quorate::bench_dag::Carried;
    /// let c = Carried {
    ///     supervisor_published: 6, workers_published: 6, report_sent: 6, report_delivered: 6,
    ///     stored: 12, delivered: 12, ..Carried::default()
    /// };
    /// assert!(c.exact());
    /// assert!(!Carried { redelivered: 1, delivered: 13, ..c }.exact());
    /// assert!(!Carried { held: 1, ..c }.exact());
    /// assert!(!Carried { report_sent: 7, ..c }.exact());
    /// ```
    #[must_use]
    pub fn exact(&self) -> bool {
        let published = self.supervisor_published + self.workers_published;
        published == self.stored
            && self.deduped == 0
            && self.delivered == self.stored
            && self.redelivered == 0
            && self.held == 0
            && self.ack_pending == 0
            && self.supervisor_published == self.report_sent
            && self.workers_published == self.report_delivered
    }
}

/// `bench dag --store etcd://... --nats nats://...`: each measured run is followed by a run of
/// the same DAG whose supervisor and workers (in this process, each with its own NATS
/// connection and consumer) exchange every envelope over the JetStream server, the run kept on
/// the etcd cluster; then the cluster's raw CAS rate.
#[derive(Clone, Debug, Serialize)]
pub struct DistributedBench {
    /// The store (the etcd URL).
    pub store: String,
    /// The median run's id: its events and results are kept on the store under it.
    pub run_id: quorate_protocols::RunId,
    /// Worker consumers (`--workers`).
    pub workers: usize,
    /// Tasks per second of the median distributed run (the run itself: from the supervisor's
    /// start to its report; the connections, the stream and its consumers are made before).
    pub tasks_per_s: f64,
    /// Tasks per second of every distributed run, in order.
    pub tasks_per_s_runs: Vec<f64>,
    /// Setting up the median run (connections, stream, consumers), seconds.
    pub setup_s: f64,
    /// Distributed tasks/s over in-memory tasks/s, each the median of its runs.
    pub ratio_to_memory: f64,
    /// Records the median run wrote to etcd per task (events, results).
    pub writes_per_task: f64,
    /// etcd transactions of the median run per task.
    pub commits_per_task: f64,
    /// Inputs of the median run's supervisor: reply batches handed to its core (each one
    /// journal write: its results and events in at most a few transactions).
    pub supervisor_inputs: u64,
    /// Replies per supervisor input in the median run.
    pub replies_per_input: f64,
    /// Tasks/s over the raw sequential CAS/s (the goal: at least [`GOAL`]).
    pub ratio_to_sequential_cas: f64,
    /// Tasks/s over the raw concurrent CAS/s.
    pub ratio_to_concurrent_cas: f64,
    /// Writes/s (tasks/s x writes per task) over the raw batched writes/s.
    pub writes_ratio_to_batched: f64,
    /// Whether `ratio_to_sequential_cas >= GOAL`.
    pub goal_met: bool,
    /// What the median run's stream carried.
    pub carried: Carried,
    /// Whether every run's stream carried exactly what its run sent ([`Carried::exact`]).
    pub every_run_exact: bool,
}

/// One distributed run's figures.
#[derive(Clone, Copy, Debug)]
pub(super) struct DistributedRun {
    pub(super) run: quorate_protocols::RunId,
    pub(super) elapsed_s: f64,
    pub(super) setup_s: f64,
    pub(super) writes: u64,
    pub(super) commits: u64,
    pub(super) inputs: u64,
    pub(super) replies: u64,
    pub(super) carried: Carried,
}

/// The figures of `runs` (one per measured run) against `raw` and the in-memory median.
pub(super) fn summarize(
    store: String,
    workers: usize,
    tasks: usize,
    runs: &[DistributedRun],
    raw: &RawCas,
    memory_tasks_per_s: f64,
) -> Option<DistributedBench> {
    let rates: Vec<f64> = runs.iter().map(|r| tasks as f64 / r.elapsed_s).collect();
    let m = super::median_index(&rates)?;
    let run = runs[m];
    let tasks_per_s = rates[m];
    let writes_per_task = run.writes as f64 / tasks as f64;
    let ratio_to_sequential_cas = tasks_per_s / raw.sequential_cas_per_s;
    Some(DistributedBench {
        store,
        run_id: run.run,
        workers,
        tasks_per_s,
        setup_s: run.setup_s,
        ratio_to_memory: tasks_per_s / memory_tasks_per_s,
        writes_per_task,
        commits_per_task: run.commits as f64 / tasks as f64,
        supervisor_inputs: run.inputs,
        replies_per_input: run.replies as f64 / run.inputs.max(1) as f64,
        ratio_to_sequential_cas,
        ratio_to_concurrent_cas: tasks_per_s / raw.concurrent_cas_per_s,
        writes_ratio_to_batched: tasks_per_s * writes_per_task / raw.batched_writes_per_s,
        goal_met: ratio_to_sequential_cas >= GOAL,
        carried: run.carried,
        every_run_exact: runs.iter().all(|r| r.carried.exact()),
        tasks_per_s_runs: rates,
    })
}

impl DistributedBench {
    /// The lines `bench dag` prints for the distributed runs.
    #[must_use]
    pub fn summary(&self) -> String {
        let c = &self.carried;
        let goal = if self.goal_met { "met" } else { "not met" };
        format!(
            "distributed (supervisor + {} workers over NATS JetStream, kept on {}): tasks_per_s {:.0} (runs: {:.0?}); ratio to in memory {:.3}; {:.1} writes and {:.2} etcd transactions per task; {:.1} replies per supervisor input\n\
             distributed over raw etcd: tasks/s over sequential CAS/s {:.3} (goal >= {GOAL}: {goal}), over concurrent CAS/s {:.3}; writes/s over batched writes/s {:.3}\n\
             NATS carried: stored {}  delivered {}  redelivered {}  held {}  (published: supervisor {}, workers {}; the report: sent {}, delivered {}); every run exact: {}\n",
            self.workers,
            self.store,
            self.tasks_per_s,
            self.tasks_per_s_runs,
            self.ratio_to_memory,
            self.writes_per_task,
            self.commits_per_task,
            self.replies_per_input,
            self.ratio_to_sequential_cas,
            self.ratio_to_concurrent_cas,
            self.writes_ratio_to_batched,
            c.stored,
            c.delivered,
            c.redelivered,
            c.held,
            c.supervisor_published,
            c.workers_published,
            c.report_sent,
            c.report_delivered,
            self.every_run_exact,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(elapsed_s: f64, exact: bool) -> DistributedRun {
        let carried = Carried {
            supervisor_published: 10,
            workers_published: 10,
            report_sent: 10,
            report_delivered: 10,
            stored: 20,
            delivered: 20,
            held: u64::from(!exact),
            ..Carried::default()
        };
        DistributedRun {
            run: quorate_protocols::RunId::from_u128(7),
            elapsed_s,
            setup_s: 0.25,
            writes: 80,
            commits: 4,
            inputs: 4,
            replies: 10,
            carried,
        }
    }

    fn raw(sequential: f64) -> RawCas {
        RawCas {
            sequential_cas_per_s: sequential,
            concurrent_cas_per_s: 4.0 * sequential,
            batched_writes_per_s: 8000.0,
            tasks_ratio_to_sequential: 0.0,
            writes_ratio_to_batched: 0.0,
        }
    }

    #[test]
    fn the_median_run_against_the_raw_rates_and_the_goal() {
        // 10 tasks in 0.1 s, 0.02 s and 0.05 s: 100, 500 and 200 tasks/s; the median is 200.
        let runs = [run(0.1, true), run(0.02, true), run(0.05, true)];
        let b = summarize("etcd://h:1/p".into(), 2, 10, &runs, &raw(400.0), 1000.0).expect("runs");
        assert_eq!(b.tasks_per_s, 200.0);
        assert_eq!(b.tasks_per_s_runs, vec![100.0, 500.0, 200.0]);
        assert_eq!(b.ratio_to_sequential_cas, 0.5);
        assert!(
            b.goal_met,
            "exactly half the sequential rate meets the goal"
        );
        assert_eq!(b.ratio_to_concurrent_cas, 0.125);
        assert_eq!(b.writes_per_task, 8.0);
        assert_eq!(b.writes_ratio_to_batched, 0.2);
        assert_eq!(b.ratio_to_memory, 0.2);
        assert_eq!(b.replies_per_input, 2.5);
        assert!(b.every_run_exact);
        let text = b.summary();
        assert!(
            text.contains("tasks_per_s 200 (runs: [100, 500, 200])"),
            "{text}"
        );
        assert!(
            text.contains("over sequential CAS/s 0.500 (goal >= 0.5: met)"),
            "{text}"
        );
        assert!(text.contains("NATS carried: stored 20  delivered 20  redelivered 0  held 0"));

        let slow = summarize("e".into(), 2, 10, &runs, &raw(401.0), 1000.0).expect("runs");
        assert!(!slow.goal_met);
        assert!(slow.summary().contains("(goal >= 0.5: not met)"));
        let one_off = [run(0.1, true), run(0.1, false)];
        let b = summarize("e".into(), 2, 10, &one_off, &raw(1.0), 1.0).expect("runs");
        assert!(!b.every_run_exact, "one run's stream held a message");
        assert!(summarize("e".into(), 2, 10, &[], &raw(1.0), 1.0).is_none());
    }
}
