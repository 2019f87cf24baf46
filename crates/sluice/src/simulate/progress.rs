//! The progress bar of long simulations, on stderr and only when stderr is a terminal (a log
//! or a pipe gets no control characters). Written by hand: one line redrawn at most ten times a
//! second needs no library.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Width of the bar in characters.
const WIDTH: usize = 30;
/// Time between two redraws.
const REDRAW: Duration = Duration::from_millis(100);

/// One line on stderr, redrawn in place.
pub struct ProgressBar {
    /// Whether anything is drawn (stderr is a terminal and the caller wants a bar).
    on: bool,
    /// When the run started, for rates and estimates.
    start: Instant,
    /// The last redraw.
    last: Option<Instant>,
    /// The width of the last line drawn, to blank it.
    drawn: usize,
}

impl ProgressBar {
    /// A bar drawn when `wanted` and stderr is a terminal.
    pub fn new(wanted: bool) -> Self {
        Self { on: wanted && std::io::stderr().is_terminal(), start: Instant::now(), last: None, drawn: 0 }
    }

    /// Seconds since the start.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Redraws the line with `text` (unless the last redraw was less than 100 ms ago).
    pub fn draw(&mut self, text: impl FnOnce(&Self) -> String) {
        if !self.on || self.last.is_some_and(|l| l.elapsed() < REDRAW) {
            return;
        }
        self.last = Some(Instant::now());
        let line = text(self);
        let pad = self.drawn.saturating_sub(line.chars().count());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}{:pad$}", "");
        let _ = err.flush();
        self.drawn = line.chars().count();
    }

    /// Blanks the line, if one was drawn.
    pub fn finish(&mut self) {
        if self.drawn > 0 {
            eprint!("\r{:w$}\r", "", w = self.drawn);
            self.drawn = 0;
        }
    }
}

/// `[#####.........]  35%` for `fraction` in [0, 1].
pub fn bar(fraction: f64) -> String {
    let f = fraction.clamp(0.0, 1.0);
    let filled = (f * WIDTH as f64) as usize;
    format!("[{}{}] {:3.0}%", "#".repeat(filled), ".".repeat(WIDTH - filled), f * 100.0)
}

/// A count with a unit prefix: `950`, `12.3k`, `4.5M`, `1.2G`.
pub fn si(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.1}G", n / 1e9),
        n if n >= 1e6 => format!("{:.1}M", n / 1e6),
        n if n >= 1e3 => format!("{:.1}k", n / 1e3),
        n => format!("{n:.0}"),
    }
}

/// Seconds as `42s`, `3m05s`, `2h07m`.
pub fn eta(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3_600, s % 3_600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_the_line() {
        assert_eq!(bar(0.5), format!("[{}{}]  50%", "#".repeat(15), ".".repeat(15)));
        assert_eq!(bar(2.0), format!("[{}] 100%", "#".repeat(30)));
        assert_eq!(
            (si(950.0), si(12_345.0), si(4.5e6), si(1.2e9)),
            ("950".into(), "12.3k".into(), "4.5M".into(), "1.2G".into())
        );
        assert_eq!((eta(42.4), eta(185.0), eta(7_620.0)), ("42s".into(), "3m05s".into(), "2h07m".into()));
    }
}
