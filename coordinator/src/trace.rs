//! The JSONL trace writer: one JSON object per line, written by its own thread so the
//! supervisor never waits on the disk.

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
                for event in rx {
                    serde_json::to_writer(&mut out, &event)?;
                    out.write_all(b"\n")?;
                    lines += 1;
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
