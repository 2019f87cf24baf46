//! The sliding window counter's cell: a window and the largest `prev` and `curr` folded into it.
//!
//! At `now`, a state weighs `prev` (the window before the current one) and `curr` (the current
//! one); with time going forward both are componentwise ordered by strictness, so the join is the
//! componentwise max and the meet the min, after both cells are rolled to the same window
//! (`curr` becomes `prev` one window later; two windows later both are 0).
//!
//! Reading a state: `reset_after` at `now` says whether `curr` is 0 (fresh one window later) or
//! not (two windows later); `curr` is the estimate at the start of the next window; `prev` is
//! bounded from the estimate at `now`, `floor(prev * (window - elapsed) / window) + curr`, by the
//! largest `prev` that gives that estimate (capped at the limit, which no `prev` exceeds; exact at
//! the start of a window, an upper bound later in it, where `prev` weighs less). Rebuilding:
//! `prev` charged in the window before, then `curr` charged at the last nanosecond of the
//! window, where `prev` weighs `floor(prev / window)`: nothing, unless the window is shorter in
//! nanoseconds than the limit.
//!
//! On a calendar, "the window before" and "one window later" are the zone's previous and next
//! day, week or month, and `window` in the bound is the length of the window `now` is in.

use sluice_core::{Algorithm, Nanos, SlidingWindow, SlidingWindowState};

use super::{Summary, charged, counted, reset_after};

/// The strictest counts folded in, as of the window starting at `start`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CounterCell {
    /// Start of the window `curr` counts in.
    pub(crate) start: Nanos,
    /// The largest count of the window before `start`.
    pub(crate) prev: u64,
    /// The largest count of the window at `start`.
    pub(crate) curr: u64,
}

/// The start of the window that holds `now`.
pub(crate) fn aligned(alg: &SlidingWindow, now: Nanos) -> Nanos {
    alg.bounds(now).0
}

/// The start of the window after the one beginning at `start` (saturating).
pub(crate) fn following(alg: &SlidingWindow, start: Nanos) -> Nanos {
    alg.bounds(start).1
}

impl CounterCell {
    /// `(prev, curr)` as of the window starting at `window` (not before the cell's own).
    fn at(&self, alg: &SlidingWindow, window: Nanos) -> (u64, u64) {
        if window == self.start {
            (self.prev, self.curr)
        } else if window > self.start && window == following(alg, self.start) {
            (self.curr, 0)
        } else {
            (0, 0)
        }
    }

    /// Both cells as of the later of their windows and the window of `now`, combined count by
    /// count.
    fn combine(self, other: Self, alg: &SlidingWindow, now: Nanos, by: fn(u64, u64) -> u64) -> Self {
        let start = self.start.max(other.start).max(aligned(alg, now));
        let ((p1, c1), (p2, c2)) = (self.at(alg, start), other.at(alg, start));
        Self { start, prev: by(p1, p2), curr: by(c1, c2) }
    }
}

impl Summary<SlidingWindow> for CounterCell {
    fn of(alg: &SlidingWindow, state: &SlidingWindowState, now: Nanos) -> Option<Self> {
        if alg.is_fresh(state, now) {
            return Some(Self::default());
        }
        let limit = alg.limit();
        let (start, next) = alg.bounds(now);
        let after_next = following(alg, next);
        if after_next == u64::MAX {
            return None; // windows at the end of representable time
        }
        let w = next - start;
        let reset_at = now.checked_add(reset_after(alg, state, now))?;
        let curr = if reset_at == after_next {
            counted(alg, state, next)
        } else if reset_at == next {
            0
        } else {
            return None; // counts of a later window than `now`'s
        };
        let estimate = counted(alg, state, now);
        let prev = if estimate >= limit {
            limit
        } else {
            // floor(prev * (w - e) / w) = q  =>  prev <= ((q + 1) * w - 1) / (w - e)
            let (q, w, e) = ((estimate - curr) as u128, w as u128, (now - start) as u128);
            let bound = ((q + 1) * w - 1) / (w - e);
            u64::try_from(bound).map_or(limit, |b| b.min(limit))
        };
        Some(Self { start, prev, curr })
    }

    fn join(self, other: Self, alg: &SlidingWindow, now: Nanos) -> Self {
        self.combine(other, alg, now, u64::max)
    }

    fn meet(self, other: Self, alg: &SlidingWindow, now: Nanos) -> Self {
        self.combine(other, alg, now, u64::min)
    }

    fn state(self, alg: &SlidingWindow, now: Nanos) -> SlidingWindowState {
        let limit = alg.limit();
        let (start, end) = alg.bounds(now);
        let w = end - start;
        let (prev, curr) = self.at(alg, start);
        let mut state = SlidingWindowState::default();
        if prev > 0 && start > 0 {
            // A window at time 0 has no window before it: no state there weighs a `prev`.
            state = charged(alg, state, start - 1, prev).0;
        }
        if curr > 0 {
            if (prev / w).saturating_add(curr) > limit {
                // Not a state the algorithm can reach: the whole limit spent in this window is
                // stricter than it (it denies until the window ends, then weighs `limit >= curr`).
                return charged(alg, SlidingWindowState::default(), start, limit).0;
            }
            let (charged_state, admitted) = charged(alg, state, end - 1, curr);
            debug_assert!(admitted, "curr fits beside what prev weighs at the window's last nanosecond");
            state = charged_state;
        }
        state
    }

    /// The whole limit spent in the window of `since`: denies until that window ends and then
    /// weighs the whole limit as `prev`, at least what any state folded so far can weigh.
    fn saturated(alg: &SlidingWindow, since: Nanos) -> Option<SlidingWindowState> {
        Some(charged(alg, SlidingWindowState::default(), aligned(alg, since), alg.limit()).0)
    }
}
