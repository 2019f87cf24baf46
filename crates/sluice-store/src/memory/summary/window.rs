//! The fixed window's cell: the end of the window and the largest count folded into it.
//!
//! A non-fresh fixed-window state counts `count` until its window ends at `end` (read as
//! `limit - remaining` and `now + reset_after` of a request of cost 0). With time going forward,
//! every live cell and state at `now` is in the window of `now`: the join is the larger count,
//! the meet the smaller (and fresh when either is). A cell is rebuilt by charging `count` at the
//! window's start.

use sluice_core::{Algorithm, FixedWindow, FixedWindowState, Nanos};

use super::{Summary, charged, counted, reset_after};

/// The window of the strictest count folded in; empty when `count` is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WindowCell {
    /// When the window ends: after it the cell is fresh.
    pub(crate) end: Nanos,
    /// The largest count folded into this window.
    pub(crate) count: u64,
}

impl WindowCell {
    fn live(&self, now: Nanos) -> bool {
        self.count > 0 && now < self.end
    }
}

impl Summary<FixedWindow> for WindowCell {
    fn of(alg: &FixedWindow, state: &FixedWindowState, now: Nanos) -> Option<Self> {
        if alg.is_fresh(state, now) {
            return Some(Self::default());
        }
        Some(Self { end: now.saturating_add(reset_after(alg, state, now)), count: counted(alg, state, now) })
    }

    fn join(self, other: Self, _: &FixedWindow, now: Nanos) -> Self {
        match (self.live(now), other.live(now)) {
            (true, true) => Self { end: self.end.max(other.end), count: self.count.max(other.count) },
            (true, false) => self,
            _ => other,
        }
    }

    fn meet(self, other: Self, _: &FixedWindow, now: Nanos) -> Self {
        if self.live(now) && other.live(now) {
            Self { end: self.end.min(other.end), count: self.count.min(other.count) }
        } else {
            Self::default()
        }
    }

    fn state(self, alg: &FixedWindow, now: Nanos) -> FixedWindowState {
        if !self.live(now) {
            return FixedWindowState::default();
        }
        let (state, admitted) = charged(alg, FixedWindowState::default(), alg.bounds(self.end - 1).0, self.count);
        debug_assert!(admitted, "a count within the limit");
        state
    }

    /// The whole limit spent in the window of `since`: denies until every window folded so far
    /// has ended.
    fn saturated(alg: &FixedWindow, since: Nanos) -> Option<FixedWindowState> {
        Some(charged(alg, FixedWindowState::default(), since, alg.limit()).0)
    }
}
