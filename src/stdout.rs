//! Writing the CLI's output to stdout. `println!` panics when stdout is closed (the reader went
//! away: `quorate run plan.toml | head -3`); these stop writing instead, and the command goes on
//! (files it was asked to write are still written) and exits with its own exit code.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write found stdout closed; later output is dropped.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Prints `args` and a newline to stdout (see [`outln!`](crate::outln)).
pub fn line(args: std::fmt::Arguments<'_>) {
    text(format_args!("{args}\n"));
}

/// Prints `args` to stdout (see [`out!`](crate::out)). Once stdout is found closed, this and
/// every later call write nothing; another write error is reported on stderr once.
pub fn text(args: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("quorate: writing to stdout: {e}");
        }
    }
}

/// `println!` for the CLI's output: a closed stdout stops the output, not the command.
#[macro_export]
macro_rules! outln {
    () => { $crate::stdout::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::stdout::line(format_args!($($arg)*)) };
}

/// `print!` for the CLI's output: a closed stdout stops the output, not the command.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::text(format_args!($($arg)*)) };
}
