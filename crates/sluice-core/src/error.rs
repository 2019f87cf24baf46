//! Errors: bad parameters and requests that can never be admitted.

use thiserror::Error;

/// A request that no amount of waiting would admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("cost {cost} exceeds the limit's capacity {capacity}: it can never be admitted")]
pub struct CostError {
    /// The request's cost.
    pub cost: u64,
    /// The most any single request may cost under this limit.
    pub capacity: u64,
}

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
