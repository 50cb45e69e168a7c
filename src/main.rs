//! The `quorate` command line.

fn main() {
    eprintln!("quorate: the runtime commands are not built yet");
    std::process::exit(2);
}
