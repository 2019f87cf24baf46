//! How each fold cell (see [`crate::memory::summary`]) is written to a snapshot and read back:
//! fixed-size little-endian fields, checked against what a writer could have written, and moved
//! between two processes' clocks along the algorithm's grid.
//!
//! A key's state is written as its cell ([`Summary::of`]: at least as strict as the state, exact
//! for the buckets and the fixed window, `prev` an upper bound for the sliding window counter,
//! entries rounded later to the end of their sub-window for the sliding log), so one codec serves
//! the table's entries and its summary alike, and nothing reads a state's private fields.
//!
//! Moving a cell by `by` nanoseconds translates every time in it. Windows are aligned to the
//! clock's epoch, so a shift is first rounded up to a multiple of the cell's [`Persist::grain`]
//! (the window, a sliding log's sub-window, 1 for a bucket): the moved cell is on the grid and
//! counts at least as long as the exact translation would, never shorter.

use sluice_core::{Algorithm, FixedWindow, Nanos, SlidingLog, SlidingWindow};

use crate::memory::summary::{
    BucketCell, CounterCell, LogCell, Meter, SPAN, Summary, WindowCell, following, sub_window, window_start,
};

/// A fold cell as a snapshot holds it.
pub(crate) trait Persist<A: Algorithm>: Summary<A> {
    /// Bytes of one encoded cell.
    const BYTES: usize;

    /// The step every shift of this algorithm's cells is rounded up to.
    fn grain(alg: &A) -> Nanos;

    /// Appends the cell's [`Persist::BYTES`] bytes.
    fn encode(&self, out: &mut Vec<u8>);

    /// The cell from exactly [`Persist::BYTES`] bytes, unchecked (see [`Persist::fits`]).
    fn decode(bytes: &[u8]) -> Self;

    /// Whether a writer that captured its state at `captured` could have written this cell:
    /// counts within the limit, window times on the grid, nothing later than a live state can be.
    /// A cell that does not fit is never written, and a file holding one is refused.
    fn fits(&self, alg: &A, captured: Nanos) -> bool;

    /// Whether the cell still counts anything at `now` (a cell that does not is not written).
    fn live(&self, alg: &A, now: Nanos) -> bool;

    /// Every time in the cell moved by `by`, a multiple of [`Persist::grain`] (saturating).
    fn moved(self, alg: &A, by: i128) -> Self;

    /// The state the cell stands for at `now`, also when its times are later than `now`.
    fn rebuild(self, alg: &A, now: Nanos) -> A::State {
        self.state(alg, now)
    }
}

/// How one snapshot block's times map into this process's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// When the block was captured, on the writer's clock: what its cells must fit.
    pub(crate) captured: Nanos,
    /// This clock minus the writer's, less the time that surely passed between them: a time `t`
    /// of the writer's is `t + shift` here, before rounding to a grain.
    pub(crate) shift: i128,
    /// This process's time: what restored states are rebuilt at.
    pub(crate) now: Nanos,
}

impl Frame {
    /// A cell of `bytes`, checked against the capture and moved into this clock.
    pub(crate) fn cell<A: Algorithm, C: Persist<A>>(&self, alg: &A, bytes: &[u8]) -> Result<C, &'static str> {
        if bytes.len() != C::BYTES {
            return Err("a cell of the wrong size");
        }
        let cell = C::decode(bytes);
        if !cell.fits(alg, self.captured) {
            return Err("a cell no writer writes (a count beyond the limit, a time off the grid or after the capture)");
        }
        Ok(cell.moved(alg, round_up(self.shift, C::grain(alg))))
    }

    /// A time of the block (a summary's latest fold) moved as its cells are.
    pub(crate) fn time<A: Algorithm, C: Persist<A>>(&self, alg: &A, t: Nanos) -> Nanos {
        shift(t, round_up(self.shift, C::grain(alg)), u64::MAX)
    }
}

/// `by` rounded up (towards +∞) to a multiple of `grain`.
pub(crate) fn round_up(by: i128, grain: Nanos) -> i128 {
    let g = i128::from(grain.max(1));
    let rem = by.rem_euclid(g);
    if rem == 0 { by } else { by - rem + g }
}

/// `t + by`, kept within `0..=cap`.
fn shift(t: Nanos, by: i128, cap: Nanos) -> Nanos {
    (i128::from(t) + by).clamp(0, i128::from(cap)) as Nanos
}

/// The latest time on a grid of `grain`: where a window time saturates.
fn grid_max(grain: Nanos) -> Nanos {
    let g = grain.max(1);
    u64::MAX / g * g
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// The `i`-th little-endian u64 of `bytes`.
fn word(bytes: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[8 * i..8 * i + 8]);
    u64::from_le_bytes(b)
}

impl<A: Meter> Persist<A> for BucketCell {
    const BYTES: usize = 8;

    fn grain(_: &A) -> Nanos {
        1
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put(out, self.tat);
    }

    fn decode(bytes: &[u8]) -> Self {
        Self { tat: word(bytes, 0) }
    }

    /// No bucket is ever ahead of `now` by more than its capacity's worth of tokens.
    fn fits(&self, alg: &A, captured: Nanos) -> bool {
        let tau = u128::from(alg.limit()) * u128::from(alg.token_interval());
        u128::from(self.tat) <= u128::from(captured) + tau
    }

    fn live(&self, _: &A, now: Nanos) -> bool {
        self.tat > now
    }

    fn moved(self, _: &A, by: i128) -> Self {
        Self { tat: shift(self.tat, by, u64::MAX) }
    }
}

impl Persist<FixedWindow> for WindowCell {
    const BYTES: usize = 16;

    /// A calendar's windows are no grid: their cells are moved by any time, then to the end of
    /// the window they land in ([`Persist::moved`]).
    fn grain(alg: &FixedWindow) -> Nanos {
        if alg.calendar_windows().is_some() { 1 } else { alg.window() }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put(out, self.end);
        put(out, self.count);
    }

    fn decode(bytes: &[u8]) -> Self {
        Self { end: word(bytes, 0), count: word(bytes, 1) }
    }

    /// A count within the limit, in a window that ends where a window ends, no later than the
    /// end of the window the writer was in.
    fn fits(&self, alg: &FixedWindow, captured: Nanos) -> bool {
        let latest = u128::from(alg.bounds(captured).1);
        let on_edge = match alg.calendar_windows() {
            Some(_) => self.end > 0 && alg.bounds(self.end - 1).1 == self.end,
            None => self.end.is_multiple_of(alg.window()),
        };
        (1..=alg.limit()).contains(&self.count) && on_edge && u128::from(self.end) <= latest
    }

    fn live(&self, _: &FixedWindow, now: Nanos) -> bool {
        self.count > 0 && now < self.end
    }

    /// Moved by `by`; a calendar window's end then goes on to the end of the window it lands
    /// in, the strict direction.
    fn moved(self, alg: &FixedWindow, by: i128) -> Self {
        let end = match alg.calendar_windows() {
            Some(c) => match shift(self.end, by, u64::MAX) {
                0 => 0,
                t => c.bounds(t - 1).1,
            },
            None => shift(self.end, by, grid_max(alg.window())),
        };
        Self { end, count: self.count }
    }
}

impl Persist<SlidingWindow> for CounterCell {
    const BYTES: usize = 24;

    /// A calendar's windows are no grid: their cells are moved by any time, then to the start
    /// of the next window unless they land on one ([`Persist::moved`]).
    fn grain(alg: &SlidingWindow) -> Nanos {
        if alg.calendar_windows().is_some() { 1 } else { alg.window() }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put(out, self.start);
        put(out, self.prev);
        put(out, self.curr);
    }

    fn decode(bytes: &[u8]) -> Self {
        Self { start: word(bytes, 0), prev: word(bytes, 1), curr: word(bytes, 2) }
    }

    /// Counts within the limit, a window on the grid that began by the time of capture.
    fn fits(&self, alg: &SlidingWindow, captured: Nanos) -> bool {
        let limit = alg.limit();
        let on_edge = match alg.calendar_windows() {
            Some(_) => window_start(alg, self.start) == self.start,
            None => self.start.is_multiple_of(alg.window()),
        };
        self.prev <= limit && self.curr <= limit && on_edge && self.start <= captured
    }

    fn live(&self, alg: &SlidingWindow, now: Nanos) -> bool {
        let at = window_start(alg, now);
        if at <= self.start {
            self.prev > 0 || self.curr > 0
        } else {
            at == following(alg, self.start) && self.curr > 0
        }
    }

    /// Moved by `by`; a calendar window's start that lands inside a window then goes on to the
    /// next window's start, the strict direction (its counts weigh until later).
    fn moved(self, alg: &SlidingWindow, by: i128) -> Self {
        let start = match alg.calendar_windows() {
            Some(_) => {
                let t = shift(self.start, by, u64::MAX);
                match alg.bounds(t) {
                    (start, _) if start == t => t,
                    (_, next) => next,
                }
            }
            None => shift(self.start, by, grid_max(alg.window())),
        };
        Self { start, ..self }
    }

    /// A cell whose window starts after `now`'s is rebuilt in its own window: the core counts a
    /// state from a later window in full (the strict direction), where the cell read at `now`
    /// would stand for nothing.
    fn rebuild(self, alg: &SlidingWindow, now: Nanos) -> sluice_core::SlidingWindowState {
        self.state(alg, now.max(self.start))
    }
}

impl Persist<SlidingLog> for LogCell {
    const BYTES: usize = 8 + 8 * SPAN;

    fn grain(alg: &SlidingLog) -> Nanos {
        sub_window(alg)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        put(out, self.newest);
        for &n in &self.counts {
            put(out, n);
        }
    }

    fn decode(bytes: &[u8]) -> Self {
        let mut counts = [0u64; SPAN];
        for (j, n) in counts.iter_mut().enumerate() {
            *n = word(bytes, 1 + j);
        }
        Self { newest: word(bytes, 0), counts }
    }

    /// At most the limit's entries in all, none after the time of capture.
    fn fits(&self, alg: &SlidingLog, captured: Nanos) -> bool {
        let total = self.counts.iter().try_fold(0u64, |sum, &n| sum.checked_add(n));
        total.is_some_and(|t| t <= alg.limit()) && self.newest <= captured
    }

    fn live(&self, alg: &SlidingLog, now: Nanos) -> bool {
        !self.is_empty() && u128::from(self.newest) + u128::from(alg.window()) > u128::from(now)
    }

    fn moved(self, alg: &SlidingLog, by: i128) -> Self {
        Self { newest: shift(self.newest, by, grid_max(sub_window(alg))), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_round_up_to_the_grain() {
        assert_eq!(round_up(0, 10), 0);
        assert_eq!(round_up(1, 10), 10);
        assert_eq!(round_up(10, 10), 10);
        assert_eq!(round_up(-1, 10), 0);
        assert_eq!(round_up(-10, 10), -10);
        assert_eq!(round_up(-11, 10), -10);
        assert_eq!(round_up(7, 1), 7);
        assert_eq!(round_up(7, 0), 7);
    }

    #[test]
    fn times_saturate_on_the_grid() {
        assert_eq!(shift(5, -10, u64::MAX), 0);
        assert_eq!(shift(u64::MAX - 1, 10, u64::MAX), u64::MAX);
        assert_eq!(grid_max(10) % 10, 0);
        assert!(grid_max(10) > u64::MAX - 10);
    }
}
