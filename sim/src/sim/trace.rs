//! A schedule's trace: one line per thing that happened (a delivery with its envelope's ids, a
//! supervisor tick, an event of the run log with its ids, a crash), in order. Every line is fed
//! to the trace hash ([`crate::Outcome::trace_hash`]), ids included; with [`Options::trace`]
//! the lines are also kept as text ([`crate::Outcome::trace`]), which
//! `quorate-sim --seed S --trace` prints.
//!
//! The hash takes each line's fields and ids in binary rather than its text: formatting every
//! uuid and event of a campaign only to hash it would cost more than the schedule itself.
//!
//! Ids are in the lines (run, task, dedupe key, correlation id): every core draws them from an
//! `IdSource` forked from the schedule's seed, so the same seed gives the same bytes.

use std::fmt::Write as _;

use quorate_coordinator::Event;
use quorate_protocols::{ActionId, Envelope};
use sha2::{Digest, Sha256};

use super::{Msg, Options};
use crate::check::{event_line, hash_event};

/// The trace being written.
pub(super) struct Trace {
    hasher: Sha256,
    /// The text, when the schedule keeps it.
    text: Option<String>,
}

impl Trace {
    pub(super) fn new(opts: &Options) -> Self {
        Self {
            hasher: Sha256::new(),
            text: opts.trace.then(String::new),
        }
    }

    /// Adds the line `{at} {what}` (a tick, a crash: rare, hashed as text).
    pub(super) fn note(&mut self, at: u64, what: std::fmt::Arguments<'_>) {
        let line = format!("{at} {what}\n");
        self.hasher.update(line.as_bytes());
        if let Some(text) = &mut self.text {
            text.push_str(&line);
        }
    }

    /// Adds the delivery of `msg` at `at`.
    pub(super) fn delivery(&mut self, at: u64, msg: &Msg) {
        self.hasher.update(at.to_le_bytes());
        hash_msg(&mut self.hasher, msg);
        if let Some(text) = &mut self.text {
            let _ = writeln!(text, "{at} {}", Delivery(msg));
        }
    }

    /// Adds event `e`, logged at `at`.
    pub(super) fn event(&mut self, at: u64, e: &Event) {
        self.hasher.update(at.to_le_bytes());
        hash_event(&mut self.hasher, e);
        if let Some(text) = &mut self.text {
            let _ = writeln!(text, "{at} event {}", event_line(e));
        }
    }

    /// The hash of every line, and the text if it was kept.
    pub(super) fn finish(self) -> ([u8; 32], Option<String>) {
        (self.hasher.finalize().into(), self.text)
    }
}

fn hash_envelope<P>(h: &mut Sha256, e: &Envelope<P>) {
    for id in [
        e.run.as_uuid(),
        e.task.as_uuid(),
        e.dedupe.as_uuid(),
        e.correlation.as_uuid(),
        e.sender.agent.as_uuid(),
    ] {
        h.update(id.as_bytes());
    }
    h.update(e.attempt.to_le_bytes());
    h.update(e.state_version.raw().to_le_bytes());
}

fn hash_action(h: &mut Sha256, a: &ActionId) {
    h.update(a.task.as_uuid().as_bytes());
    h.update(a.step.to_le_bytes());
    h.update(a.intent_version.to_le_bytes());
}

/// What a delivery line says, in binary: its kind, its numbers and its ids (an answer's or an
/// outcome's content shows in the events it causes).
fn hash_msg(h: &mut Sha256, msg: &Msg) {
    let (tag, worker): (u8, usize) = match msg {
        Msg::Assign(w, e) => {
            hash_envelope(h, e);
            h.update(e.payload.node.as_str().as_bytes());
            (1, *w)
        }
        Msg::Control(w, e) => {
            hash_envelope(h, e);
            h.update(format!("{:?}", e.payload).as_bytes());
            (2, *w)
        }
        Msg::Report(e) => {
            hash_envelope(h, e);
            (3, 0)
        }
        Msg::ToolAnswer(w, inc, _, call, a, _) | Msg::ToolTimeout(w, inc, _, call, a) => {
            h.update(inc.to_le_bytes());
            h.update(call.to_le_bytes());
            hash_action(h, a);
            let answered = matches!(msg, Msg::ToolAnswer(..));
            (if answered { 4 } else { 5 }, *w)
        }
        Msg::QueryAnswer(w, inc, a, _) | Msg::QueryTimeout(w, inc, a) => {
            h.update(inc.to_le_bytes());
            hash_action(h, a);
            let answered = matches!(msg, Msg::QueryAnswer(..));
            (if answered { 6 } else { 7 }, *w)
        }
        Msg::WorkerCrash(w) => (8, *w),
        Msg::CoordinatorCrash => (9, 0),
        Msg::Cancel => (10, 0),
        Msg::Approval(n, approved) => {
            h.update([u8::from(*approved)]);
            (11, *n as usize)
        }
        Msg::StoreChange(n) => (12, *n),
        Msg::WorkerSilent(w, back) => {
            h.update(back.unwrap_or(u64::MAX).to_le_bytes());
            (13, *w)
        }
        Msg::LeaseExpired(w) => (14, *w),
        Msg::WorkerBack(w) => (15, *w),
        Msg::Broadcast(q, e) => {
            hash_envelope(h, e);
            let quorate_coordinator::PeerMsg::Terminal { record, version } = &e.payload;
            h.update(format!("{} {:?} {version}", record.node, record.state).as_bytes());
            (16, *q)
        }
    };
    h.update([tag]);
    h.update((worker as u64).to_le_bytes());
}

/// The ids of an envelope, as a trace line shows them.
struct Ids<'a, P>(&'a Envelope<P>);

impl<P> std::fmt::Display for Ids<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.0;
        write!(
            f,
            "run={} task={} attempt={} version={} dedupe={} correlation={} from={}",
            e.run,
            e.task,
            e.attempt,
            e.state_version.raw(),
            e.dedupe,
            e.correlation,
            e.sender.agent
        )
    }
}

/// What a delivery carries, with its ids.
pub(super) struct Delivery<'a>(pub(super) &'a Msg);

impl std::fmt::Display for Delivery<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Msg::Assign(w, e) => {
                write!(f, "assign node={} -> worker {w} {}", e.payload.node, Ids(e))
            }
            Msg::Control(w, e) => write!(f, "control {:?} -> worker {w} {}", e.payload, Ids(e)),
            Msg::Report(e) => write!(f, "report {:?} {}", e.payload.outcome, Ids(e)),
            Msg::ToolAnswer(w, inc, _, call, a, ans) => {
                write!(f, "tool answer w{w}/{inc} call={call} action={a} {ans:?}")
            }
            Msg::ToolTimeout(w, inc, _, call, a) => {
                write!(f, "tool timeout w{w}/{inc} call={call} action={a}")
            }
            Msg::QueryAnswer(w, inc, a, ans) => {
                write!(f, "query answer w{w}/{inc} action={a} {ans:?}")
            }
            Msg::QueryTimeout(w, inc, a) => write!(f, "query timeout w{w}/{inc} action={a}"),
            Msg::WorkerCrash(w) => write!(f, "worker {w} crashes"),
            Msg::CoordinatorCrash => write!(f, "coordinator crash armed"),
            Msg::Cancel => write!(f, "cancel"),
            Msg::Approval(n, a) => write!(f, "approval n{n} {a}"),
            Msg::StoreChange(n) => {
                write!(f, "another writer takes {}", crate::gen::lock_key(*n))
            }
            Msg::WorkerSilent(w, Some(back)) => write!(f, "worker {w} paused until {back}"),
            Msg::WorkerSilent(w, None) => write!(f, "worker {w} lost for good"),
            Msg::LeaseExpired(w) => write!(f, "worker {w}'s lease expires"),
            Msg::WorkerBack(w) => write!(f, "worker {w} is back and renews its lease"),
            Msg::Broadcast(q, e) => {
                let quorate_coordinator::PeerMsg::Terminal { record, version } = &e.payload;
                write!(
                    f,
                    "broadcast -> peer {q} node={} state={} version={version} by={} {}",
                    record.node,
                    record.state,
                    record.by,
                    Ids(e)
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorate_protocols::{AgentId, IdSource, Role, RunId, Sender, TaskId};

    fn hash_of(msg: &Msg) -> [u8; 32] {
        let mut trace = Trace::new(&Options::default());
        trace.delivery(7, msg);
        trace.finish().0
    }

    #[test]
    fn the_hash_of_a_delivery_changes_with_any_of_its_ids() {
        let sender = Sender {
            agent: AgentId::from_u128(1),
            role: Role::Worker,
        };
        let report = quorate_protocols::wire::Report {
            outcome: quorate_protocols::wire::Outcome::Cancelled,
            spent: quorate_protocols::Budget::ZERO,
            actions: Default::default(),
            calls: vec![],
        };
        let env = Envelope::new(
            RunId::from_u128(2),
            TaskId::from_u128(3),
            sender,
            report,
            &mut IdSource::seeded(1),
        );
        let base = hash_of(&Msg::Report(Box::new(env.clone())));
        assert_eq!(base, hash_of(&Msg::Report(Box::new(env.clone()))));
        let mut ids = IdSource::seeded(2);
        let changes: [fn(&mut Envelope<_>, &mut IdSource); 5] = [
            |e, ids| e.run = ids.run_id(),
            |e, ids| e.task = ids.task_id(),
            |e, ids| e.dedupe = ids.dedupe_key(),
            |e, ids| e.correlation = ids.correlation_id(),
            |e, ids| e.sender.agent = ids.agent_id(),
        ];
        for (n, change) in changes.iter().enumerate() {
            let mut other = env.clone();
            change(&mut other, &mut ids);
            assert_ne!(base, hash_of(&Msg::Report(Box::new(other))), "id {n}");
        }
    }
}
