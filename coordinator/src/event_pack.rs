//! How the run log packs an [`Event`]: postcard varints, the task as a number into the run's
//! table of names, the run id only when it differs from the log's, and the sequence number as
//! its distance from the entry's position (zero in a supervisor's log). The kinds every task
//! logs have a compact form; the rare ones are kept as their JSON.

use std::sync::Arc;

use quorate_protocols::{Budget, RunId, TaskId, TaskState};
use quorate_state::{Pack, Slot};
use serde::{Deserialize, Serialize};

use crate::event::{Event, EventKind};

/// Task names already written to one run's log.
#[derive(Debug, Default)]
pub struct Names {
    /// Name number by the address of the shared string (each is kept alive in `names`, so an
    /// address is never reused for another name).
    numbers: ahash::AHashMap<usize, u32>,
    names: Vec<Arc<str>>,
}

impl Names {
    fn number(&mut self, name: &Arc<str>) -> u32 {
        let addr = Arc::as_ptr(name).cast::<u8>() as usize;
        if let Some(&n) = self.numbers.get(&addr) {
            return n;
        }
        let n = u32::try_from(self.names.len()).expect("fewer than 2^32 task names in a run");
        self.names.push(name.clone());
        self.numbers.insert(addr, n);
        n
    }
}

#[derive(Serialize, Deserialize)]
struct PackedEvent {
    /// `seq` minus the entry's position.
    seq_offset: i64,
    /// `None` when the event's run is the log's run.
    run: Option<RunId>,
    task: Option<u32>,
    at_ms: u64,
    kind: PackedKind,
}

#[derive(Serialize, Deserialize)]
enum PackedKind {
    Transition {
        from: TaskState,
        to: TaskState,
    },
    Dispatched {
        attempt: u32,
        worker: u64,
        task_id: TaskId,
        granted: Budget,
    },
    TaskClosed {
        spent: Budget,
    },
    ReplyAccepted,
    ResultCommitted,
    /// Any other kind, as JSON.
    Other(String),
}

impl Pack for Event {
    type Dict = Names;

    fn pack(&self, at: Slot, names: &mut Names, out: &mut Vec<u8>) {
        let kind = match &self.kind {
            EventKind::Transition { from, to } => PackedKind::Transition {
                from: *from,
                to: *to,
            },
            EventKind::Dispatched {
                attempt,
                worker,
                task_id,
                granted,
            } => PackedKind::Dispatched {
                attempt: *attempt,
                worker: *worker as u64,
                task_id: *task_id,
                granted: *granted,
            },
            EventKind::TaskClosed { spent } => PackedKind::TaskClosed { spent: *spent },
            EventKind::ReplyAccepted => PackedKind::ReplyAccepted,
            EventKind::ResultCommitted => PackedKind::ResultCommitted,
            other => PackedKind::Other(
                serde_json::to_string(other).expect("an event kind serializes to JSON"),
            ),
        };
        let packed = PackedEvent {
            seq_offset: (self.seq as i64).wrapping_sub(at.seq.0 as i64),
            run: (self.run_id != at.run).then_some(self.run_id),
            task: self.task.as_ref().map(|t| names.number(t)),
            at_ms: self.at_ms,
            kind,
        };
        // Writing into a Vec cannot fail, and every field serializes.
        let _ = postcard::to_extend(&packed, std::mem::take(out)).map(|v| *out = v);
    }

    fn unpack(at: Slot, names: &Names, input: &mut &[u8]) -> Option<Self> {
        let (packed, rest) = postcard::take_from_bytes::<PackedEvent>(input).ok()?;
        *input = rest;
        let kind = match packed.kind {
            PackedKind::Transition { from, to } => EventKind::Transition { from, to },
            PackedKind::Dispatched {
                attempt,
                worker,
                task_id,
                granted,
            } => EventKind::Dispatched {
                attempt,
                worker: usize::try_from(worker).ok()?,
                task_id,
                granted,
            },
            PackedKind::TaskClosed { spent } => EventKind::TaskClosed { spent },
            PackedKind::ReplyAccepted => EventKind::ReplyAccepted,
            PackedKind::ResultCommitted => EventKind::ResultCommitted,
            PackedKind::Other(json) => serde_json::from_str(&json).ok()?,
        };
        let task = match packed.task {
            Some(n) => Some(names.names.get(n as usize)?.clone()),
            None => None,
        };
        Some(Event {
            seq: (at.seq.0 as i64).wrapping_add(packed.seq_offset) as u64,
            run_id: packed.run.unwrap_or(at.run),
            task,
            at_ms: packed.at_ms,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Rejection;
    use crate::StopReason;
    use quorate_state::{PackedLog, Seq};

    #[test]
    fn every_kind_reads_back_as_written() {
        let run = RunId::from_u128(1);
        let a: Arc<str> = Arc::from("fetch");
        let b: Arc<str> = Arc::from("merge");
        let kinds = vec![
            EventKind::RunStarted {
                tasks: 2,
                plan_version: 1,
            },
            EventKind::Transition {
                from: TaskState::Pending,
                to: TaskState::Ready,
            },
            EventKind::Dispatched {
                attempt: 3,
                worker: 1,
                task_id: TaskId::from_u128(9),
                granted: Budget::new(5, 2, 1000, 7),
            },
            EventKind::TaskClosed {
                spent: Budget::steps(2),
            },
            EventKind::ReplyAccepted,
            EventKind::ReplyRejected {
                reason: Rejection::Stale,
            },
            EventKind::ResultCommitted,
            EventKind::CallRejected {
                tool: "db.delete".into(),
                reason: "not in capabilities".into(),
            },
            EventKind::StopRequested {
                reason: StopReason::Cancelled,
            },
        ];
        let log = PackedLog::new();
        let mut written = Vec::new();
        for (i, kind) in kinds.into_iter().enumerate() {
            let event = Event {
                // A resumed core may number from elsewhere; the offset keeps it exact.
                seq: if i == 4 { 40 } else { i as u64 },
                run_id: if i == 5 { RunId::from_u128(2) } else { run },
                task: match i % 3 {
                    0 => None,
                    1 => Some(a.clone()),
                    _ => Some(b.clone()),
                },
                at_ms: 1000 * i as u64,
                kind,
            };
            log.append_now(run, &event);
            written.push(event);
        }
        let read: Vec<Event> = log
            .read_now(run, Seq(0), 100)
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        assert_eq!(read, written);
        let struct_bytes = written.len() * std::mem::size_of::<Event>();
        assert!(log.bytes(run) * 2 < struct_bytes, "{}", log.bytes(run));
    }
}
