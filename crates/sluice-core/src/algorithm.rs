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
