//! The JSONL trace writer: one JSON object per line, written by its own thread so the
//! supervisor never waits on the disk, and flushed whenever it has caught up with the run.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender};

use crate::Event;

/// Owns the writer thread; dropping the last [`TraceSink`] clone and calling
/// [`TraceWriter::finish`] flushes the file.
#[derive(Debug)]
pub struct TraceWriter {
    thread: Option<JoinHandle<std::io::Result<u64>>>,
}

/// Where the supervisor sends events.
#[derive(Clone, Debug)]
pub struct TraceSink(Sender<Event>);

impl TraceSink {
    /// Queues an event (never blocks).
    pub fn send(&self, event: Event) {
        // The writer only goes away after every sink is dropped; a send error cannot happen
        // while a sink exists, and losing a trace line must never stop a run.
        let _ = self.0.send(event);
    }
}

impl TraceWriter {
    /// Creates `path` and starts the writer thread.
    pub fn create(path: &Path) -> std::io::Result<(TraceWriter, TraceSink)> {
        let file = File::create(path)?;
        let (tx, rx) = unbounded::<Event>();
        let thread = std::thread::Builder::new()
            .name("quorate-trace".into())
            .spawn(move || {
                let mut out = BufWriter::new(file);
                let mut lines = 0u64;
                for event in rx.iter() {
                    serde_json::to_writer(&mut out, &event)?;
                    out.write_all(b"\n")?;
                    lines += 1;
                    // Written in bursts: whatever is queued goes out in one write, and the file
                    // is never more than one burst behind the run (a killed run leaves the
                    // trace of everything before its last burst; `tail -f` follows a run).
                    if rx.is_empty() {
                        out.flush()?;
                    }
                }
                out.flush()?;
                Ok(lines)
            })?;
        Ok((
            TraceWriter {
                thread: Some(thread),
            },
            TraceSink(tx),
        ))
    }

    /// Waits until every queued event is written (all sinks must be dropped first); returns the
    /// number of lines.
    pub fn finish(mut self) -> std::io::Result<u64> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("trace writer panicked"))),
            None => Ok(0),
        }
    }
}

/// A trace broke the rule "a terminal task never changes again": in the view of the event's
/// writer (`peer`; `None` for the star's supervisor), `task` was already `terminal` when it
/// moved again or accepted a reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("event {seq}: task {task}, {terminal} already, {what}{}",
    .peer.map(|p| format!(" (peer {p})")).unwrap_or_default())]
pub struct AfterTerminal {
    /// The offending event's `seq`.
    pub seq: u64,
    /// The peer that wrote it (`None`: star mode).
    pub peer: Option<usize>,
    /// The task.
    pub task: String,
    /// The terminal state it had reached.
    pub terminal: quorate_protocols::TaskState,
    /// What it did after it.
    pub what: Afterwards,
}

/// What a terminal task did in an [`AfterTerminal`] violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Afterwards {
    /// It moved `from` -> `to`.
    Moved {
        /// The transition's `from`.
        from: quorate_protocols::TaskState,
        /// The transition's `to`.
        to: quorate_protocols::TaskState,
    },
    /// It accepted a reply (`reply-accepted`).
    AcceptedReply,
}

impl std::fmt::Display for Afterwards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Afterwards::Moved { from, to } => write!(f, "moved {from} -> {to}"),
            Afterwards::AcceptedReply => f.write_str("accepted a reply"),
        }
    }
}

/// Checks "no transition after a terminal state" (and no reply accepted after it) over a
/// trace's events, in their order, per writer: in peer mode every peer writes its own copy of
/// the events it saw (its `peer` field), so a task ends once in each peer's view; in star mode
/// once.
pub fn check_terminal_is_final<'a>(
    events: impl IntoIterator<Item = &'a Event>,
) -> Result<(), AfterTerminal> {
    use std::collections::HashMap;
    let mut ended: HashMap<(Option<usize>, &str), quorate_protocols::TaskState> = HashMap::new();
    for e in events {
        let Some(task) = e.task.as_deref() else {
            continue;
        };
        let what = match &e.kind {
            crate::EventKind::Transition { from, to } => Afterwards::Moved {
                from: *from,
                to: *to,
            },
            crate::EventKind::ReplyAccepted => Afterwards::AcceptedReply,
            _ => continue,
        };
        if let Some(&terminal) = ended.get(&(e.peer, task)) {
            return Err(AfterTerminal {
                seq: e.seq,
                peer: e.peer,
                task: task.to_string(),
                terminal,
                what,
            });
        }
        if let Afterwards::Moved { to, .. } = what {
            if to.is_terminal() {
                ended.insert((e.peer, task), to);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventKind;
    use quorate_protocols::{RunId, TaskState as S};

    fn moved(seq: u64, peer: Option<usize>, from: S, to: S) -> Event {
        Event {
            seq,
            run_id: RunId::from_u128(1),
            task: Some("a".into()),
            at_ms: 0,
            peer,
            kind: EventKind::Transition { from, to },
        }
    }

    #[test]
    fn a_task_ends_once_per_writer() {
        // Two peers each see `a` end: fine.
        let both = [
            moved(0, Some(0), S::Running, S::Completed),
            moved(1, Some(1), S::Running, S::Completed),
        ];
        assert_eq!(check_terminal_is_final(&both), Ok(()));
        // One peer moves it again: caught, naming the peer.
        let again = [
            moved(0, Some(0), S::Running, S::Completed),
            moved(1, Some(1), S::Running, S::Completed),
            moved(2, Some(1), S::Completed, S::Failed),
        ];
        let err = check_terminal_is_final(&again).unwrap_err();
        assert_eq!(
            (err.seq, err.peer, err.terminal),
            (2, Some(1), S::Completed)
        );
        assert_eq!(
            err.to_string(),
            "event 2: task a, completed already, moved completed -> failed (peer 1)"
        );
        // Or accepts a reply: caught too.
        let mut reply = moved(3, Some(0), S::Running, S::Running);
        reply.kind = EventKind::ReplyAccepted;
        let late = [moved(0, Some(0), S::Running, S::Completed), reply];
        let err = check_terminal_is_final(&late).unwrap_err();
        assert_eq!((err.seq, err.what), (3, Afterwards::AcceptedReply));
        // In star mode one writer: the second end is caught.
        let star = [
            moved(0, None, S::Running, S::Completed),
            moved(1, None, S::Running, S::Completed),
        ];
        assert_eq!(check_terminal_is_final(&star).unwrap_err().seq, 1);
    }
}
