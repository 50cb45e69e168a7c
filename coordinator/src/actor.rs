//! The actix shell around [`SupervisorCore`]: it turns messages into core inputs, carries out the
//! core's effects, and arms one timer for the core's next timeout. No domain decisions here.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use quorate_protocols::{BoxPool, Envelope};
use quorate_state::{MemoryStore, PackedLog, PackedWriter};
use quorate_workers::{AssignBatch, Assignment, ControlMsg, ReportBatch, ReportMsg};
use tokio::sync::oneshot;

use quorate_protocols::wire::{Control, Report};
use quorate_protocols::{Payload, Precondition};
use quorate_state::PreconditionFailure;

use crate::drive::{Answer, Flow};
use crate::shell::{RunClock, Tick, Wakeup};
use crate::trace::TraceSink;
use crate::{CheckTicket, CommitOutcome, CommitTicket, Event, Record, RunReport, SupervisorCore};

/// How the supervisor reaches one worker.
#[derive(Clone, Debug)]
pub struct WorkerLink {
    /// Where assignments go (those one input produced for the worker, in batches of at most
    /// [`quorate_workers::BATCH`]).
    pub assign: Recipient<AssignBatch>,
    /// Where control messages go.
    pub control: Recipient<ControlMsg>,
}

/// Cancel the run (from a user or a test).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CancelRun;

/// Approve or reject node `node`'s pending approval.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct Decide {
    /// Node index in the plan.
    pub node: u32,
    /// The decision.
    pub approved: bool,
}

/// Worker `worker`'s lease changed (from the shell that watches the workers' leases in the
/// store of record): `live: false` when it expired ([`SupervisorCore::handle_worker_lost`]),
/// `true` when the worker holds one again ([`SupervisorCore::handle_worker_renewed`]). The
/// core decides what follows.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct WorkerLiveness {
    /// The worker's index (its link's).
    pub worker: usize,
    /// Whether it holds a lease now.
    pub live: bool,
}

/// The supervisor actor.
pub struct SupervisorActor {
    core: SupervisorCore,
    workers: Vec<WorkerLink>,
    results: Arc<MemoryStore<quorate_protocols::Payload>>,
    log: PackedWriter<Event>,
    /// Events per kind and gate refusals per class, published to `metrics` when the run stops
    /// (a counter update per event costs more than the event itself).
    tally: crate::run_metrics::RunTally,
    /// Assignments for each worker, sent as one message once the actor's mailbox is drained
    /// (see [`FlushAssignments`]), or as soon as a batch is full. Boxed on purpose: each
    /// assignment comes boxed from the core and goes on in an [`AssignBatch`] as it came.
    #[allow(clippy::vec_box)]
    outgoing: Vec<Vec<Box<Envelope<Assignment>>>>,
    /// A [`FlushAssignments`] is on its way to this actor.
    flush_pending: bool,
    /// Boxes of replies the core has read, handed to the workers with their next
    /// assignments for their replies to be written into (see [`quorate_protocols::BoxPool`]).
    spare_replies: BoxPool<Envelope<Report>>,
    trace: Option<TraceSink>,
    clock: RunClock,
    timer: Wakeup,
    done: Option<oneshot::Sender<RunReport>>,
    /// A durable run's journal, and the events not yet given to it.
    journal: Option<(std::sync::Arc<dyn crate::RunJournal>, Vec<Event>)>,
    /// The result commits of the drive under way, written to the store together once the core
    /// has no other effect left (see [`Burst::commit_results`]).
    commits: Vec<(String, Payload)>,
    /// Their tickets, in the same order.
    tickets: Vec<CommitTicket>,
    /// In a durable run, their keys and values again, for the journal once each is written
    /// (the lists are kept from one drive to the next, so a drive allocates none of them).
    written: Vec<(String, Payload)>,
}

impl std::fmt::Debug for SupervisorActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorActor")
            .field("run", &self.core.run())
            .finish_non_exhaustive()
    }
}

impl SupervisorActor {
    /// A supervisor that drives `core` over `workers`, merges results into `results`, logs every
    /// event to `log` (and `trace`), and sends the final report on `done`.
    pub fn new(
        core: SupervisorCore,
        workers: Vec<WorkerLink>,
        results: Arc<MemoryStore<quorate_protocols::Payload>>,
        log: Arc<PackedLog<Event>>,
        trace: Option<TraceSink>,
        done: oneshot::Sender<RunReport>,
    ) -> Self {
        let core_run = core.run();
        Self {
            core,
            outgoing: vec![Vec::new(); workers.len()],
            flush_pending: false,
            spare_replies: BoxPool::default(),
            workers,
            results,
            log: log.writer(core_run),
            tally: crate::run_metrics::RunTally::default(),
            trace,
            clock: RunClock::since(Instant::now()),
            timer: Wakeup::default(),
            done: Some(done),
            journal: None,
            commits: Vec::new(),
            tickets: Vec::new(),
            written: Vec::new(),
        }
    }

    /// The same supervisor in a durable run: its events and accepted results are written to
    /// `journal` before it acts on them (see [`crate::RunJournal`]).
    #[must_use]
    pub fn with_journal(mut self, journal: std::sync::Arc<dyn crate::RunJournal>) -> Self {
        self.journal = Some((journal, Vec::new()));
        self
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Carries out every pending effect ([`crate::drive::drive`] over the actor's [`Burst`]),
    /// then arms the timer for the core's next deadline, or stops the actor if the run stopped.
    ///
    /// The run log is held for the whole burst: one lock for all of an input's events instead
    /// of a lock and an unlock (two atomic operations) per event. Nothing here reads the log.
    fn drive(&mut self, ctx: &mut Context<Self>) {
        let writer = self.log.clone();
        let mut burst = Burst {
            workers: &self.workers,
            results: &self.results,
            log: writer.hold(),
            tally: &mut self.tally,
            outgoing: &mut self.outgoing,
            spare_replies: &mut self.spare_replies,
            trace: &mut self.trace,
            clock: self.clock,
            journal: &mut self.journal,
            commits: &mut self.commits,
            tickets: &mut self.tickets,
            written: &mut self.written,
            stopped: None,
        };
        // The result commits wait until the core has nothing else to carry out, then go to the
        // store as one batch; their answers bring more effects, and so on. The run cannot stop
        // with a commit unanswered (a task waiting for its commit is not terminal); were one
        // left, it would still be written, and the core would refuse its answer.
        loop {
            note(crate::drive::drive(&mut self.core, &mut burst).refused);
            if burst.commits.is_empty() {
                break;
            }
            debug_assert!(
                burst.stopped.is_none(),
                "the run stopped with a commit unanswered"
            );
            burst.commit_results(&mut self.core);
            if burst.stopped.is_some() {
                break;
            }
        }
        let Some(reason) = burst.stopped.take() else {
            burst.sync_journal();
            drop(burst);
            // The assignments leave once the mailbox is drained: the replies of several workers
            // that arrived together release their dependents into one batch per worker, not
            // one per reply batch (with several workers, batches would otherwise shrink to a
            // task or two, and each message costs as much as a task).
            if !self.flush_pending && self.outgoing.iter().any(|o| !o.is_empty()) {
                self.flush_pending = true;
                ctx.notify(FlushAssignments);
            }
            self.timer.arm(ctx, self.clock, self.core.poll_timeout());
            return;
        };
        tracing::info!(run = %self.core.run(), %reason, "run stopped");
        // Dropping the sink lets the trace writer finish. It goes first, before the journal's
        // last events, as it did before the drive loop (tests/durable_crash.rs kills a run at
        // its trace's last lines and expects to find it interrupted in the store).
        *burst.trace = None;
        burst.sync_journal();
        for w in 0..burst.outgoing.len() {
            burst.send_assignments(w);
        }
        burst.tally.publish();
        // Lets go of the run log before the report is sent: its reader may read it then.
        drop(burst);
        if let (Some(done), Some(report)) = (self.done.take(), self.core.final_report()) {
            let _ = done.send(report);
        }
        ctx.stop();
    }
}

/// The actor's side of one drive: what carries out the core's effects (see
/// [`crate::drive::SupervisorEnv`]), borrowed from the actor for the burst.
struct Burst<'a> {
    workers: &'a [WorkerLink],
    results: &'a MemoryStore<quorate_protocols::Payload>,
    /// The run log, held for the burst.
    log: quorate_state::PackedAppender<'a, Event>,
    tally: &'a mut crate::run_metrics::RunTally,
    #[allow(clippy::vec_box)]
    outgoing: &'a mut [Vec<Box<Envelope<Assignment>>>],
    spare_replies: &'a mut BoxPool<Envelope<Report>>,
    trace: &'a mut Option<TraceSink>,
    clock: RunClock,
    journal: &'a mut Option<(std::sync::Arc<dyn crate::RunJournal>, Vec<Event>)>,
    /// The result commits asked for since the last [`Burst::commit_results`].
    commits: &'a mut Vec<(String, Payload)>,
    tickets: &'a mut Vec<CommitTicket>,
    written: &'a mut Vec<(String, Payload)>,
    /// Why the run stopped, once it did (the drive halts there).
    stopped: Option<crate::StopReason>,
}

impl Burst<'_> {
    /// Writes the events collected since the last call to the journal, if any.
    fn sync_journal(&mut self) {
        if let Some((journal, pending)) = self.journal {
            if !pending.is_empty() {
                journal.events(pending);
                pending.clear();
            }
        }
    }

    /// Writes the results asked for since the last call into the store as one batch
    /// ([`MemoryStore::create_many_now`]: each shard locked once, instead of once per result)
    /// and hands the core each answer, in the order asked. A written result goes to the journal
    /// first, if any. Every task waits for its own answer as with a commit answered at once;
    /// only the other tasks' effects of the drive were carried out before it.
    fn commit_results(&mut self, core: &mut SupervisorCore) {
        let journal = self.journal.as_ref().map(|(journal, _)| journal);
        if journal.is_some() {
            self.written.extend(self.commits.iter().cloned());
        }
        let now = self.clock.now();
        let mut refused = Vec::new();
        let (mut tickets, mut written) = (self.tickets.drain(..), self.written.drain(..));
        self.results
            .create_many_now(self.commits.drain(..), |outcome| {
                let ticket = tickets.next().expect("one ticket per commit");
                let durable = written.next();
                let outcome = CommitOutcome::of_create(outcome);
                if let (CommitOutcome::Committed, Some(journal), Some((key, value))) =
                    (&outcome, journal, durable)
                {
                    journal.result(&key, &value);
                }
                refused.extend(core.handle_result_commit(now, ticket, outcome).err());
            });
        note(refused);
    }

    /// Sends worker `w` the assignments collected for it, after the events before them.
    fn send_assignments(&mut self, w: usize) {
        if !self.outgoing[w].is_empty() {
            self.sync_journal();
            send_batch(&mut self.outgoing[w], &self.workers[w], self.spare_replies);
        }
    }
}

/// Sends `outgoing` to `worker` as one [`AssignBatch`], if there is any, with as many boxes
/// from `spare` for the replies.
#[allow(clippy::vec_box)]
fn send_batch(
    outgoing: &mut Vec<Box<Envelope<Assignment>>>,
    worker: &WorkerLink,
    spare: &mut BoxPool<Envelope<Report>>,
) {
    if !outgoing.is_empty() {
        // The next batch is likely as large: start it at that size instead of regrowing.
        let size = outgoing.len();
        let batch = std::mem::replace(outgoing, Vec::with_capacity(size));
        worker.assign.do_send(AssignBatch(batch, spare.take(size)));
    }
}

impl crate::drive::SupervisorEnv for Burst<'_> {
    #[inline]
    fn now(&self) -> u64 {
        self.clock.now()
    }

    #[inline]
    fn dispatch(&mut self, worker: usize, envelope: Box<Envelope<Assignment>>) {
        self.outgoing[worker].push(envelope);
        if self.outgoing[worker].len() >= quorate_workers::BATCH {
            self.send_assignments(worker);
        }
    }

    fn control(&mut self, worker: usize, envelope: Box<Envelope<Control>>) {
        // After the assignments before it: a cancel never overtakes its task.
        self.send_assignments(worker);
        self.sync_journal();
        self.workers[worker].control.do_send(ControlMsg(*envelope))
    }

    /// Answered later, by [`Burst::commit_results`] once the drive has nothing else to do (so a
    /// store precondition checked in the same drive does not see the results it commits; the
    /// task's dependents, released only after its answer, do).
    fn commit_result(
        &mut self,
        ticket: CommitTicket,
        key: String,
        value: Payload,
    ) -> Answer<CommitOutcome> {
        self.tickets.push(ticket);
        self.commits.push((key, value));
        Answer::Later
    }

    fn check_preconditions(
        &mut self,
        _ticket: CheckTicket,
        checks: Vec<Precondition>,
    ) -> Answer<Result<(), PreconditionFailure>> {
        Answer::Now(quorate_state::check_preconditions(self.results, &checks))
    }

    #[inline]
    fn record(&mut self, core: &SupervisorCore, record: Record) {
        if let Some((_, pending)) = self.journal {
            pending.push(core.event(record.clone()));
        }
        let mut told = None;
        self.log.append_with(|at, names, out| {
            told = core.pack_record(&record, at, names, out);
        });
        self.tally.observe_told(told, &record.kind);
        if let Some(trace) = &self.trace {
            trace.send(core.event(record));
        }
    }

    /// The rest (the trace, the journal, the report) is the actor's, once the drive halted.
    fn stop(&mut self, _core: &SupervisorCore, reason: crate::StopReason) -> Flow {
        self.stopped = Some(reason);
        Flow::Halt
    }
}

/// Counts and logs the inputs the core refused (a rejected reply is in the run's counters and
/// trace already; this is the shell's view of every kind).
fn note(refused: impl IntoIterator<Item = crate::InputRefused>) {
    for error in refused {
        metrics::counter!("quorate_supervisor_inputs_refused_total").increment(1);
        tracing::debug!(%error, "supervisor input refused");
    }
}

impl Actor for SupervisorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.clock = RunClock::since(Instant::now());
        // A core rebuilt with `SupervisorCore::resume` continues the run from here.
        self.core.start(0);
        self.drive(ctx);
    }
}

impl Handler<ReportMsg> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, msg: ReportMsg, ctx: &mut Self::Context) {
        let _span =
            tracing::debug_span!("supervisor.reply", run = %self.core.run(), task = %msg.0.task)
                .entered();
        let now = self.now();
        note(self.core.handle_report(now, msg.0).err());
        self.core.pass_reply_boxes(&mut self.spare_replies);
        self.drive(ctx);
    }
}

impl Handler<ReportBatch> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, msg: ReportBatch, ctx: &mut Self::Context) {
        let _span = tracing::debug_span!("supervisor.replies", run = %self.core.run()).entered();
        let now = self.now();
        self.core.reuse_assignment_boxes(msg.1);
        note(self.core.handle_reports(now, msg.0));
        self.core.pass_reply_boxes(&mut self.spare_replies);
        self.drive(ctx);
    }
}

/// Sends every worker the assignments collected for it (the actor sends this to itself after a
/// drive that left some: it is handled once the messages already in the mailbox are).
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct FlushAssignments;

impl Handler<FlushAssignments> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, _: FlushAssignments, _: &mut Self::Context) {
        self.flush_pending = false;
        // The events before them went to the journal at the end of the drive that made them.
        for (outgoing, worker) in self.outgoing.iter_mut().zip(&self.workers) {
            send_batch(outgoing, worker, &mut self.spare_replies);
        }
    }
}

impl Handler<Tick> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, _: Tick, ctx: &mut Self::Context) {
        let _span = tracing::debug_span!("supervisor.tick", run = %self.core.run()).entered();
        self.timer.fired();
        let now = self.now();
        self.core.handle_tick(now);
        self.drive(ctx);
    }
}

impl Handler<CancelRun> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, _: CancelRun, ctx: &mut Self::Context) {
        let now = self.now();
        note(self.core.handle_cancel(now).err());
        self.drive(ctx);
    }
}

impl Handler<Decide> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, msg: Decide, ctx: &mut Self::Context) {
        let now = self.now();
        note(self.core.handle_approval(now, msg.node, msg.approved).err());
        self.drive(ctx);
    }
}

/// A reply the transport refused as unauthorized before it could be read (a linked run's
/// shell sends it; see [`SupervisorCore::handle_unauthorized_delivery`]): counted, logged and
/// traced like a forged reply the core refuses itself. Answers `false` if the run's report
/// was taken already (the sender counts it then).
#[derive(Clone, Copy, Debug, Message)]
#[rtype(result = "bool")]
pub struct UnauthorizedDelivery;

impl Handler<UnauthorizedDelivery> for SupervisorActor {
    type Result = bool;
    fn handle(&mut self, _: UnauthorizedDelivery, ctx: &mut Self::Context) -> bool {
        let now = self.now();
        let taken = self.core.handle_unauthorized_delivery(now);
        let counted = taken.is_ok();
        note(taken.err());
        self.drive(ctx);
        counted
    }
}

impl Handler<WorkerLiveness> for SupervisorActor {
    type Result = ();
    fn handle(&mut self, msg: WorkerLiveness, ctx: &mut Self::Context) {
        let now = self.now();
        let result = if msg.live {
            self.core.handle_worker_renewed(now, msg.worker)
        } else {
            self.core.handle_worker_lost(now, msg.worker)
        };
        note(result.err());
        self.drive(ctx);
    }
}
