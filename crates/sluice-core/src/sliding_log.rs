//! Sliding log: the exact sliding window, one timestamp per admitted unit of cost.

use std::collections::VecDeque;

use crate::algorithm::{Algorithm, check_charge, check_window_params, sat};
use crate::decision::Decision;
use crate::error::{CostError, ParamError};
use crate::time::Nanos;

/// Admits when the admitted timestamps `t'` with `t' > now - window`, plus `cost`, are at most
/// `limit`. Exact: no interval of one window length ever holds more than `limit` admitted units.
/// The state holds at most `limit` timestamps.
///
/// ```
/// use sluice_core::{Algorithm, SlidingLog, NANOS_PER_SEC};
/// let log = SlidingLog::new(1, NANOS_PER_SEC).unwrap();
/// let mut s = Default::default();
/// assert!(log.check(&mut s, 100, 1).unwrap().allowed);
/// let d = log.check(&mut s, 200, 1).unwrap();
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after, NANOS_PER_SEC - 100); // when the entry at t=100 leaves the window
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: u64,
    window: Nanos,
}

/// State of one key under [`SlidingLog`]: admitted timestamps, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingLogState {
    times: VecDeque<Nanos>,
}

impl SlidingLogState {
    /// The number of timestamps held (live or not yet pruned).
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// True when no timestamp is held.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }
}

impl SlidingLog {
    /// `limit` requests per `window`, given as a [`std::time::Duration`] (a window beyond
    /// 64-bit nanoseconds, some 584 years, is [`ParamError::TooLarge`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluice_core::{SlidingLog, NANOS_PER_SEC};
    /// assert_eq!(SlidingLog::per(10, Duration::from_secs(60)), SlidingLog::new(10, 60 * NANOS_PER_SEC));
    /// assert!(SlidingLog::per(10, Duration::MAX).is_err());
    /// assert!(SlidingLog::per(10, Duration::ZERO).is_err());
    /// ```
    pub fn per(limit: u64, window: std::time::Duration) -> Result<Self, ParamError> {
        Self::new(limit, crate::algorithm::window_nanos(window)?)
    }

    /// `limit` requests in any interval of `window` nanoseconds.
    pub fn new(limit: u64, window: Nanos) -> Result<Self, ParamError> {
        check_window_params(limit, window)?;
        Ok(Self { limit, window })
    }

    /// The window length in nanoseconds.
    pub fn window(&self) -> Nanos {
        self.window
    }

    /// Index of the first timestamp still inside the window at `now`.
    fn first_live(&self, s: &SlidingLogState, now: Nanos) -> usize {
        let w = self.window as u128;
        s.times.partition_point(|&t| t as u128 + w <= now as u128)
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn limit(&self) -> u64 {
        self.limit
    }

    fn check(&self, state: &mut SlidingLogState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        let d = self.peek(state, now, cost)?;
        let first = self.first_live(state, now);
        state.times.drain(..first);
        if d.allowed {
            // Keep the log sorted even if the clock stepped back: record no earlier than the newest.
            let at = state.times.back().map_or(now, |&b| b.max(now));
            state.times.extend(std::iter::repeat_n(at, cost as usize));
        }
        Ok(d)
    }

    fn peek(&self, state: &SlidingLogState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        check_charge(cost, self.limit)?;
        let w = self.window as u128;
        let first = self.first_live(state, now);
        let live = (state.times.len() - first) as u64;
        // Written so that no limit up to u64::MAX overflows (`live + cost` could).
        let allowed = cost <= self.limit.saturating_sub(live);
        let after = if allowed { live + cost } else { live };
        // The newest entry once this request is decided: `check` records an admitted request
        // no earlier than the newest entry already held.
        let back = state.times.back().copied();
        let newest = if allowed && cost > 0 { Some(back.map_or(now, |b| b.max(now))) } else { back };
        let reset_after = match newest {
            // The log is empty again when its newest entry leaves the window.
            Some(t) if after > 0 => sat((t as u128 + w).saturating_sub(now as u128)),
            _ => 0,
        };
        let retry_after = if allowed {
            0
        } else {
            // The (live + cost - limit)-th oldest live entry must leave the window.
            let must_leave = (live - (self.limit - cost)) as usize;
            let t = state.times[first + must_leave - 1];
            sat((t as u128 + w).saturating_sub(now as u128))
        };
        Ok(Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit.saturating_sub(after),
            reset_after,
            retry_after,
            delay: 0,
        })
    }

    fn is_fresh(&self, state: &SlidingLogState, now: Nanos) -> bool {
        self.first_live(state, now) == state.times.len()
    }

    /// The charge's entries are removed while they are still in the window: up to `cost`
    /// entries stamped at `charged_at` or later, the earliest first (a request's entries are
    /// stamped at the time it was charged; after a clock that stepped back, at the newest entry
    /// then, and removing an earlier entry than its own keeps a later one: the strict direction).
    fn refund(&self, state: &mut SlidingLogState, charged_at: Nanos, cost: u64, now: Nanos) {
        if charged_at as u128 + self.window as u128 <= now as u128 {
            return; // out of the window: it no longer counts, and later entries are others'
        }
        let from = state.times.partition_point(|&t| t < charged_at);
        let n = (state.times.len() - from).min(usize::try_from(cost).unwrap_or(usize::MAX));
        state.times.drain(from..from + n);
    }

    /// Entries stamped at `now`, up to a log of `limit` live entries: the log never holds more
    /// than the limit (bounded memory), so the debt is at most a full window's worth — the key
    /// is denied until its entries leave the window, for at most one window.
    fn overrun(&self, state: &mut SlidingLogState, now: Nanos, cost: u64) {
        let first = self.first_live(state, now);
        state.times.drain(..first);
        let room = self.limit.saturating_sub(state.times.len() as u64);
        let at = state.times.back().map_or(now, |&b| b.max(now));
        state.times.extend(std::iter::repeat_n(at, cost.min(room) as usize));
    }
}
