//! The bench's progress bar on stderr.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bench's progress bar: one position per phase (baseline, warm-up, measured run of each
/// run). It is drawn only once the bench has lasted [`Progress::SHOW_AFTER`] and only on the
/// target given (`quorate bench dag` gives stderr when it is a terminal, else none: a redirected
/// stderr gets no bar); from then on it ticks on its own, so a long phase shows its elapsed time.
pub(super) struct Progress {
    bar: ProgressBar,
    start: Instant,
    /// Where to draw once shown; `None` once shown, or if never.
    target: Option<ProgressDrawTarget>,
    /// A phase has begun (the next phase ends it).
    begun: bool,
}

impl Progress {
    /// A bench shorter than this shows no bar.
    const SHOW_AFTER: Duration = Duration::from_secs(1);

    pub(super) fn new(phases: u64, target: Option<ProgressDrawTarget>) -> Self {
        let bar = ProgressBar::with_draw_target(Some(phases), ProgressDrawTarget::hidden());
        if let Ok(style) =
            ProgressStyle::with_template("bench dag [{bar:30}] {pos}/{len} {msg} {elapsed}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        Self {
            bar,
            start: Instant::now(),
            target,
            begun: false,
        }
    }

    /// The previous phase ended and `message` begins, at `now`.
    pub(super) fn phase(&mut self, now: Instant, message: String) {
        if std::mem::replace(&mut self.begun, true) {
            self.bar.inc(1);
        }
        self.bar.set_message(message);
        if now.saturating_duration_since(self.start) >= Self::SHOW_AFTER {
            if let Some(target) = self.target.take() {
                self.bar.set_draw_target(target);
                // Drawn now (a tick is a no-op once the bar ticks on its own).
                self.bar.tick();
                self.bar.enable_steady_tick(Duration::from_millis(200));
            }
        }
    }

    /// The last phase ended: the bar is cleared (the report follows on stdout).
    pub(super) fn finish(self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// A terminal that keeps what is written to it.
    #[derive(Debug, Default, Clone)]
    struct Captured(Arc<Mutex<String>>);

    impl Captured {
        fn text(&self) -> String {
            self.0.lock().unwrap().clone()
        }
    }

    impl TermLike for Captured {
        fn width(&self) -> u16 {
            100
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push_str(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_bar_shows_after_a_second_and_never_without_a_terminal() {
        let term = Captured::default();
        let mut p = Progress::new(
            3,
            Some(ProgressDrawTarget::term_like(Box::new(term.clone()))),
        );
        let start = p.start;
        p.phase(start, "run 1/1: baseline".into());
        p.phase(
            start + Duration::from_millis(900),
            "run 1/1: warm-up".into(),
        );
        assert_eq!(term.text(), "", "nothing drawn within the first second");
        p.phase(
            start + Duration::from_millis(1100),
            "run 1/1: measured".into(),
        );
        let shown = term.text();
        assert!(shown.contains("2/3 run 1/1: measured"), "{shown:?}");
        p.finish();

        // No target (stderr is not a terminal): nothing is ever drawn.
        let mut hidden = Progress::new(2, None);
        let start = hidden.start;
        hidden.phase(start + Duration::from_secs(5), "run 1/1: baseline".into());
        assert!(hidden.bar.is_hidden());
        hidden.finish();
    }
}
