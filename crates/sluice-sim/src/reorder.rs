//! Putting log lines back in time order. Servers write a line when a request ends, and
//! concurrent workers write theirs a little late, so a log is in time order only to within a
//! few seconds. The reorder window holds every line until the log has gone `window` past it,
//! then releases lines in time order (lines of the same time in file order).
//!
//! A line that comes after a later one was already released cannot be put back: the caller
//! decides it at the current virtual time and counts it as late. That happens only to a line
//! more than `window` older than the newest line seen before it (or when more than
//! [`MAX_HELD`] lines are held: then the oldest is released early).
//!
//! ```
//! use sluice_sim::{LogRequest, Reorder};
//! let mut w = Reorder::new(2_000);
//! for (line, at) in [(1, 1_000), (2, 500), (3, 4_000)] {
//!     let mut r = w.spare();
//!     r.line = line;
//!     r.at = at;
//!     w.push(r);
//! }
//! // 4000 is 2000 past both earlier lines: they are released, the earlier first.
//! assert_eq!(w.pop_ready().map(|r| r.line), Some(2));
//! assert_eq!(w.pop_ready().map(|r| r.line), Some(1));
//! assert!(w.pop_ready().is_none());
//! assert_eq!(w.pop_any().map(|r| r.line), Some(3));
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use sluice_core::Nanos;

use crate::log_request::LogRequest;

/// The most lines held at once (a bound on memory whatever the window and the traffic).
pub const MAX_HELD: usize = 500_000;

/// A line held out of order, ordered by (time, line number).
struct Held(LogRequest);

impl Held {
    fn key(&self) -> (Nanos, u64) {
        (self.0.at, self.0.line)
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// The reorder window.
pub struct Reorder {
    /// How long a line is held for lines that may still come before it.
    window: Nanos,
    /// Lines that came in order (each no earlier than the one before): a sorted queue, so the
    /// common case costs no sorting.
    in_order: VecDeque<LogRequest>,
    /// Lines that came earlier than the last in-order line, as a min-heap.
    out_of_order: BinaryHeap<Reverse<Held>>,
    /// The latest time pushed.
    newest: Nanos,
    /// Requests released and handed back, reused for the next lines.
    spare: Vec<LogRequest>,
}

impl std::fmt::Debug for Reorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reorder").field("window", &self.window).field("held", &self.len()).finish()
    }
}

impl Reorder {
    /// A window of `window` nanoseconds (0: release every line at once).
    pub fn new(window: Nanos) -> Self {
        Self { window, in_order: VecDeque::new(), out_of_order: BinaryHeap::new(), newest: 0, spare: Vec::new() }
    }

    /// A request to read the next line into (reused when one was handed back).
    pub fn spare(&mut self) -> LogRequest {
        self.spare.pop().unwrap_or_default()
    }

    /// Hands back a request once decided, for reuse.
    pub fn recycle(&mut self, r: LogRequest) {
        self.spare.push(r);
    }

    /// Lines held now.
    pub fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    /// True when no line is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Holds `r` (line numbers must grow from push to push).
    pub fn push(&mut self, r: LogRequest) {
        self.newest = self.newest.max(r.at);
        match self.in_order.back() {
            Some(last) if r.at < last.at => self.out_of_order.push(Reverse(Held(r))),
            _ => self.in_order.push_back(r),
        }
    }

    /// Whether the earliest held line is the in-order one (else the out-of-order one).
    fn earliest_in_order(&self) -> Option<bool> {
        match (self.in_order.front(), self.out_of_order.peek()) {
            (Some(a), Some(Reverse(b))) => Some((a.at, a.line) < b.key()),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    fn pop_earliest(&mut self) -> Option<LogRequest> {
        match self.earliest_in_order()? {
            true => self.in_order.pop_front(),
            false => self.out_of_order.pop().map(|Reverse(Held(r))| r),
        }
    }

    /// The earliest held line, if the log has gone a window past it (or too many are held).
    pub fn pop_ready(&mut self) -> Option<LogRequest> {
        let earliest = match self.earliest_in_order()? {
            true => self.in_order.front()?.at,
            false => self.out_of_order.peek()?.0.0.at,
        };
        if earliest.saturating_add(self.window) <= self.newest || self.len() > MAX_HELD {
            self.pop_earliest()
        } else {
            None
        }
    }

    /// The earliest held line, whatever the time (at the end of the log).
    pub fn pop_any(&mut self) -> Option<LogRequest> {
        self.pop_earliest()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn push(w: &mut Reorder, line: u64, at: Nanos) {
        let mut r = w.spare();
        r.line = line;
        r.at = at;
        w.push(r);
    }

    #[test]
    fn equal_times_keep_file_order() {
        let mut w = Reorder::new(10);
        for (line, at) in [(1, 5), (2, 9), (3, 5), (4, 5), (5, 100)] {
            push(&mut w, line, at);
        }
        let order: Vec<u64> = std::iter::from_fn(|| w.pop_ready()).map(|r| r.line).collect();
        assert_eq!(order, [1, 3, 4, 2]);
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn a_zero_window_releases_each_line_at_once() {
        let mut w = Reorder::new(0);
        push(&mut w, 1, 7);
        assert_eq!(w.pop_ready().map(|r| r.line), Some(1));
        push(&mut w, 2, 3);
        // Earlier than the newest: released at once too; the caller sees it is late.
        assert_eq!(w.pop_ready().map(|r| (r.line, r.at)), Some((2, 3)));
        assert!(w.is_empty());
    }

    proptest! {
        #[test]
        fn lines_within_the_window_come_out_sorted(
            jitter in proptest::collection::vec(0u64..50, 1..300), window in 50u64..100,
        ) {
            // Line i is logged at about 10 * i, up to 49 early: never more than the window.
            let mut w = Reorder::new(window);
            let mut out = Vec::new();
            for (i, j) in jitter.iter().enumerate() {
                push(&mut w, i as u64 + 1, (10 * i as u64 + 50).saturating_sub(*j));
                while let Some(r) = w.pop_ready() {
                    out.push((r.at, r.line));
                    w.recycle(r);
                }
            }
            while let Some(r) = w.pop_any() {
                out.push((r.at, r.line));
            }
            let mut sorted = out.clone();
            sorted.sort_unstable();
            prop_assert_eq!(out.len(), jitter.len());
            prop_assert_eq!(out, sorted);
        }
    }
}
