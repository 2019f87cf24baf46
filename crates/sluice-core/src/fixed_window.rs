//! Fixed window: a counter per aligned window.

use crate::algorithm::{Algorithm, check_charge, check_window_params, commit, sat};
use crate::decision::Decision;
use crate::error::{CostError, ParamError};
use crate::time::Nanos;

/// Admits while `count_in_window + cost <= limit`; windows are aligned to multiples of `window`
/// since the epoch, and only admitted requests count. At a boundary, up to `2 * limit` can pass
/// within one window length: `limit` just before the edge and `limit` just after.
///
/// ```
/// use sluice_core::{Algorithm, FixedWindow, NANOS_PER_SEC};
/// let fw = FixedWindow::new(2, NANOS_PER_SEC).unwrap();
/// let mut s = Default::default();
/// assert!(fw.check(&mut s, 0, 1).unwrap().allowed);
/// assert!(fw.check(&mut s, 1, 1).unwrap().allowed);
/// let denied = fw.check(&mut s, 2, 1).unwrap();
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after, NANOS_PER_SEC - 2); // the next window
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window: Nanos,
}

/// State of one key under [`FixedWindow`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FixedWindowState {
    start: Nanos,
    count: u64,
}

impl FixedWindow {
    /// `limit` requests per `window`, given as a [`std::time::Duration`] (a window beyond
    /// 64-bit nanoseconds, some 584 years, is [`ParamError::TooLarge`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluice_core::{FixedWindow, NANOS_PER_SEC};
    /// assert_eq!(FixedWindow::per(10, Duration::from_secs(60)), FixedWindow::new(10, 60 * NANOS_PER_SEC));
    /// assert!(FixedWindow::per(10, Duration::MAX).is_err());
    /// assert!(FixedWindow::per(10, Duration::ZERO).is_err());
    /// ```
    pub fn per(limit: u64, window: std::time::Duration) -> Result<Self, ParamError> {
        Self::new(limit, crate::algorithm::window_nanos(window)?)
    }

    /// `limit` requests per `window` nanoseconds.
    pub fn new(limit: u64, window: Nanos) -> Result<Self, ParamError> {
        check_window_params(limit, window)?;
        Ok(Self { limit, window })
    }

    /// The window length in nanoseconds.
    pub fn window(&self) -> Nanos {
        self.window
    }

    /// The window start and the count that apply at `now`.
    fn current(&self, s: &FixedWindowState, now: Nanos) -> (Nanos, u64) {
        // A state from a later window than `now` (a clock that stepped back) still counts:
        // errors go the strict way.
        if s.count > 0 && (now as u128) < s.start as u128 + self.window as u128 {
            (s.start, s.count)
        } else {
            (now - now % self.window, 0)
        }
    }

    fn decide(&self, s: &FixedWindowState, now: Nanos, cost: u64) -> Result<(Decision, FixedWindowState), CostError> {
        check_charge(cost, self.limit)?;
        let (start, count) = self.current(s, now);
        let end = start as u128 + self.window as u128;
        let until_end = sat(end.saturating_sub(now as u128));
        // Written so that no limit up to u64::MAX overflows (`count + cost` could).
        let allowed = cost <= self.limit.saturating_sub(count);
        let after = if allowed { count + cost } else { count };
        let d = Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(after),
            reset_after: if after > 0 { until_end } else { 0 },
            retry_after: if allowed { 0 } else { until_end },
            delay: 0,
        };
        Ok((d, FixedWindowState { start, count: after }))
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn limit(&self) -> u64 {
        self.limit
    }

    fn check(&self, state: &mut FixedWindowState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        commit(state, self.decide(state, now, cost))
    }

    fn peek(&self, state: &FixedWindowState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        self.decide(state, now, cost).map(|(d, _)| d)
    }

    fn is_fresh(&self, state: &FixedWindowState, now: Nanos) -> bool {
        self.current(state, now).1 == 0
    }

    /// The count goes back down if the state still counts the window the charge was made in;
    /// a charge of an earlier window is gone with it.
    fn refund(&self, state: &mut FixedWindowState, charged_at: Nanos, cost: u64, _now: Nanos) {
        if state.start == charged_at - charged_at % self.window {
            state.count = state.count.saturating_sub(cost);
        }
    }

    fn refund_reads_now(&self) -> bool {
        false
    }

    /// Counted in the window of `now`, past the limit if need be, up to a debt of one limit
    /// (twice the limit counted): the debt lasts until the window ends.
    fn overrun(&self, state: &mut FixedWindowState, now: Nanos, cost: u64) {
        let (start, count) = self.current(state, now);
        let count = count.max(count.saturating_add(cost).min(self.limit.saturating_mul(2)));
        *state = FixedWindowState { start, count };
    }
}
