//! The sliding log's cell: a histogram of its newest entries over sub-windows, rounded later.
//!
//! A log is at least as strict as another when, for every time `x`, it holds at least as many
//! entries later than `x`. The cell cuts time into sub-windows of `ceil(window / SUB_WINDOWS)`
//! (aligned to the epoch, so all cells of a policy share them) and counts, for the sub-window of
//! its newest entry and the [`SUB_WINDOWS`] before it (all a live entry can be in), how many live
//! entries each holds. Rebuilt, each entry lies at the end of its sub-window (or at the newest
//! entry, in the newest sub-window): no earlier than it was, so the rebuilt log holds at least as
//! many entries later than any `x`, at most one sub-window longer. The count of entries from a
//! sub-window on, read as `limit - remaining` of a request of cost 0 one window after the
//! sub-window's start, is what joins and meets compare: the join keeps the max of those counts
//! for every sub-window, the meet the min, both with the later newest entry (the bounds are
//! proved in the parent module's terms: `x` falls in one sub-window, and entries placed later in
//! it than `x` are either all counted or none).

use sluice_core::{Algorithm, Nanos, SlidingLog, SlidingLogState};

use super::{Summary, charged, counted, reset_after};

/// Sub-windows a window is cut into.
pub(crate) const SUB_WINDOWS: usize = 8;

/// Sub-windows a cell counts: the newest entry's and every one a live entry can be in.
pub(crate) const SPAN: usize = SUB_WINDOWS + 1;

/// Live entries per sub-window, newest first; empty when `newest` is 0 and every count too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogCell {
    /// The newest entry folded in: the newest sub-window's entries are placed there.
    pub(crate) newest: Nanos,
    /// `counts[j]`: entries in the `j`-th sub-window before the newest entry's.
    pub(crate) counts: [u64; SPAN],
}

pub(crate) fn sub_window(alg: &SlidingLog) -> Nanos {
    alg.window().div_ceil(SUB_WINDOWS as u64)
}

impl LogCell {
    pub(crate) fn is_empty(&self) -> bool {
        self.counts.iter().all(|&n| n == 0)
    }

    /// Entries counted from the newest sub-window back to the `j`-th, for `j` in `0..SPAN`, as of
    /// the sub-window `top` (at or after the cell's own); what falls further back is dropped.
    fn running(&self, alg: &SlidingLog, top: u64) -> [u64; SPAN] {
        let shift = (top - self.newest / sub_window(alg)) as usize;
        let mut sums = [0u64; SPAN];
        let mut total = 0u64;
        for (j, sum) in sums.iter_mut().enumerate() {
            if j >= shift {
                total = total.saturating_add(self.counts[j - shift]);
            }
            *sum = total;
        }
        sums
    }

    /// Both cells as of the later newest entry, their running counts combined sub-window by
    /// sub-window.
    fn combine(self, other: Self, alg: &SlidingLog, by: fn(u64, u64) -> u64) -> Self {
        let newest = self.newest.max(other.newest);
        let top = newest / sub_window(alg);
        let (a, b) = (self.running(alg, top), other.running(alg, top));
        let mut counts = [0u64; SPAN];
        let mut before = 0;
        for j in 0..SPAN {
            let sum = by(a[j], b[j]);
            counts[j] = sum - before;
            before = sum;
        }
        Self { newest, counts }
    }
}

impl Summary<SlidingLog> for LogCell {
    fn of(alg: &SlidingLog, state: &SlidingLogState, now: Nanos) -> Option<Self> {
        if alg.is_fresh(state, now) {
            return Some(Self::default());
        }
        let w = alg.window();
        // `reset_after` is when the newest entry leaves the window.
        let newest = now.checked_add(reset_after(alg, state, now))?.checked_sub(w)?;
        if newest > now {
            return None; // entries recorded after `now`
        }
        let live = counted(alg, state, now);
        let g = sub_window(alg);
        let top = newest / g;
        let mut counts = [0u64; SPAN];
        let mut before = 0;
        for (j, count) in counts.iter_mut().enumerate() {
            let Some(first) = top.checked_sub(j as u64).map(|k| k * g) else { break };
            // Live entries at `first` or later: all live ones when every entry before `first` is
            // out of the window, else those later than `first - 1`, counted one window on.
            let from_here = match first.checked_sub(1) {
                None => live,
                Some(x) if now >= w && x <= now - w => live,
                Some(x) => counted(alg, state, x.saturating_add(w)),
            };
            *count = from_here - before;
            before = from_here;
        }
        Some(Self { newest, counts })
    }

    fn join(self, other: Self, alg: &SlidingLog, _: Nanos) -> Self {
        match (self.is_empty(), other.is_empty()) {
            (true, _) => other,
            (_, true) => self,
            _ => self.combine(other, alg, u64::max),
        }
    }

    fn meet(self, other: Self, alg: &SlidingLog, _: Nanos) -> Self {
        if self.is_empty() || other.is_empty() { Self::default() } else { self.combine(other, alg, u64::min) }
    }

    fn state(self, alg: &SlidingLog, now: Nanos) -> SlidingLogState {
        let (w, g) = (alg.window(), sub_window(alg));
        let top = self.newest / g;
        let mut state = SlidingLogState::default();
        for j in (0..SPAN).rev() {
            let n = self.counts[j];
            let Some(k) = top.checked_sub(j as u64) else { continue };
            // The end of the sub-window, or the newest entry in the newest one; never after
            // `now`, which no entry the cell stands for was recorded after (a cell moved into
            // another clock can round its newest entry past it, and a state with entries after
            // `now` could not be folded again: the shard could not evict it).
            let at = (k * g).saturating_add(g - 1).min(self.newest).min(now);
            if n == 0 || at.saturating_add(w) <= now {
                continue; // nothing there, or nothing live any more
            }
            let (next, admitted) = charged(alg, state, at, n);
            if !admitted {
                debug_assert!(false, "a cell never holds more than the limit");
                return charged(alg, SlidingLogState::default(), self.newest, alg.limit()).0;
            }
            state = next;
        }
        state
    }

    /// The whole limit spent at `since`: denies until every entry folded so far (none later than
    /// `since`) has left the window.
    fn saturated(alg: &SlidingLog, since: Nanos) -> Option<SlidingLogState> {
        Some(charged(alg, SlidingLogState::default(), since, alg.limit()).0)
    }
}
