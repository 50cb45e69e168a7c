//! What the parent knows: the child's lines, the state it checked after the previous kill, and
//! the check after a kill.

use std::collections::{HashMap, HashSet};

use quorate_protocols::RunId;
use quorate_state::{RedbDb, RunLog, Seq, Store};
use serde::{Deserialize, Serialize};

/// Writer tasks per child.
pub(crate) const TASKS: u32 = 4;
/// The run whose log every child appends to.
pub(crate) const RUN: RunId = RunId::from_u128(0x5eed);

/// A written value: who wrote it, and a pad derived from that (sometimes several pages long).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Rec {
    pub(crate) generation: u32,
    pub(crate) task: u32,
    pub(crate) i: u64,
    pub(crate) pad: String,
}

/// Who wrote a value.
type Id = (u32, u32, u64);
/// A key's state: its version and who wrote its value, or absent.
type KeyState = Option<(u64, Id)>;

fn pad(generation: u32, task: u32, i: u64, len: usize) -> String {
    let unit = format!("{generation}.{task}.{i};");
    unit.repeat(len / unit.len() + 1)[..len].to_string()
}

/// The value task `task` of child `generation` writes to its key at step `i`.
pub(crate) fn rec(generation: u32, task: u32, i: u64) -> Rec {
    // Every fifth value spans several 4 KiB pages.
    let len = if i % 5 == 4 {
        20_000
    } else {
        ((i * 7919 + u64::from(task) * 31) % 600) as usize + 1
    };
    Rec {
        generation,
        task,
        i,
        pad: pad(generation, task, i, len),
    }
}

/// The entry task `task` of child `generation` appends at step `i`.
pub(crate) fn log_rec(generation: u32, task: u32, i: u64) -> Rec {
    Rec {
        generation,
        task,
        i,
        pad: pad(generation, task, i, 40),
    }
}

fn id(r: &Rec) -> Id {
    (r.generation, r.task, r.i)
}

/// What a version of the counter was handed out for: the child matters, since after a crash
/// that takes deferred increments back, the next child writes the same values again (with new
/// versions, or the check fails).
fn counter_write(value: u64, generation: u32) -> String {
    format!("counter={value} by child {generation}")
}

/// One line of the child's output.
#[derive(Debug)]
pub(crate) enum Line {
    Try(String, Id),
    Cas(String, u64, Id),
    TryDel(String),
    Del(String),
    TryLog(Id),
    Log(u64, Id),
    Cnt(u64, u64),
    Flushing(u64),
    Flushed(u64),
    Other,
}

impl Line {
    pub(crate) fn parse(text: &str) -> Line {
        let w: Vec<&str> = text.split_whitespace().collect();
        let n = |i: usize| -> u64 { w[i].parse().expect("a number") };
        let id_at = |i: usize| -> Id {
            (
                w[i].parse().expect("gen"),
                w[i + 1].parse().expect("task"),
                w[i + 2].parse().expect("i"),
            )
        };
        match w.first().copied() {
            Some("TRY") => Line::Try(w[1].to_string(), id_at(2)),
            Some("CAS") => Line::Cas(w[1].to_string(), n(2), id_at(3)),
            Some("TRYDEL") => Line::TryDel(w[1].to_string()),
            Some("DEL") => Line::Del(w[1].to_string()),
            Some("TRYLOG") => Line::TryLog(id_at(1)),
            Some("LOG") => Line::Log(n(1), id_at(2)),
            Some("CNT") => Line::Cnt(n(1), n(2)),
            Some("FLUSHING") => Line::Flushing(n(1)),
            Some("FLUSHED") => Line::Flushed(n(1)),
            _ => Line::Other,
        }
    }

    /// A write the child saw confirmed.
    pub(crate) fn is_confirmation(&self) -> bool {
        matches!(
            self,
            Line::Cas(..) | Line::Del(_) | Line::Log(..) | Line::Cnt(..)
        )
    }
}

/// The file's state as last checked, and every version seen so far with what it was for.
pub(crate) struct Model {
    deferred: bool,
    keys: HashMap<String, KeyState>,
    counter: Option<(u64, u64)>,
    log: Vec<Rec>,
    versions: HashMap<u64, String>,
}

impl Model {
    pub(crate) fn new(deferred: bool) -> Self {
        Self {
            deferred,
            keys: (0..TASKS).map(|t| (format!("k{t}"), None)).collect(),
            counter: None,
            log: Vec::new(),
            versions: HashMap::new(),
        }
    }

    /// Records that `version` was handed out for `what`; a version never names two writes.
    fn version(&mut self, version: u64, what: String) {
        if let Some(before) = self.versions.get(&version) {
            assert_eq!(before, &what, "version {version} handed out twice");
        }
        self.versions.insert(version, what);
    }

    /// Lines before this index were confirmed before a durable commit that completed.
    fn covered(&self, lines: &[Line]) -> usize {
        if !self.deferred {
            return lines.len();
        }
        let done: HashSet<u64> = lines
            .iter()
            .filter_map(|l| match l {
                Line::Flushed(n) => Some(*n),
                _ => None,
            })
            .collect();
        lines
            .iter()
            .rposition(|l| matches!(l, Line::Flushing(n) if done.contains(n)))
            .unwrap_or(0)
    }

    /// Checks the reopened file against child `generation`'s `lines`, then takes its state.
    pub(crate) fn check(&mut self, db: &RedbDb, generation: u32, lines: &[Line]) {
        let covered = self.covered(lines);
        for line in lines {
            match line {
                Line::Cas(key, v, (g, t, i)) => self.version(*v, format!("{key}={g}.{t}.{i}")),
                Line::Cnt(v, value) => self.version(*v, counter_write(*value, generation)),
                _ => {}
            }
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            self.check_keys(db, lines, covered).await;
            self.check_counter(db, generation, lines, covered).await;
            self.check_log(db, generation, lines, covered).await;
        });
    }

    async fn check_keys(&mut self, db: &RedbDb, lines: &[Line], covered: usize) {
        let store = db.store::<Rec>("crash");
        for t in 0..TASKS {
            let key = format!("k{t}");
            // The key's states in order: as checked last time (durable), then each confirmed.
            let mut states: Vec<(Option<usize>, KeyState)> = vec![(None, self.keys[&key])];
            let mut in_flight: Option<Option<Id>> = None;
            for (at, line) in lines.iter().enumerate() {
                match line {
                    Line::Cas(k, v, id) if *k == key => {
                        states.push((Some(at), Some((*v, *id))));
                        in_flight = None;
                    }
                    Line::Del(k) if *k == key => {
                        states.push((Some(at), None));
                        in_flight = None;
                    }
                    Line::Try(k, id) if *k == key => in_flight = Some(Some(*id)),
                    Line::TryDel(k) if *k == key => in_flight = Some(None),
                    _ => {}
                }
            }
            // The newest state a durable commit covers; the disk may be at it or later.
            let durable_from = states
                .iter()
                .rposition(|(at, _)| at.is_none_or(|at| at < covered))
                .unwrap_or(0);
            let read = store.get(&key).await.unwrap_or_else(|e| {
                panic!("{key} does not read back: {e}");
            });
            if let Some(found) = &read {
                assert!(
                    found.value == rec(found.value.generation, found.value.task, found.value.i),
                    "{key} holds a value the child never wrote (torn or mixed): {:?}",
                    id(&found.value)
                );
            }
            let disk = read.map(|r| (r.version.raw(), id(&r.value)));
            let confirmed_ok = states[durable_from..].iter().any(|(_, s)| *s == disk);
            let newest_version = states
                .iter()
                .filter_map(|(_, s)| s.map(|(v, _)| v))
                .max()
                .unwrap_or(0);
            let in_flight_ok = match (in_flight, disk) {
                (Some(Some(attempt)), Some((v, found))) => found == attempt && v > newest_version,
                (Some(None), None) => true,
                _ => false,
            };
            assert!(
                confirmed_ok || in_flight_ok,
                "{key}: found {disk:?}; confirmed states {:?} (durable from #{durable_from}), \
                 in flight {in_flight:?}",
                states.iter().map(|(_, s)| *s).collect::<Vec<_>>()
            );
            if let Some((v, (g, t, i))) = disk {
                self.version(v, format!("{key}={g}.{t}.{i}"));
            }
            self.keys.insert(key, disk);
        }
    }

    async fn check_counter(
        &mut self,
        db: &RedbDb,
        generation: u32,
        lines: &[Line],
        covered: usize,
    ) {
        let counters = db.store::<u64>("counter");
        let mut confirmed: Vec<(u64, u64)> = self.counter.into_iter().collect();
        let mut durable_value = self.counter.map_or(0, |(_, value)| value);
        for (at, line) in lines.iter().enumerate() {
            if let Line::Cnt(v, value) = line {
                confirmed.push((*v, *value));
                if at < covered {
                    durable_value = durable_value.max(*value);
                }
            }
        }
        confirmed.sort_unstable();
        assert!(
            confirmed.windows(2).all(|w| w[0].1 < w[1].1),
            "counter values do not grow with their versions: {confirmed:?}"
        );
        let Some(read) = counters.get("counter").await.expect("counter reads") else {
            assert!(confirmed.is_empty(), "the counter vanished");
            return;
        };
        let disk = (read.version.raw(), read.value);
        let top = confirmed.last().copied().unwrap_or((0, 0));
        assert!(
            disk.1 >= durable_value,
            "counter lost a durable increment: {disk:?} < {durable_value}"
        );
        assert!(
            disk.1 <= top.1 + u64::from(TASKS),
            "counter at {disk:?}: more increments than were in flight (last confirmed {top:?})"
        );
        // A value not confirmed is one whose line was not printed yet, or one in flight; either
        // way its version sits in order among the confirmed ones, and a confirmed value is
        // found with its own version.
        for c in &confirmed {
            assert!(
                (c.1 == disk.1) == (c.0 == disk.0) && (c.1 < disk.1) == (c.0 < disk.0),
                "counter at {disk:?} does not fit the confirmed {c:?}"
            );
        }
        // A value found on disk was written by this child unless it was there before.
        if self.counter != Some(disk) {
            self.version(disk.0, counter_write(disk.1, generation));
        }
        self.counter = Some(disk);
    }

    async fn check_log(&mut self, db: &RedbDb, generation: u32, lines: &[Line], covered: usize) {
        let log = db.log::<Rec>("crash");
        let entries = log
            .read(RUN, Seq(0), usize::MAX)
            .await
            .unwrap_or_else(|e| panic!("the log does not read back: {e}"));
        for (at, (seq, entry)) in entries.iter().enumerate() {
            assert_eq!(
                seq.0, at as u64,
                "log sequence has a gap or is out of order"
            );
            assert!(
                *entry == log_rec(entry.generation, entry.task, entry.i),
                "log entry {at} is not one the child wrote (torn or mixed): {:?}",
                id(entry)
            );
        }
        let entries: Vec<Rec> = entries.into_iter().map(|(_, e)| e).collect();
        let before = self.log.len();
        assert!(
            entries.len() >= before && entries[..before] == self.log[..],
            "entries checked after an earlier kill changed or vanished"
        );
        let mut attempted = HashSet::new();
        let mut confirmed = HashMap::new();
        let mut needed = before;
        for (at, line) in lines.iter().enumerate() {
            match line {
                Line::TryLog(id) => {
                    attempted.insert(*id);
                }
                Line::Log(seq, id) => {
                    confirmed.insert(*seq, *id);
                    if at < covered {
                        needed = needed.max(*seq as usize + 1);
                    }
                }
                _ => {}
            }
        }
        assert!(
            entries.len() >= needed,
            "log has {} entries, but entry {} was confirmed durable",
            entries.len(),
            needed - 1
        );
        let mut last_i: HashMap<u32, u64> = HashMap::new();
        for (seq, entry) in entries.iter().enumerate().skip(before) {
            let found = id(entry);
            assert_eq!(entry.generation, generation, "entry {seq} of another child");
            match confirmed.get(&(seq as u64)) {
                Some(want) => assert_eq!(found, *want, "entry {seq} is not the confirmed one"),
                None => assert!(
                    attempted.contains(&found) && !confirmed.values().any(|c| *c == found),
                    "entry {seq} {found:?} was never attempted, or is confirmed elsewhere"
                ),
            }
            if let Some(prev) = last_i.insert(entry.task, entry.i) {
                assert!(prev < entry.i, "task {}'s entries out of order", entry.task);
            }
        }
        self.log = entries;
    }
}
