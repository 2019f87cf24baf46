//! Fixed window: a counter per aligned window.

use crate::algorithm::{Algorithm, check_charge, check_window_params, commit, sat};
use crate::decision::Decision;
use crate::error::{CostError, ParamError};
use crate::time::Nanos;
use crate::zone::CalendarWindows;

/// Admits while `count_in_window + cost <= limit`; windows are aligned to multiples of `window`
/// since the epoch, or to a zone's calendar ([`FixedWindow::calendar`]: days, weeks, months),
/// and only admitted requests count. At a boundary, up to `2 * limit` can pass within one
/// window length: `limit` just before the edge and `limit` just after.
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
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    /// The window's length; for calendar windows a typical one ([`crate::Period::nominal`]),
    /// which no decision uses.
    window: Nanos,
    /// Where windows begin when they follow a calendar; `None`: every `window` since the epoch.
    calendar: Option<CalendarWindows>,
}

/// As before calendars existed when the windows follow none (snapshots name policies by it).
impl std::fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::algorithm::fmt_windowed(f, "FixedWindow", self.limit, self.window, &self.calendar)
    }
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
        Ok(Self { limit, window, calendar: None })
    }

    /// `limit` requests per calendar window: a day, week, month or year as a zone's clocks
    /// show it (23 to 25 hours for a day where daylight saving time begins or ends).
    ///
    /// ```
    /// use sluice_core::{Algorithm, CalendarWindows, FixedWindow, NANOS_PER_SEC as S, Period, Zone};
    /// let monthly = FixedWindow::calendar(2, CalendarWindows::new(Period::Month, Zone::utc().interned())).unwrap();
    /// let mut s = Default::default();
    /// let jan_31 = 1_706_659_200 * S; // 2024-01-31 00:00 UTC
    /// assert!(monthly.check(&mut s, jan_31, 2).unwrap().allowed);
    /// let denied = monthly.check(&mut s, jan_31, 1).unwrap();
    /// assert_eq!(denied.retry_after, 86_400 * S); // 1 February
    /// ```
    pub fn calendar(limit: u64, windows: CalendarWindows) -> Result<Self, ParamError> {
        let window = windows.period().nominal();
        check_window_params(limit, window)?;
        Ok(Self { limit, window, calendar: Some(windows) })
    }

    /// The window length in nanoseconds; for calendar windows a typical length (30 days for a
    /// month), for what needs one number: decisions use [`FixedWindow::bounds`].
    pub fn window(&self) -> Nanos {
        self.window
    }

    /// The calendar the windows follow, if they follow one.
    pub fn calendar_windows(&self) -> Option<CalendarWindows> {
        self.calendar
    }

    /// The window that holds `now`: `(start, end)`, `start <= now < end` (`end` saturates at
    /// `u64::MAX`).
    pub fn bounds(&self, now: Nanos) -> (Nanos, Nanos) {
        crate::algorithm::window_bounds(self.window, self.calendar, now)
    }

    /// The window start, its end and the count that apply at `now`.
    fn current(&self, s: &FixedWindowState, now: Nanos) -> (Nanos, u128, u64) {
        // A state from a later window than `now` (a clock that stepped back) still counts:
        // errors go the strict way.
        let Some(calendar) = self.calendar else {
            let end = s.start as u128 + self.window as u128;
            return if s.count > 0 && (now as u128) < end {
                (s.start, end, s.count)
            } else {
                let start = now - now % self.window;
                (start, start as u128 + self.window as u128, 0)
            };
        };
        let (start, end) = calendar.bounds(now);
        if s.count > 0 && s.start == start {
            (start, end.into(), s.count)
        } else if s.count > 0 && s.start > start {
            (s.start, calendar.bounds(s.start).1.into(), s.count)
        } else {
            (start, end.into(), 0)
        }
    }

    fn decide(&self, s: &FixedWindowState, now: Nanos, cost: u64) -> Result<(Decision, FixedWindowState), CostError> {
        check_charge(cost, self.limit)?;
        let (start, end, count) = self.current(s, now);
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
        self.current(state, now).2 == 0
    }

    /// The count goes back down if the state still counts the window the charge was made in;
    /// a charge of an earlier window is gone with it.
    fn refund(&self, state: &mut FixedWindowState, charged_at: Nanos, cost: u64, _now: Nanos) {
        if state.start == self.bounds(charged_at).0 {
            state.count = state.count.saturating_sub(cost);
        }
    }

    fn refund_reads_now(&self) -> bool {
        false
    }

    /// Counted in the window of `now`, past the limit if need be, up to a debt of one limit
    /// (twice the limit counted): the debt lasts until the window ends.
    fn overrun(&self, state: &mut FixedWindowState, now: Nanos, cost: u64) {
        let (start, _, count) = self.current(state, now);
        let count = count.max(count.saturating_add(cost).min(self.limit.saturating_mul(2)));
        *state = FixedWindowState { start, count };
    }
}
