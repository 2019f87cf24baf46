//! A retry budget: retries may be at most a share of requests (Google SRE's 10% by default).
//!
//! # How it works
//!
//! The budget is sluice's own [`TokenBucket`] run on a *virtual clock that counts requests*
//! instead of time. Each original request (not a retry) moves the virtual clock forward by one
//! virtual second; the bucket refills at `ratio` tokens per virtual second, so every request earns
//! `ratio` of a token. Each retry spends one whole token; with no whole token left, the retry is
//! refused. The bucket starts full with `allowance` tokens, which is also the most it can save up,
//! so a long quiet spell does not buy a retry storm later.
//!
//! Because the bucket is the core's exact integer GCRA meter and its clock is a request count,
//! the budget is exact and deterministic: the same sequence of requests and retries always gets
//! the same answers, whatever the timing or the machine. Over any stretch of calls,
//! `retries <= allowance + ratio * requests`. The refill interval is `1e9 / ratio` nanoseconds
//! rounded up, so for ratios where that is whole (0.1, 0.05, 0.2, 0.25, 0.5, 1, ...) a request
//! earns exactly `ratio`; otherwise slightly less (never more), by under one part in 10^9.
//!
//! The virtual clock would overflow after about 1.8·10^10 requests; long before that (at 2^62
//! virtual nanoseconds) it is moved back to near zero with the bucket's exact deficit carried
//! over, so the budget's answers do not change.

use std::sync::Mutex;

use sluice_core::{Algorithm, GcraState, NANOS_PER_SEC, Nanos, ParamError, TokenBucket};
use thiserror::Error;

/// The virtual time at which the clock is moved back.
const REBASE_AT: Nanos = 1 << 62;

/// A retry budget that cannot be made.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BudgetError {
    /// The share of requests that may be retried is not a positive, finite number.
    #[error("the retry budget's ratio must be a positive, finite number (got {0})")]
    BadRatio(f64),
    /// No retry in hand: the budget could never grant one.
    #[error("the retry budget's allowance must be at least 1")]
    ZeroAllowance,
    /// The ratio is so small that one retry is earned more rarely than 64-bit nanoseconds count.
    #[error("the retry budget's ratio {ratio} is too small to represent")]
    RatioTooSmall {
        /// The ratio given.
        ratio: f64,
    },
}

/// A retry budget shared by every request of a client (clone the policy or the middleware, not
/// the budget: it is kept behind an `Arc`).
///
/// ```
/// use sluice_client::RetryBudget;
/// let budget = RetryBudget::new(0.1, 2).unwrap(); // 10% of requests, 2 retries in hand
/// assert!(budget.try_withdraw() && budget.try_withdraw());
/// assert!(!budget.try_withdraw());            // spent
/// for _ in 0..10 { budget.deposit(); }        // 10 requests earn one retry
/// assert!(budget.try_withdraw());
/// assert!(!budget.try_withdraw());
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    bucket: TokenBucket,
    ratio: f64,
    rebase_at: Nanos,
    state: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    bucket: GcraState,
    /// Virtual time: one second per original request.
    now: Nanos,
}

impl RetryBudget {
    /// Retries at most `ratio` per request (0.1 = 10%) plus `allowance` retries in hand, which is
    /// also the most the budget saves up. `ratio` must be positive and finite, `allowance` >= 1.
    pub fn new(ratio: f64, allowance: u64) -> Result<Self, BudgetError> {
        Self::with_rebase(ratio, allowance, REBASE_AT)
    }

    fn with_rebase(ratio: f64, allowance: u64, rebase_at: Nanos) -> Result<Self, BudgetError> {
        let bucket = TokenBucket::new(allowance, ratio).map_err(|e| match e {
            ParamError::Zero { .. } => BudgetError::ZeroAllowance,
            ParamError::BadRate { value, .. } => BudgetError::BadRatio(value),
            _ => BudgetError::RatioTooSmall { ratio },
        })?;
        Ok(Self { bucket, ratio, rebase_at, state: Mutex::new(Ledger::default()) })
    }

    /// Google SRE's client-side default: retries at most 10% of requests, 10 in hand.
    pub fn google_sre() -> Self {
        Self::new(0.1, 10).unwrap_or_else(|_| unreachable!("0.1 and 10 are valid budget parameters"))
    }

    /// The share of requests that may be retried.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Retries in hand when the budget is fresh, and the most it saves up.
    pub fn allowance(&self) -> u64 {
        self.bucket.capacity()
    }

    /// Records an original request: it earns `ratio` of a retry.
    pub fn deposit(&self) {
        let mut ledger = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        ledger.now = ledger.now.saturating_add(NANOS_PER_SEC);
        if ledger.now >= self.rebase_at {
            self.rebase(&mut ledger);
        }
    }

    /// Spends one retry if a whole one is available; false (and nothing spent) otherwise.
    pub fn try_withdraw(&self) -> bool {
        let mut ledger = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = ledger.now;
        self.bucket.check(&mut ledger.bucket, now, 1).is_ok_and(|d| d.allowed)
    }

    /// Whole retries available right now.
    pub fn available(&self) -> u64 {
        let ledger = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match self.bucket.peek(&ledger.bucket, ledger.now, 1) {
            Ok(d) if d.allowed => d.remaining + 1,
            _ => 0,
        }
    }

    /// Moves the virtual clock back near zero keeping `tat - now` (the bucket's deficit) exact.
    fn rebase(&self, ledger: &mut Ledger) {
        let capacity = self.bucket.capacity();
        // Asking for the whole capacity: denied exactly when tokens are missing, and then
        // `reset_after` is the deficit `tat - now` in nanoseconds.
        let deficit = match self.bucket.peek(&ledger.bucket, ledger.now, capacity) {
            Ok(d) if !d.allowed => d.reset_after,
            _ => 0,
        };
        let interval = self.bucket.interval();
        let missing = deficit.div_ceil(interval);
        let mut fresh = GcraState::default();
        if missing > 0 {
            // At virtual time 0, spend `missing` tokens: tat becomes missing * interval.
            let _ = self.bucket.check(&mut fresh, 0, missing);
        }
        ledger.bucket = fresh;
        ledger.now = missing * interval - deficit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_percent_is_exact() {
        let b = RetryBudget::new(0.1, 1).unwrap();
        assert!(b.try_withdraw());
        for round in 0..50 {
            for _ in 0..9 {
                b.deposit();
            }
            assert!(!b.try_withdraw(), "9 requests do not earn a retry (round {round})");
            b.deposit();
            assert!(b.try_withdraw(), "the 10th does (round {round})");
        }
    }

    #[test]
    fn savings_are_capped_at_the_allowance() {
        let b = RetryBudget::new(0.5, 3).unwrap();
        assert_eq!(b.available(), 3);
        for _ in 0..1000 {
            b.deposit();
        }
        assert_eq!(b.available(), 3);
        assert_eq!((0..10).filter(|_| b.try_withdraw()).count(), 3);
        assert_eq!(b.available(), 0);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert_eq!(RetryBudget::new(0.0, 10).unwrap_err(), BudgetError::BadRatio(0.0));
        assert_eq!(RetryBudget::new(-0.1, 10).unwrap_err(), BudgetError::BadRatio(-0.1));
        assert!(matches!(RetryBudget::new(f64::NAN, 10), Err(BudgetError::BadRatio(r)) if r.is_nan()));
        assert_eq!(RetryBudget::new(f64::INFINITY, 10).unwrap_err(), BudgetError::BadRatio(f64::INFINITY));
        assert_eq!(RetryBudget::new(0.1, 0).unwrap_err(), BudgetError::ZeroAllowance);
        assert_eq!(RetryBudget::new(1e-300, 10).unwrap_err(), BudgetError::RatioTooSmall { ratio: 1e-300 });
    }

    #[test]
    fn rebasing_changes_no_answer() {
        // The same sequence against a budget that rebases every few requests and one that never
        // does: identical answers, including across deficits that are not whole tokens.
        let ops: Vec<bool> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % 3 == 0).collect();
        for ratio in [0.1, 0.3, 0.7, 2.5] {
            let rebasing = RetryBudget::with_rebase(ratio, 4, 7 * NANOS_PER_SEC).unwrap();
            let plain = RetryBudget::new(ratio, 4).unwrap();
            for (i, &retry) in ops.iter().enumerate() {
                if retry {
                    assert_eq!(rebasing.try_withdraw(), plain.try_withdraw(), "op {i}, ratio {ratio}");
                } else {
                    rebasing.deposit();
                    plain.deposit();
                }
                assert_eq!(rebasing.available(), plain.available(), "op {i}, ratio {ratio}");
            }
        }
    }
}
