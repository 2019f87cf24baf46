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

/// Rejects a cost the limit can never admit.
#[inline]
pub(crate) fn ensure_cost(cost: u64, capacity: u64) -> Result<(), CostError> {
    if cost > capacity { Err(CostError { cost, capacity }) } else { Ok(()) }
}

/// Validates the parameters shared by the window algorithms.
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
