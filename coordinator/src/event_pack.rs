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
//!           reply-accepted: nothing
//!           result-committed: varint length + the result's JSON; a whole number from 0 to
//!           2^64 - 1 (the usual answer of a counting task) takes tag 6 instead, then a varint
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

use quorate_protocols::{Budget, Plan, RunId, TaskId, TaskState};
use quorate_state::{put_varint, take_varint, Pack, Slot};

use crate::event::{Event, EventKind, Record, RecordTask};

/// Task names already written in one chunk of a run's log.
#[derive(Debug, Default)]
pub struct Names {
    /// Packing: the number of a name by its key (see [`TaskName`]), in a small direct-mapped
    /// table; an entry of an earlier stamp is stale. A name that lost its slot to another, or
    /// whose entry went stale, is simply written again, under a new number.
    slots: Vec<NameSlot>,
    /// The table's current stamp (packing): a new one at every chunk start, and whenever the
    /// plan version changes (a replan renumbers the nodes, so an index key stops naming the
    /// node it named).
    stamp: u32,
    /// The plan version that index keys refer to (packing).
    plan_version: u32,
    /// Numbers given in this chunk (packing).
    given: u32,
    /// Unpacking: the chunk's names, by number.
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

/// One entry of the packing table.
#[derive(Debug, Clone)]
struct NameSlot {
    /// What the name is known by (see [`TaskName`]).
    key: usize,
    /// The table's stamp when the entry was made.
    stamp: u32,
    /// The name's number in the chunk.
    number: u32,
    /// A shared name's text, to tell it from another of the same key (none for a node index).
    text: Option<Arc<str>>,
}

/// Slots of the packing table (a chunk holds the events of a few hundred tasks).
const SLOTS: usize = 1024;

/// The task of an entry being packed, and how the chunk's table knows it.
#[derive(Clone, Copy)]
enum TaskName<'a> {
    /// An [`Event`]'s shared name, known by its text (a hash of it, then the text itself: the
    /// same slots for the same names whatever their strings' addresses, so a log's size does not
    /// depend on where the allocator put them).
    Shared(&'a Arc<str>),
    /// The name of the plan node at this index (a supervisor's [`Record`]), known by the index.
    Node(u32, &'a str),
}

/// FNV-1a of `text`, made even (an index key is odd): fixed, so the same names take the same
/// slots in every process.
fn text_key(text: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h as usize) & !1
}

impl TaskName<'_> {
    fn text(&self) -> &str {
        match self {
            TaskName::Shared(name) => name,
            TaskName::Node(_, name) => name,
        }
    }
}

impl Names {
    /// The name's number, and whether it is new to the chunk (then its text follows).
    fn number(&mut self, name: TaskName<'_>) -> (u32, bool) {
        if self.slots.is_empty() {
            let empty = NameSlot {
                key: 0,
                stamp: u32::MAX,
                number: 0,
                text: None,
            };
            self.slots = vec![empty; SLOTS];
        }
        // Keys of the two kinds never meet: a text key is even, an index key odd.
        let (key, spread) = match name {
            TaskName::Shared(shared) => {
                let key = text_key(shared);
                (key, key >> 1)
            }
            TaskName::Node(index, _) => (((index as usize) << 1) | 1, index as usize),
        };
        let slot = &mut self.slots[spread % SLOTS];
        // Equal keys are of one kind; a text key may be another text's.
        let same = match (name, &slot.text) {
            (TaskName::Shared(shared), Some(text)) => Arc::ptr_eq(shared, text) || shared == text,
            (TaskName::Shared(_), None) => false,
            (TaskName::Node(..), _) => true,
        };
        if slot.key == key && slot.stamp == self.stamp && same {
            return (slot.number, false);
        }
        // A chunk holds at most `CHUNK` entries, hence as many names.
        let n = self.given;
        self.given += 1;
        *slot = NameSlot {
            key,
            stamp: self.stamp,
            number: n,
            text: match name {
                TaskName::Shared(shared) => Some(shared.clone()),
                TaskName::Node(..) => None,
            },
        };
        (n, true)
    }
}

const TRANSITION: u8 = 0;
const DISPATCHED: u8 = 1;
const TASK_CLOSED: u8 = 2;
const REPLY_ACCEPTED: u8 = 3;
const RESULT_COMMITTED: u8 = 4;
const OTHER: u8 = 5;
/// A result-committed entry whose result is a whole number from 0 to 2^64 - 1: a varint,
/// without going through JSON.
const RESULT_COMMITTED_UINT: u8 = 6;
const KIND_BITS: u8 = 0x0f;
/// The event names the peer that wrote it (peer mode only: a star entry never sets it, so its
/// bytes are as before).
const HAS_PEER: u8 = 1 << 4;
const HAS_TASK: u8 = 1 << 5;
const OTHER_RUN: u8 = 1 << 6;
const SEQ_OFFSET: u8 = 1 << 7;

/// Every task state, by its 4-bit code ([`crate::core::state_index`], the position in
/// [`TaskState::ALL`]).
const STATES: [TaskState; 8] = TaskState::ALL;

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

/// Writes `value` as its JSON after the JSON's length (a varint), straight into `out`: a
/// one-byte length is assumed, and made room for afterwards if the JSON is longer.
fn put_json(out: &mut Vec<u8>, value: &serde_json::Value) {
    let start = out.len();
    out.push(0);
    serde_json::to_writer(&mut *out, value).expect("a JSON value serializes");
    let len = out.len() - start - 1;
    if len < 0x80 {
        out[start] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        put_varint(&mut prefix, len as u64);
        out.splice(start..=start, prefix);
    }
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

/// What an entry is made of, borrowed: from an [`Event`] or from a supervisor's [`Record`].
struct Parts<'a> {
    seq: u64,
    run_id: RunId,
    task: Option<TaskName<'a>>,
    at_ms: u64,
    kind: &'a EventKind,
    peer: Option<usize>,
}

/// The position in the kind names ([`EventKind::index`]) of each compact tag, `TRANSITION` to
/// `RESULT_COMMITTED_UINT` (`OTHER`: not told by the tag).
const COMPACT_INDEX: [Option<usize>; 7] =
    [Some(1), Some(2), Some(3), Some(5), Some(9), None, Some(9)];

impl Parts<'_> {
    /// Packs the entry; the kind's position in the kind names if its tag already told it (the
    /// five kinds every task logs), so that a shell counting kinds need not look again.
    fn pack(&self, at: Slot, names: &mut Names, out: &mut Vec<u8>) -> Option<usize> {
        let tag = match self.kind {
            EventKind::Transition { .. } => TRANSITION,
            EventKind::Dispatched { .. } => DISPATCHED,
            EventKind::TaskClosed { .. } => TASK_CLOSED,
            EventKind::ReplyAccepted => REPLY_ACCEPTED,
            EventKind::ResultCommitted { result } if result.as_u64().is_some() => {
                RESULT_COMMITTED_UINT
            }
            EventKind::ResultCommitted { .. } => RESULT_COMMITTED,
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
        if self.peer.is_some() {
            head |= HAS_PEER;
        }
        out.push(head);
        if let Some(task) = self.task {
            let (n, new) = names.number(task);
            put_varint(out, u64::from(n));
            if new {
                let text = task.text();
                put_varint(out, text.len() as u64);
                out.extend_from_slice(text.as_bytes());
            }
        }
        if self.run_id != at.run {
            out.extend_from_slice(self.run_id.as_uuid().as_bytes());
        }
        if offset != 0 {
            put_varint(out, zigzag(offset));
        }
        if let Some(peer) = self.peer {
            put_varint(out, peer as u64);
        }
        put_varint(
            out,
            zigzag(self.at_ms.wrapping_sub(names.last.at_ms) as i64),
        );
        names.last.at_ms = self.at_ms;
        match self.kind {
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
            EventKind::ReplyAccepted => {}
            EventKind::ResultCommitted { result } => match result.as_u64() {
                Some(n) => put_varint(out, n),
                None => put_json(out, result),
            },
            other => {
                let json = serde_json::to_vec(other).expect("an event kind serializes to JSON");
                put_varint(out, json.len() as u64);
                out.extend_from_slice(&json);
            }
        }
        COMPACT_INDEX[usize::from(tag)]
    }
}

/// Packs `record`, of run `run` with node names from `plan` (version `plan_version`), exactly
/// as its [`Event`] packs (see [`crate::SupervisorCore::event`]), without building the event.
/// The kind's position in the kind names if packing told it (see `Parts::pack`).
pub(crate) fn pack_record(
    record: &Record,
    run: RunId,
    (plan, plan_version): (&Plan, u32),
    at: Slot,
    names: &mut Names,
    out: &mut Vec<u8>,
) -> Option<usize> {
    if names.plan_version != plan_version {
        // Node indexes now name other nodes: forget what the table knows.
        names.plan_version = plan_version;
        names.stamp = names.stamp.wrapping_add(1);
    }
    let parts = Parts {
        seq: record.seq,
        run_id: run,
        task: match &record.task {
            RecordTask::None => None,
            RecordTask::Node(i) => Some(TaskName::Node(*i, plan.node(*i).id.as_str())),
            RecordTask::Named(name) => Some(TaskName::Shared(name)),
        },
        at_ms: record.at_ms,
        kind: &record.kind,
        peer: None,
    };
    parts.pack(at, names, out)
}

impl Pack for Event {
    type Dict = Names;

    fn pack(&self, at: Slot, names: &mut Names, out: &mut Vec<u8>) {
        let parts = Parts {
            seq: self.seq,
            run_id: self.run_id,
            task: self.task.as_ref().map(TaskName::Shared),
            at_ms: self.at_ms,
            kind: &self.kind,
            peer: self.peer,
        };
        parts.pack(at, names, out);
    }

    fn chunk_start(names: &mut Names) {
        names.stamp = names.stamp.wrapping_add(1);
        names.given = 0;
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
        let peer = if head & HAS_PEER != 0 {
            Some(usize::try_from(r.varint()?).ok()?)
        } else {
            None
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
            RESULT_COMMITTED => {
                let len = usize::try_from(r.varint()?).ok()?;
                EventKind::ResultCommitted {
                    result: serde_json::from_slice(r.bytes(len)?).ok()?,
                }
            }
            RESULT_COMMITTED_UINT => EventKind::ResultCommitted {
                result: serde_json::Value::from(r.varint()?).into(),
            },
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
            peer,
        })
    }
}

#[cfg(test)]
#[path = "event_pack_tests.rs"]
mod tests;
