//! The contract every algorithm meets.

use crate::decision::Decision;
use crate::error::CostError;
use crate::time::Nanos;

/// A rate-limiting algorithm: a deterministic state machine over per-key state.
///
/// `Default::default()` of the state is the fresh state (a key never seen). Every method takes
/// `now` explicitly; nothing here reads a clock.
pub trait Algorithm {
    /// Per-key state.
    type State: Default + Clone + std::fmt::Debug + Send;

    /// The limit's size, as reported in `Decision::limit`.
    fn limit(&self) -> u64;

    /// Decides a request of `cost` at `now` and, when admitted, charges it to `state`.
    /// A denied request leaves the state's decisions unchanged.
    fn check(&self, state: &mut Self::State, now: Nanos, cost: u64) -> Result<Decision, CostError>;

    /// The decision `check` would give, without charging anything.
    fn peek(&self, state: &Self::State, now: Nanos, cost: u64) -> Result<Decision, CostError>;

    /// True when `state` decides every request at `now` (and later) as a fresh key would, so it
    /// can be dropped without changing any decision.
    fn is_fresh(&self, state: &Self::State, now: Nanos) -> bool;

    /// Gives back, at `now`, `cost` units of a charge that a `check` admitted at `charged_at`:
    /// the state then decides as if those units had never been charged, as far as the
    /// algorithm can still tell them apart (each algorithm says how far). A charge the state no
    /// longer counts (its window is over) gives nothing back, and nothing is ever given back
    /// beyond what the state holds. The caller gives back a charge once: the state keeps no
    /// record of what was refunded.
    fn refund(&self, state: &mut Self::State, charged_at: Nanos, cost: u64, now: Nanos);

    /// False when [`Algorithm::refund`] never reads its `now` (a store then need not read its
    /// clock to give a charge back). True by default.
    fn refund_reads_now(&self) -> bool {
        true
    }

    /// Charges `cost` at `now` without deciding: what a request used beyond what it reserved.
    /// The state may pass the limit — a debt — and then denies until time pays it back; each
    /// algorithm says how much debt it can hold.
    fn overrun(&self, state: &mut Self::State, now: Nanos, cost: u64);

    /// Charges `cost` at `at` without deciding and without the cap an overrun has: units a
    /// quota lease held apart and spent (a store's hold, counted when it is released or ends),
    /// which were admitted and must all be counted. The default is [`Algorithm::overrun`]; the
    /// buckets, the only algorithms whose units are held, count them whole.
    fn charge_held(&self, state: &mut Self::State, at: Nanos, cost: u64) {
        self.overrun(state, at, cost);
    }

    /// Settles a charge of `reserved` units admitted at `charged_at` at what the request
    /// really used, `actual`: the difference given back ([`Algorithm::refund`]) or charged
    /// ([`Algorithm::overrun`]).
    ///
    /// ```
    /// use sluice_core::{Algorithm, TokenBucket};
    /// let tb = TokenBucket::new(10, 1.0).unwrap();
    /// let mut s = Default::default();
    /// assert_eq!(tb.check(&mut s, 0, 8).unwrap().remaining, 2); // reserved 8
    /// tb.settle(&mut s, 0, 8, 3, 0); // used 3: 5 back
    /// assert_eq!(tb.peek(&s, 0, 1).unwrap().remaining, 6);
    /// tb.settle(&mut s, 0, 0, 12, 0); // 12 more than reserved: a debt of 5
    /// let d = tb.peek(&s, 0, 1).unwrap();
    /// assert!(!d.allowed);
    /// assert_eq!(d.retry_after, 6 * sluice_core::NANOS_PER_SEC); // the debt, then one token
    /// ```
    fn settle(&self, state: &mut Self::State, charged_at: Nanos, reserved: u64, actual: u64, now: Nanos) {
        if actual < reserved {
            self.refund(state, charged_at, reserved - actual, now);
        } else if actual > reserved {
            self.overrun(state, now, actual - reserved);
        }
    }
}

/// The cost bounds of a request, the one rule every face applies to what a request is
/// configured or asked to cost: from 1 to the limit. 0 is refused because it would never be
/// limited; above the limit because no amount of waiting would admit it.
///
/// ```
/// use sluice_core::check_cost;
/// assert!(check_cost(0, 5).is_err());
/// assert!(check_cost(1, 5).is_ok() && check_cost(5, 5).is_ok());
/// assert!(check_cost(6, 5).is_err());
/// ```
#[inline]
pub fn check_cost(cost: u64, limit: u64) -> Result<(), CostError> {
    if cost == 0 { Err(CostError { cost, capacity: limit }) } else { check_charge(cost, limit) }
}

/// The bound the algorithms and stores apply to what they are asked to decide: at most the
/// limit. Unlike [`check_cost`] it takes 0, which asks what is left without charging (Envoy's
/// `hits_addend: 0`).
#[inline]
pub fn check_charge(cost: u64, limit: u64) -> Result<(), CostError> {
    if cost > limit { Err(CostError { cost, capacity: limit }) } else { Ok(()) }
}

/// Validates the parameters shared by the window algorithms.
/// A window given as a [`std::time::Duration`], in nanoseconds: the constructors' `per` form.
pub(crate) fn window_nanos(window: std::time::Duration) -> Result<Nanos, crate::error::ParamError> {
    Nanos::try_from(window.as_nanos()).map_err(|_| crate::error::ParamError::TooLarge { field: "window" })
}

/// The window that holds `now`, `(start, end)` with `end` saturating at `u64::MAX`: every
/// `window` since the epoch, or the calendar's when there is one.
pub(crate) fn window_bounds(window: Nanos, calendar: Option<crate::CalendarWindows>, now: Nanos) -> (Nanos, Nanos) {
    match calendar {
        Some(c) => c.bounds(now),
        None => {
            let start = now - now % window;
            (start, start.saturating_add(window))
        }
    }
}

/// A window algorithm's `Debug` text, written as before calendars existed when the windows
/// follow none: a memory store's snapshot names its policies by this text, and a snapshot
/// written by an earlier version still reads.
pub(crate) fn fmt_windowed(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    limit: u64,
    window: Nanos,
    calendar: &Option<crate::CalendarWindows>,
) -> std::fmt::Result {
    let mut d = f.debug_struct(name);
    d.field("limit", &limit).field("window", &window);
    if let Some(c) = calendar {
        d.field("calendar", c);
    }
    d.finish()
}

pub(crate) fn check_window_params(limit: u64, window: Nanos) -> Result<(), crate::error::ParamError> {
    if limit == 0 {
        return Err(crate::error::ParamError::Zero { field: "limit" });
    }
    if window == 0 {
        return Err(crate::error::ParamError::Zero { field: "window" });
    }
    Ok(())
}

/// `check` from a pure `decide`: the new state is kept only when the request is admitted.
#[inline]
pub(crate) fn commit<S>(state: &mut S, decided: Result<(Decision, S), CostError>) -> Result<Decision, CostError> {
    let (d, next) = decided?;
    if d.allowed {
        *state = next;
    }
    Ok(d)
}

/// Clamps a 128-bit intermediate to `u64` (saturating).
pub(crate) fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_from_one_to_the_limit() {
        let limit = 5;
        assert_eq!(check_cost(0, limit), Err(CostError { cost: 0, capacity: limit }));
        assert_eq!(check_cost(1, limit), Ok(()));
        assert_eq!(check_cost(limit, limit), Ok(()));
        assert_eq!(check_cost(limit + 1, limit), Err(CostError { cost: limit + 1, capacity: limit }));
        assert_eq!(check_cost(u64::MAX, u64::MAX), Ok(()));
    }

    #[test]
    fn a_charge_may_be_zero_and_not_above_the_limit() {
        let limit = 5;
        assert_eq!(check_charge(0, limit), Ok(()));
        assert_eq!(check_charge(limit, limit), Ok(()));
        assert_eq!(check_charge(limit + 1, limit), Err(CostError { cost: limit + 1, capacity: limit }));
    }
}
