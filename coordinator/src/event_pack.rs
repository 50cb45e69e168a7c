//! How the run log packs an [`Event`], in a few bytes and without allocating:
//!
//! ```text
//! head      1 byte: kind tag (bits 0-4), has task (5), other run (6), seq offset (7)
//! task      varint: number of the name in this chunk             (if "has task")
//!           a new name: the next number, then varint length + UTF-8
//! run       16 bytes                                           (if "other run")
//! seq       zigzag varint: seq minus the entry's position      (if "seq offset")
//! at_ms     zigzag varint: at_ms minus the chunk's previous event's
//! payload   transition: 1 byte (from << 4 | to)
//!           dispatched: varint attempt, varint worker, task id, granted
//!           task-closed: budget
//!           reply-accepted, result-committed: nothing
//!           any other kind: varint length + its JSON
//! task id   varint: zigzag(id minus the chunk's previous dispatched id) << 1, if that fits
//!           in 63 bits; else 1, then the 16 bytes
//! granted   varint 0: the chunk's previous dispatched grant; else 1, then a budget
//! budget    4 varints: steps, tool calls, tokens, cost
//! ```
//!
//! Every task logs the five compact kinds; the rest are rare. A supervisor's log has no seq
//! offsets (it numbers events as the log does) and one run, so those cost nothing. A name is
//! written once per chunk of the log: the events of one task come close together, and a
//! per-chunk table stays small and hot, where a table of every name of a large run would not.
//! Times, task ids and grants are written against the chunk's previous ones: events come in
//! time order, a run's minted task ids differ only in their node index, and the tasks of a
//! plan often share a grant, so each takes a byte or two instead of up to 16 or 40.

use std::sync::Arc;

use quorate_protocols::{Budget, RunId, TaskId, TaskState};
use quorate_state::{put_varint, take_varint, Pack, Slot};

use crate::event::{Event, EventKind};

/// Task names already written in one chunk of a run's log.
#[derive(Debug, Default)]
pub struct Names {
    /// Packing: the number of a name by the address of its shared string, in a small
    /// direct-mapped table of `(address, chunk, number)`; an entry of an earlier chunk is
    /// stale. A name that lost its slot to another is simply written again, under a new
    /// number. Each string is kept alive in `names`, so an address is never reused for another
    /// name within the chunk.
    slots: Vec<(usize, u32, u32)>,
    /// Chunks started (packing).
    chunk: u32,
    /// The chunk's names, by number.
    names: Vec<Arc<str>>,
    /// The chunk's previous event time, dispatched task id and grant (both ways).
    last: Last,
}

/// What the next event of a chunk is written against.
#[derive(Debug, Default)]
struct Last {
    at_ms: u64,
    task_id: u128,
    granted: Budget,
}

/// Slots of the packing table (a chunk holds the events of a few hundred tasks).
const SLOTS: usize = 1024;

impl Names {
    /// The name's number, and whether it is new to the chunk (then its text follows).
    fn number(&mut self, name: &Arc<str>) -> (u32, bool) {
        if self.slots.is_empty() {
            self.slots = vec![(0, u32::MAX, 0); SLOTS];
        }
        let addr = Arc::as_ptr(name).cast::<u8>() as usize;
        // Heap addresses are 16-byte aligned; the bits above spread consecutive names.
        let slot = &mut self.slots[(addr >> 4) % SLOTS];
        if slot.0 == addr && slot.1 == self.chunk {
            return (slot.2, false);
        }
        // A chunk holds at most `CHUNK` entries, hence as many names.
        let n = self.names.len() as u32;
        self.names.push(name.clone());
        *slot = (addr, self.chunk, n);
        (n, true)
    }
}

const TRANSITION: u8 = 0;
const DISPATCHED: u8 = 1;
const TASK_CLOSED: u8 = 2;
const REPLY_ACCEPTED: u8 = 3;
const RESULT_COMMITTED: u8 = 4;
const OTHER: u8 = 5;
const KIND_BITS: u8 = 0x1f;
const HAS_TASK: u8 = 1 << 5;
const OTHER_RUN: u8 = 1 << 6;
const SEQ_OFFSET: u8 = 1 << 7;

/// Every task state, by its 4-bit code ([`crate::core::state_index`]).
const STATES: [TaskState; 8] = [
    TaskState::Pending,
    TaskState::Ready,
    TaskState::Running,
    TaskState::WaitingApproval,
    TaskState::Completed,
    TaskState::Failed,
    TaskState::StoppedLimit,
    TaskState::Cancelled,
];

fn state_code(state: TaskState) -> u8 {
    crate::core::state_index(state) as u8
}

fn put_budget(out: &mut Vec<u8>, b: &Budget) {
    for v in [b.steps, b.tool_calls, b.tokens, b.cost] {
        put_varint(out, v);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

fn put_task_id(out: &mut Vec<u8>, last: &mut u128, id: u128) {
    let delta = id.wrapping_sub(*last) as i128;
    *last = id;
    match i64::try_from(delta) {
        Ok(d) if zigzag(d) >> 63 == 0 => put_varint(out, zigzag(d) << 1),
        _ => {
            out.push(1);
            out.extend_from_slice(&id.to_be_bytes());
        }
    }
}

fn put_granted(out: &mut Vec<u8>, last: &mut Budget, granted: &Budget) {
    if granted == last {
        out.push(0);
    } else {
        out.push(1);
        put_budget(out, granted);
        *last = *granted;
    }
}

/// Reads from the front of a packed entry.
struct Reader<'a, 'b>(&'a mut &'b [u8]);

impl Reader<'_, '_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        *self.0 = rest;
        Some(b)
    }

    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        *self.0 = rest;
        Some(head)
    }

    fn varint(&mut self) -> Option<u64> {
        take_varint(self.0)
    }

    fn uuid(&mut self) -> Option<u128> {
        Some(u128::from_be_bytes(self.bytes(16)?.try_into().ok()?))
    }

    fn task_id(&mut self, last: &mut u128) -> Option<u128> {
        let v = self.varint()?;
        let id = if v & 1 == 0 {
            last.wrapping_add(unzigzag(v >> 1) as i128 as u128)
        } else if v == 1 {
            self.uuid()?
        } else {
            return None;
        };
        *last = id;
        Some(id)
    }

    fn granted(&mut self, last: &mut Budget) -> Option<Budget> {
        match self.byte()? {
            0 => Some(*last),
            1 => {
                *last = self.budget()?;
                Some(*last)
            }
            _ => None,
        }
    }

    fn budget(&mut self) -> Option<Budget> {
        Some(Budget::new(
            self.varint()?,
            self.varint()?,
            self.varint()?,
            self.varint()?,
        ))
    }
}

impl Pack for Event {
    type Dict = Names;

    fn pack(&self, at: Slot, names: &mut Names, out: &mut Vec<u8>) {
        let tag = match &self.kind {
            EventKind::Transition { .. } => TRANSITION,
            EventKind::Dispatched { .. } => DISPATCHED,
            EventKind::TaskClosed { .. } => TASK_CLOSED,
            EventKind::ReplyAccepted => REPLY_ACCEPTED,
            EventKind::ResultCommitted => RESULT_COMMITTED,
            _ => OTHER,
        };
        let offset = (self.seq as i64).wrapping_sub(at.seq.0 as i64);
        let mut head = tag;
        if self.task.is_some() {
            head |= HAS_TASK;
        }
        if self.run_id != at.run {
            head |= OTHER_RUN;
        }
        if offset != 0 {
            head |= SEQ_OFFSET;
        }
        out.push(head);
        if let Some(task) = &self.task {
            let (n, new) = names.number(task);
            put_varint(out, u64::from(n));
            if new {
                put_varint(out, task.len() as u64);
                out.extend_from_slice(task.as_bytes());
            }
        }
        if self.run_id != at.run {
            out.extend_from_slice(self.run_id.as_uuid().as_bytes());
        }
        if offset != 0 {
            put_varint(out, zigzag(offset));
        }
        put_varint(
            out,
            zigzag(self.at_ms.wrapping_sub(names.last.at_ms) as i64),
        );
        names.last.at_ms = self.at_ms;
        match &self.kind {
            EventKind::Transition { from, to } => {
                out.push(state_code(*from) << 4 | state_code(*to));
            }
            EventKind::Dispatched {
                attempt,
                worker,
                task_id,
                granted,
            } => {
                put_varint(out, u64::from(*attempt));
                put_varint(out, *worker as u64);
                put_task_id(out, &mut names.last.task_id, task_id.as_uuid().as_u128());
                put_granted(out, &mut names.last.granted, granted);
            }
            EventKind::TaskClosed { spent } => put_budget(out, spent),
            EventKind::ReplyAccepted | EventKind::ResultCommitted => {}
            other => {
                let json = serde_json::to_vec(other).expect("an event kind serializes to JSON");
                put_varint(out, json.len() as u64);
                out.extend_from_slice(&json);
            }
        }
    }

    fn chunk_start(names: &mut Names) {
        names.chunk = names.chunk.wrapping_add(1);
        names.names.clear();
        names.last = Last::default();
    }

    fn unpack(at: Slot, names: &mut Names, input: &mut &[u8]) -> Option<Self> {
        let mut r = Reader(input);
        let head = r.byte()?;
        let task = if head & HAS_TASK != 0 {
            let n = usize::try_from(r.varint()?).ok()?;
            if n == names.names.len() {
                let len = usize::try_from(r.varint()?).ok()?;
                let text = std::str::from_utf8(r.bytes(len)?).ok()?;
                names.names.push(Arc::from(text));
            }
            Some(names.names.get(n)?.clone())
        } else {
            None
        };
        let run_id = if head & OTHER_RUN != 0 {
            RunId::from_u128(r.uuid()?)
        } else {
            at.run
        };
        let offset = if head & SEQ_OFFSET != 0 {
            unzigzag(r.varint()?)
        } else {
            0
        };
        let at_ms = names.last.at_ms.wrapping_add(unzigzag(r.varint()?) as u64);
        names.last.at_ms = at_ms;
        let kind = match head & KIND_BITS {
            TRANSITION => {
                let b = r.byte()?;
                EventKind::Transition {
                    from: *STATES.get(usize::from(b >> 4))?,
                    to: *STATES.get(usize::from(b & 0x0f))?,
                }
            }
            DISPATCHED => EventKind::Dispatched {
                attempt: u32::try_from(r.varint()?).ok()?,
                worker: usize::try_from(r.varint()?).ok()?,
                task_id: TaskId::from_u128(r.task_id(&mut names.last.task_id)?),
                granted: r.granted(&mut names.last.granted)?,
            },
            TASK_CLOSED => EventKind::TaskClosed { spent: r.budget()? },
            REPLY_ACCEPTED => EventKind::ReplyAccepted,
            RESULT_COMMITTED => EventKind::ResultCommitted,
            OTHER => {
                let len = usize::try_from(r.varint()?).ok()?;
                serde_json::from_slice(r.bytes(len)?).ok()?
            }
            _ => return None,
        };
        Some(Event {
            seq: (at.seq.0 as i64).wrapping_add(offset) as u64,
            run_id,
            task,
            at_ms,
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

    /// Up to `limit` events of `run` from `from`.
    fn read(log: &PackedLog<Event>, run: RunId, from: Seq, limit: usize) -> Vec<Event> {
        log.read_now(run, from, limit)
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }

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
            EventKind::RunResumed {
                replayed: 40,
                redispatched: 2,
            },
            EventKind::AcceptanceFailed {
                observation: "empty".into(),
            },
            EventKind::ApprovalRequested {
                reason: "deletes rows".into(),
            },
            EventKind::ApprovalDecided { approved: true },
            EventKind::CancelRequested,
            EventKind::BudgetRefused {
                detail: "steps: 3 > 2".into(),
            },
            EventKind::Replanned {
                plan_version: 2,
                tasks: 5,
            },
            EventKind::PreconditionFailed {
                observation: "version moved".into(),
            },
            EventKind::RunStopped {
                stop_reason: "completed".into(),
            },
        ];
        let mut indices: Vec<usize> = kinds.iter().map(EventKind::index).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(
            indices.len(),
            crate::event::KIND_NAMES.len(),
            "every kind is covered"
        );
        for kind in &kinds {
            let json = serde_json::to_value(kind).expect("serializes");
            assert_eq!(
                json["kind"],
                kind.name(),
                "the counted name is the trace's kind"
            );
        }
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
        let back = read(&log, run, Seq(0), 100);
        assert_eq!(back, written);
        let struct_bytes = written.len() * std::mem::size_of::<Event>();
        assert!(log.bytes(run) * 2 < struct_bytes, "{}", log.bytes(run));
    }

    #[test]
    fn names_are_written_once_per_chunk_and_read_from_anywhere() {
        let run = RunId::from_u128(1);
        let names: Vec<Arc<str>> = (0..7).map(|i| Arc::from(format!("node-{i}"))).collect();
        let log = PackedLog::new();
        let events: Vec<Event> = (0..3000u64)
            .map(|i| Event {
                seq: i,
                run_id: run,
                task: (i % 5 != 0).then(|| names[(i % 7) as usize].clone()),
                at_ms: i,
                kind: EventKind::ReplyAccepted,
            })
            .collect();
        for e in &events {
            log.append_now(run, e);
        }
        for from in [0u64, 1, 1023, 1024, 1025, 2047, 2999] {
            let got = read(&log, run, Seq(from), 3);
            let end = (from as usize + 3).min(events.len());
            assert_eq!(got, events[from as usize..end], "from {from}");
        }
        // Three or four bytes an event: head, name number, time; the names' text once a chunk.
        assert!(log.bytes(run) < 3000 * 5, "{}", log.bytes(run));
    }

    #[test]
    fn colliding_and_equal_names_read_back_as_written() {
        let run = RunId::from_u128(1);
        // More distinct names than the packing table has slots, so some collide; a second Arc
        // with the same text is a different name to the table but the same text on reading.
        let names: Vec<Arc<str>> = (0..1500).map(|i| Arc::from(format!("n{i}"))).collect();
        let twin: Arc<str> = Arc::from("n7");
        let log = PackedLog::new();
        let mut written = Vec::new();
        let order = (0..1500).chain((0..1500).rev().step_by(3)).chain([7, 7]);
        for (k, i) in order.enumerate() {
            let task = if k % 11 == 0 {
                twin.clone()
            } else {
                names[i].clone()
            };
            let event = Event {
                seq: k as u64,
                run_id: run,
                task: Some(task),
                at_ms: k as u64,
                kind: EventKind::ResultCommitted,
            };
            log.append_now(run, &event);
            written.push(event);
        }
        let back = read(&log, run, Seq(0), usize::MAX);
        assert_eq!(back, written);
    }

    #[test]
    fn times_ids_and_grants_read_back_across_deltas_and_chunks() {
        let run = RunId::from_u128(1);
        let name: Arc<str> = Arc::from("t");
        let prefix = 0xabcd_u128 << 64;
        // Deltas small and large, both ways, and just past what the varint form holds
        // (|delta| >= 2^62 goes raw).
        let ids = [
            prefix | 5,
            prefix | 4,
            prefix | 900_000,
            7,
            u128::MAX,
            0,
            1 << 62,
            (1 << 62) - 1,
            prefix | 6,
        ];
        let grants = [Budget::steps(3), Budget::steps(3), Budget::new(1, 2, 3, 4)];
        let events: Vec<Event> = (0..2600u64)
            .map(|i| Event {
                seq: i,
                run_id: run,
                task: Some(name.clone()),
                // Mostly forward, sometimes back (a resumed core's clock), once far ahead.
                at_ms: match i % 9 {
                    _ if i == 2000 => u64::MAX,
                    4 => i.saturating_sub(50),
                    _ => i * 3,
                },
                kind: EventKind::Dispatched {
                    attempt: 1,
                    worker: 0,
                    task_id: TaskId::from_u128(ids[i as usize % ids.len()]),
                    granted: grants[(i % 3) as usize],
                },
            })
            .collect();
        let log = PackedLog::new();
        for e in &events {
            log.append_now(run, e);
        }
        for from in [0u64, 1023, 1024, 2047, 2048, 2599] {
            let got = read(&log, run, Seq(from), 5);
            let end = (from as usize + 5).min(events.len());
            assert_eq!(got, events[from as usize..end], "from {from}");
        }
        let all = read(&log, run, Seq(0), usize::MAX);
        assert_eq!(all, events);
    }

    #[test]
    fn a_run_of_minted_ids_and_one_grant_packs_small() {
        let run = RunId::from_u128(1);
        let name: Arc<str> = Arc::from("t");
        let log = PackedLog::new();
        for i in 0..1000u64 {
            log.append_now(
                run,
                &Event {
                    seq: i,
                    run_id: run,
                    task: Some(name.clone()),
                    at_ms: 10_000 + i / 10,
                    kind: EventKind::Dispatched {
                        attempt: 1,
                        worker: 0,
                        task_id: TaskId::from_u128((0xfeed_u128 << 64) | u128::from(i)),
                        granted: Budget::new(10, 2, 1000, 50),
                    },
                },
            );
        }
        // head, name number, time, attempt, worker, id delta, same grant: 7 bytes.
        assert!(log.bytes(run) <= 1000 * 7 + 64, "{}", log.bytes(run));
    }

    #[test]
    fn every_state_reads_back_from_its_code() {
        for state in STATES {
            assert_eq!(STATES[usize::from(state_code(state))], state);
        }
    }
}
