//! Sliding window counter: two counts and a weighted estimate.

use crate::algorithm::{Algorithm, check_charge, check_window_params, commit, sat};
use crate::decision::Decision;
use crate::error::{CostError, ParamError};
use crate::time::Nanos;
use crate::zone::CalendarWindows;

/// Admits when `floor(prev * (1 - elapsed / window) + curr) + cost <= limit`, where `elapsed`
/// is measured from the start of the current aligned window, `curr` counts admitted requests in
/// it and `prev` those in the window before (the convention of Cloudflare's description and of
/// the Python `limits` library). Integer arithmetic throughout: the estimate is
/// `(prev * (window - elapsed) + curr * window) / window`, floored.
///
/// On a calendar ([`SlidingWindow::calendar`]) the windows are a zone's days, weeks, months or
/// years, and `window` in the estimate is the length of the current one: the previous window's
/// count weighs the share of the current window still to run, whatever either's length (a
/// February's count weighs fully at the start of March and nothing at its end).
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
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    /// The window's length; for calendar windows a typical one ([`crate::Period::nominal`]),
    /// which no decision uses.
    window: Nanos,
    /// Where windows begin when they follow a calendar; `None`: every `window` since the epoch.
    calendar: Option<CalendarWindows>,
}

/// As before calendars existed when the windows follow none (snapshots name policies by it).
impl std::fmt::Debug for SlidingWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::algorithm::fmt_windowed(f, "SlidingWindow", self.limit, self.window, &self.calendar)
    }
}

/// State of one key under [`SlidingWindow`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlidingWindowState {
    start: Nanos,
    prev: u64,
    curr: u64,
}

/// The counts as seen at some `now`: the current window's bounds, elapsed time, and counts.
struct View {
    start: u128,
    end: u128,
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
        Ok(Self { limit, window, calendar: None })
    }

    /// `limit` requests per sliding calendar window: the current day, week, month or year as a
    /// zone's clocks show it, plus the previous one's count weighted by the share of the
    /// current window still to run.
    ///
    /// ```
    /// use sluice_core::{Algorithm, CalendarWindows, NANOS_PER_SEC as S, Period, SlidingWindow, Zone};
    /// let monthly = SlidingWindow::calendar(30, CalendarWindows::new(Period::Month, Zone::utc().interned())).unwrap();
    /// let mut s = Default::default();
    /// let feb_1 = 1_706_745_600 * S; // 2024-02-01 00:00 UTC
    /// assert!(monthly.check(&mut s, feb_1, 30).unwrap().allowed);
    /// // 1 March: February's 30 weigh fully; half-way through March's 31 days, 15 of them.
    /// let mar_1 = feb_1 + 29 * 86_400 * S;
    /// assert_eq!(monthly.peek(&s, mar_1, 1).unwrap().remaining, 0);
    /// let mid_march = mar_1 + 31 * 86_400 * S / 2;
    /// assert_eq!(monthly.peek(&s, mid_march, 1).unwrap().remaining, 14);
    /// ```
    pub fn calendar(limit: u64, windows: CalendarWindows) -> Result<Self, ParamError> {
        let window = windows.period().nominal();
        check_window_params(limit, window)?;
        Ok(Self { limit, window, calendar: Some(windows) })
    }

    /// The window length in nanoseconds; for calendar windows a typical length (30 days for a
    /// month), for what needs one number: decisions use [`SlidingWindow::bounds`].
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

    /// [`SlidingWindow::decide_on`] over this policy's windows: one copy of the arithmetic for
    /// each kind of window, so that epoch windows pay nothing for calendars.
    fn decide(
        &self,
        s: &SlidingWindowState,
        now: Nanos,
        cost: u64,
    ) -> Result<(Decision, SlidingWindowState), CostError> {
        match self.calendar {
            None => self.decide_on(Epoch(self.window), s, now, cost),
            Some(c) => self.decide_on(c, s, now, cost),
        }
    }

    fn view(&self, s: &SlidingWindowState, now: Nanos) -> View {
        match self.calendar {
            None => view_on(Epoch(self.window), s, now),
            Some(c) => view_on(c, s, now),
        }
    }

    fn decide_on(
        &self,
        grid: impl Grid,
        s: &SlidingWindowState,
        now: Nanos,
        cost: u64,
    ) -> Result<(Decision, SlidingWindowState), CostError> {
        check_charge(cost, self.limit)?;
        let limit = self.limit as u128;
        let c = cost as u128;
        let v = view_on(grid, s, now);
        let w = grid.len(v.start, v.end);
        // floor(prev * (w - elapsed) / w) + curr
        let est = v.prev * (w - v.elapsed) / w + v.curr;
        let allowed = est + c <= limit;
        let curr_after = if allowed { v.curr + c } else { v.curr };
        let remaining = limit.saturating_sub(if allowed { est + c } else { est });
        let now128 = now as u128;
        let next_end = grid.end_of(v.end);
        let reset_at = if curr_after > 0 {
            next_end
        } else if v.prev > 0 {
            v.end
        } else {
            now128
        };
        let retry_at = if allowed {
            now128
        } else {
            // Later in this window, as the previous window's weight fades.
            let in_this = (v.curr + c <= limit).then(|| earliest(v.prev, limit - v.curr - c, w)).filter(|&e| e < w);
            match in_this {
                Some(e) => v.start + e.max(v.elapsed),
                None => {
                    // In the next window, this window's count becomes the weighted one.
                    let next = grid.len(v.end, next_end);
                    let e = earliest(v.curr, limit - c, next);
                    if e < next { v.end + e } else { next_end }
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

/// Where windows begin and end, as the counter's arithmetic needs it (in u128, so that no sum
/// of times overflows).
trait Grid: Copy {
    /// The window that holds `now`.
    fn window_of(self, now: Nanos) -> (u128, u128);
    /// The end of the window that begins at `start`.
    fn end_of(self, start: u128) -> u128;
    /// The length of the window `[start, end)`.
    fn len(self, start: u128, end: u128) -> u128;
}

/// Every `.0` nanoseconds since the epoch.
#[derive(Clone, Copy)]
struct Epoch(Nanos);

impl Grid for Epoch {
    fn window_of(self, now: Nanos) -> (u128, u128) {
        let start = (now - now % self.0) as u128;
        (start, start + self.0 as u128)
    }

    fn end_of(self, start: u128) -> u128 {
        start + self.0 as u128
    }

    /// `.0`, a u64 the compiler can see: dividing by it measured a fifth faster than by a
    /// difference of u128s.
    fn len(self, _: u128, _: u128) -> u128 {
        u128::from(self.0)
    }
}

impl Grid for CalendarWindows {
    fn window_of(self, now: Nanos) -> (u128, u128) {
        let (start, end) = self.bounds(now);
        (start as u128, end as u128)
    }

    fn end_of(self, start: u128) -> u128 {
        match Nanos::try_from(start) {
            Ok(start) => self.bounds(start).1 as u128,
            Err(_) => u64::MAX as u128,
        }
    }

    fn len(self, start: u128, end: u128) -> u128 {
        end - start
    }
}

/// The counts of `s` as seen at `now`.
fn view_on(grid: impl Grid, s: &SlidingWindowState, now: Nanos) -> View {
    let (aligned, end) = grid.window_of(now);
    let start = s.start as u128;
    let (start, end, prev, curr) = if aligned == start {
        (start, end, s.prev, s.curr)
    } else if aligned > start && aligned == grid.end_of(start) {
        (aligned, end, s.curr, 0)
    } else if aligned > start {
        (aligned, end, 0, 0)
    } else {
        // The clock stepped back into an earlier window: keep the newer counts, weigh the
        // previous window fully (the strict direction).
        (start, grid.end_of(start), s.prev, s.curr)
    };
    let elapsed = (now as u128).saturating_sub(start).min(end - start);
    View { start, end, elapsed, prev: prev as u128, curr: curr as u128 }
}

/// Smallest elapsed `e` in [0, w] at which floor(prev * (w - e) / w) <= k, in a window of
/// length `w`; `w` if none below `w`.
fn earliest(prev: u128, k: u128, w: u128) -> u128 {
    if prev == 0 {
        return 0;
    }
    // floor(prev * (w - e) / w) <= k  <=>  prev * (w - e) <= (k + 1) * w - 1
    let span = ((k + 1) * w - 1) / prev;
    w - span.min(w)
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
        let charged = self.bounds(charged_at).0;
        if state.start == charged {
            state.curr = state.curr.saturating_sub(cost);
        } else if state.start == self.bounds(charged).1 {
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
