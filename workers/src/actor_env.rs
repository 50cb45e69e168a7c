//! The worker actor as its core's drive environment (a child module of `actor`): what the one
//! drive loop ([`crate::drive::drive`]) asks of the actor, carried out with its [`Shell`].

use std::time::Instant;

use actix::{AsyncContext, Context};
use quorate_protocols::drive::Answer;
use quorate_protocols::wire::Report;
use quorate_protocols::{ActionId, Envelope, Millis, TaskId};
use tracing::Instrument;

use super::{
    record_call_duration, CallEnded, CallKind, QueryEnded, Replies, ReportMsg, Shell, WorkerActor,
};
use crate::drive::{QueryEnd, ToolCall, ToolQuery, WorkerEnv};
use crate::failover::{Fenced, StoredBook};
use crate::tool::{ToolAnswer, ToolHandle};

/// The worker actor as the drive loop's environment: tool calls and queries run as spawned
/// futures (`Answer::Later`: their ends come back as [`CallEnded`] / [`QueryEnded`]), store
/// checks and book writes answer at once.
pub(super) struct ActorEnv<'a> {
    pub(super) shell: &'a mut Shell,
    /// Where a call's or query's end comes back (its address is taken only for those).
    pub(super) ctx: &'a mut Context<WorkerActor>,
}

impl WorkerEnv for ActorEnv<'_> {
    #[inline]
    fn now(&mut self) -> Millis {
        self.shell.clock.now()
    }

    #[inline]
    fn keeps_book_before(&self, tool: &ToolHandle) -> bool {
        self.shell.books.is_some() && tool.side_effect().writes()
    }

    fn write_book(&mut self, task: TaskId, book: StoredBook) -> Result<(), Fenced> {
        let Some(books) = &self.shell.books else {
            return Ok(());
        };
        let written = books.update(task, &mut |stored| {
            StoredBook::write(stored, task, book.clone())
        });
        written.inspect_err(|fenced| {
            metrics::counter!("quorate_worker_fenced_total").increment(1);
            tracing::warn!(%fenced, "attempt fenced off");
        })
    }

    fn call_tool(&mut self, call: ToolCall) -> Answer<Option<ToolAnswer>> {
        let ToolCall {
            action,
            tool,
            handle,
            params,
            digest,
            deadline,
            call: tag,
            ..
        } = call;
        metrics::counter!("quorate_worker_tool_calls_total").increment(1);
        let span = self.shell.call_span(CallKind::Call, action, &tool);
        if let Some(journal) = &self.shell.journal {
            journal.intent(&crate::ActionIntent {
                action,
                tool: tool.clone(),
                digest,
            });
        }
        let call = handle.call(action, params);
        let me = self.ctx.address();
        let wait = self.shell.wait_until(deadline);
        let fut_span = span.clone();
        let kept_span = span.clone();
        let task = actix::spawn(
            async move {
                let started = Instant::now();
                let answer = tokio::time::timeout(wait, call).await.ok();
                let outcome = match &answer {
                    Some(ToolAnswer::Lost { .. }) => "lost",
                    Some(_) => "answered",
                    None => "timed-out",
                };
                fut_span.record("outcome", outcome);
                record_call_duration(tool, outcome, started.elapsed());
                me.do_send(CallEnded {
                    action,
                    call: tag,
                    answer,
                });
            }
            .instrument(span),
        );
        self.shell.in_flight.insert(tag, (task, kept_span));
        Answer::Later
    }

    fn abort_call(&mut self, _: TaskId, _: ActionId, call: u64) {
        if let Some((task, span)) = self.shell.in_flight.remove(&call) {
            // Dropping the tool's future closes what it had open (a model's HTTP request); no
            // answer comes back.
            task.abort();
            span.record("outcome", "aborted");
            metrics::counter!("quorate_worker_calls_aborted_total").increment(1);
        }
    }

    fn query_tool(&mut self, query: ToolQuery) -> Answer<QueryEnd> {
        let ToolQuery {
            action,
            tool,
            handle,
            deadline,
            ..
        } = query;
        let span = self.shell.call_span(CallKind::Query, action, &tool);
        let query = handle.query(action);
        let me = self.ctx.address();
        let wait = self.shell.wait_until(deadline);
        let fut_span = span.clone();
        actix::spawn(
            async move {
                let end = match tokio::time::timeout(wait, query).await {
                    Ok(answer) => QueryEnd::Answered(answer),
                    Err(_) => QueryEnd::TimedOut,
                };
                let outcome = match end {
                    QueryEnd::Answered(_) => "answered",
                    QueryEnd::TimedOut => "timed-out",
                };
                fut_span.record("outcome", outcome);
                me.do_send(QueryEnded { action, end });
            }
            .instrument(span),
        );
        Answer::Later
    }

    fn check_preconditions(
        &mut self,
        _: ActionId,
        checks: Vec<quorate_protocols::Precondition>,
    ) -> Answer<Result<(), quorate_state::PreconditionFailure>> {
        // Asked only of a worker with a store (`with_store`): the core refuses the guarded
        // writes of one without.
        Answer::Now(match &self.shell.store {
            Some(store) => quorate_state::check_preconditions(store, &checks),
            None => Err(quorate_state::PreconditionFailure::NoStore),
        })
    }

    #[inline]
    fn reply(&mut self, envelope: Box<Envelope<Report>>) {
        self.shell.replied(&envelope);
        match &self.shell.reports {
            Replies::Each(to) => {
                metrics::counter!("quorate_worker_replies_total").increment(1);
                to.do_send(ReportMsg(*envelope));
            }
            Replies::Batched(_) => self.shell.outbox.push(envelope),
        }
    }
}
