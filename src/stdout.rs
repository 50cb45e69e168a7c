//! Writing the CLI's output to stdout. `println!` panics when stdout is closed (the reader went
//! away: `quorate run plan.toml | head -3`); these end the process quietly instead, as a Unix
//! tool does on a broken pipe.

use std::io::Write;

/// Prints `args` and a newline to stdout (see [`outln!`](crate::outln)).
pub fn line(args: std::fmt::Arguments<'_>) {
    text(format_args!("{args}\n"));
}

/// Prints `args` to stdout (see [`out!`](crate::out)). A closed stdout ends the process with
/// exit code 0; any other write error ends it with exit code 8 (the runtime failed).
pub fn text(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("quorate: writing to stdout: {e}");
        std::process::exit(8);
    }
}

/// `println!` for the CLI's output: a closed stdout ends the process quietly.
#[macro_export]
macro_rules! outln {
    () => { $crate::stdout::line(format_args!("")) };
    ($($arg:tt)*) => { $crate::stdout::line(format_args!($($arg)*)) };
}

/// `print!` for the CLI's output: a closed stdout ends the process quietly.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::text(format_args!($($arg)*)) };
}
