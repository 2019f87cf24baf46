//! Errors: bad parameters and requests that can never be admitted.

use thiserror::Error;

/// A cost outside the bounds of [`crate::check_cost`] (0, or above the limit) or of
/// [`crate::check_charge`] (above the limit): a request no amount of waiting would admit, or one
/// that would never be limited.
///
/// ```
/// use sluice_core::CostError;
/// assert_eq!(CostError { cost: 0, capacity: 5 }.to_string(), "cost must be at least 1: a request that costs nothing is never limited");
/// assert_eq!(CostError { cost: 6, capacity: 5 }.to_string(), "cost 6 exceeds the limit's capacity 5: it can never be admitted");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostError {
    /// The request's cost (0 when it was refused for costing nothing).
    pub cost: u64,
    /// The most any single request may cost under this limit.
    pub capacity: u64,
}

impl CostError {
    /// Why a cost of 0 is refused, said after the field that holds it (`route[0].cost: ...`).
    pub const ZERO: &'static str = "must be at least 1: a request that costs nothing is never limited";
}

impl std::fmt::Display for CostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cost == 0 {
            write!(f, "cost {}", Self::ZERO)
        } else {
            write!(f, "cost {} exceeds the limit's capacity {}: it can never be admitted", self.cost, self.capacity)
        }
    }
}

impl std::error::Error for CostError {}

/// Parameters that do not make a limit.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParamError {
    /// A count (limit, capacity) that must be at least 1.
    #[error("{field} must be at least 1")]
    Zero {
        /// The parameter's name.
        field: &'static str,
    },
    /// A rate that must be positive and finite.
    #[error("{field} must be a positive, finite number of requests per second (got {value})")]
    BadRate {
        /// The parameter's name.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// Numbers whose product does not fit in 64-bit nanoseconds.
    #[error("{field} is too large: the limit's span does not fit in 64-bit nanoseconds")]
    TooLarge {
        /// The parameter's name.
        field: &'static str,
    },
    /// `delay` (requests passed without delay when shaping) larger than the capacity allows.
    #[error("delay ({delay}) must be smaller than capacity ({capacity})")]
    DelayTooLarge {
        /// The `delay` given.
        delay: u64,
        /// The capacity.
        capacity: u64,
    },
}
