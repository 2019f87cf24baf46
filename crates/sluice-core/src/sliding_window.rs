//! Sliding window counter: two counts and a weighted estimate.

use crate::algorithm::{Algorithm, check_charge, check_window_params, commit, sat};
use crate::decision::Decision;
use crate::error::{CostError, ParamError};
use crate::time::Nanos;

/// Admits when `floor(prev * (1 - elapsed / window) + curr) + cost <= limit`, where `elapsed`
/// is measured from the start of the current aligned window, `curr` counts admitted requests in
/// it and `prev` those in the window before (the convention of Cloudflare's description and of
/// the Python `limits` library). Integer arithmetic throughout: the estimate is
/// `(prev * (window - elapsed) + curr * window) / window`, floored.
///
/// ```
/// use sluice_core::{Algorithm, SlidingWindow, NANOS_PER_SEC};
/// let sw = SlidingWindow::new(4, NANOS_PER_SEC).unwrap();
/// let mut s = Default::default();
/// for _ in 0..4 { assert!(sw.check(&mut s, 0, 1).unwrap().allowed); }
/// // Half-way through the next window, half of the previous count still weighs.
/// let d = sw.check(&mut s, 3 * NANOS_PER_SEC / 2, 1).unwrap();
/// assert!(d.allowed);
/// assert_eq!(d.remaining, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    window: Nanos,
}

/// State of one key under [`SlidingWindow`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    start: Nanos,
    prev: u64,
    curr: u64,
}

/// The counts as seen at some `now`: the current window's start, elapsed time, and counts.
struct View {
    start: u128,
    elapsed: u128,
    prev: u128,
    curr: u128,
}

impl SlidingWindow {
    /// `limit` requests per `window`, given as a [`std::time::Duration`] (a window beyond
    /// 64-bit nanoseconds, some 584 years, is [`ParamError::TooLarge`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluice_core::{SlidingWindow, NANOS_PER_SEC};
    /// assert_eq!(SlidingWindow::per(10, Duration::from_secs(60)), SlidingWindow::new(10, 60 * NANOS_PER_SEC));
    /// assert!(SlidingWindow::per(10, Duration::MAX).is_err());
    /// assert!(SlidingWindow::per(10, Duration::ZERO).is_err());
    /// ```
    pub fn per(limit: u64, window: std::time::Duration) -> Result<Self, ParamError> {
        Self::new(limit, crate::algorithm::window_nanos(window)?)
    }

    /// `limit` requests per sliding `window` nanoseconds (estimated).
    pub fn new(limit: u64, window: Nanos) -> Result<Self, ParamError> {
        check_window_params(limit, window)?;
        Ok(Self { limit, window })
    }

    /// The window length in nanoseconds.
    pub fn window(&self) -> Nanos {
        self.window
    }

    fn view(&self, s: &SlidingWindowState, now: Nanos) -> View {
        let w = self.window as u128;
        let aligned = (now - now % self.window) as u128;
        let start = s.start as u128;
        let (start, prev, curr) = if aligned == start {
            (start, s.prev, s.curr)
        } else if aligned == start + w {
            (aligned, s.curr, 0)
        } else if aligned > start {
            (aligned, 0, 0)
        } else {
            // The clock stepped back into an earlier window: keep the newer counts, weigh the
            // previous window fully (the strict direction).
            (start, s.prev, s.curr)
        };
        let elapsed = (now as u128).saturating_sub(start).min(w);
        View { start, elapsed, prev: prev as u128, curr: curr as u128 }
    }

    /// floor(prev * (w - elapsed) / w) + curr
    fn estimate(&self, v: &View) -> u128 {
        let w = self.window as u128;
        v.prev * (w - v.elapsed) / w + v.curr
    }

    /// Smallest elapsed `e` in [0, w] at which floor(prev * (w - e) / w) <= k; `w` if none below `w`.
    fn earliest(&self, prev: u128, k: u128) -> u128 {
        let w = self.window as u128;
        if prev == 0 {
            return 0;
        }
        // floor(prev * (w - e) / w) <= k  <=>  prev * (w - e) <= (k + 1) * w - 1
        let span = ((k + 1) * w - 1) / prev;
        w - span.min(w)
    }

    fn decide(
        &self,
        s: &SlidingWindowState,
        now: Nanos,
        cost: u64,
    ) -> Result<(Decision, SlidingWindowState), CostError> {
        check_charge(cost, self.limit)?;
        let w = self.window as u128;
        let limit = self.limit as u128;
        let c = cost as u128;
        let v = self.view(s, now);
        let est = self.estimate(&v);
        let allowed = est + c <= limit;
        let curr_after = if allowed { v.curr + c } else { v.curr };
        let remaining = limit.saturating_sub(if allowed { est + c } else { est });
        let now128 = now as u128;
        let reset_at = if curr_after > 0 {
            v.start + 2 * w
        } else if v.prev > 0 {
            v.start + w
        } else {
            now128
        };
        let retry_at = if allowed {
            now128
        } else {
            // Later in this window, as the previous window's weight fades.
            let in_this = (v.curr + c <= limit).then(|| self.earliest(v.prev, limit - v.curr - c)).filter(|&e| e < w);
            match in_this {
                Some(e) => v.start + e.max(v.elapsed),
                None => {
                    // In the next window, this window's count becomes the weighted one.
                    let e = self.earliest(v.curr, limit - c);
                    if e < w { v.start + w + e } else { v.start + 2 * w }
                }
            }
        };
        let d = Decision {
            allowed,
            limit: self.limit,
            remaining: sat(remaining),
            reset_after: sat(reset_at.saturating_sub(now128)),
            retry_after: sat(retry_at.saturating_sub(now128)),
            delay: 0,
        };
        let next = SlidingWindowState { start: sat(v.start), prev: sat(v.prev), curr: sat(curr_after) };
        Ok((d, next))
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn limit(&self) -> u64 {
        self.limit
    }

    fn check(&self, state: &mut SlidingWindowState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        commit(state, self.decide(state, now, cost))
    }

    fn peek(&self, state: &SlidingWindowState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        self.decide(state, now, cost).map(|(d, _)| d)
    }

    fn is_fresh(&self, state: &SlidingWindowState, now: Nanos) -> bool {
        let v = self.view(state, now);
        v.prev == 0 && v.curr == 0
    }

    /// The count of the window the charge was made in goes back down: the current one, or the
    /// previous one while it still weighs. A charge two windows old weighs nothing already.
    fn refund(&self, state: &mut SlidingWindowState, charged_at: Nanos, cost: u64, _now: Nanos) {
        let charged = (charged_at - charged_at % self.window) as u128;
        let start = state.start as u128;
        if start == charged {
            state.curr = state.curr.saturating_sub(cost);
        } else if start == charged + self.window as u128 {
            state.prev = state.prev.saturating_sub(cost);
        }
    }

    fn refund_reads_now(&self) -> bool {
        false
    }

    /// Counted in the window of `now`, past the limit if need be, up to a debt of one limit
    /// (twice the limit in the window's count): the debt weighs on this window and, fading, on
    /// the next.
    fn overrun(&self, state: &mut SlidingWindowState, now: Nanos, cost: u64) {
        let v = self.view(state, now);
        let curr = sat(v.curr);
        let curr = curr.max(curr.saturating_add(cost).min(self.limit.saturating_mul(2)));
        *state = SlidingWindowState { start: sat(v.start), prev: sat(v.prev), curr };
    }
}
