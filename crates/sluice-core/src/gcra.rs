//! Token bucket and leaky bucket, both as a GCRA meter over a "theoretical arrival time".
//!
//! A bucket of `capacity` refilled at `rate` per second is kept as one number, `tat`: the time
//! at which the bucket would be full again. With the emission interval `T = 1 / rate` (whole
//! nanoseconds, rounded up so rounding never admits more), the tokens at `now` are
//! `capacity - max(0, tat - now) / T`, and a request of `cost` is admitted when
//! `max(tat, now) + cost * T - now <= capacity * T`. This is exact integer arithmetic: no
//! drift accumulates however long a key lives.

use crate::algorithm::{Algorithm, check_charge, commit};
use crate::decision::Decision;
use crate::error::{CostError, ParamError};
use crate::time::{NANOS_PER_SEC, Nanos};

/// State of one key under [`TokenBucket`] or [`LeakyBucket`]: the theoretical arrival time.
/// The default (0) is a full bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcraState {
    tat: Nanos,
}

/// The emission interval for `rate` per second, in whole nanoseconds, rounded up.
fn interval(field: &'static str, rate: f64) -> Result<Nanos, ParamError> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(ParamError::BadRate { field, value: rate });
    }
    let t = (NANOS_PER_SEC as f64 / rate).ceil();
    if t >= u64::MAX as f64 {
        return Err(ParamError::TooLarge { field });
    }
    Ok((t as u64).max(1))
}

/// The meter shared by both buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Meter {
    /// Nanoseconds per token.
    interval: Nanos,
    capacity: u64,
    /// `capacity * interval`: the bucket's depth in time (fits u64: checked at construction).
    /// Kept so that no decision multiplies it again.
    tau: Nanos,
    /// `floor((2^64 - 1) / interval)`: turns the division of a time into tokens into a
    /// multiplication and at most two corrections ([`Meter::tokens`]).
    reciprocal: u64,
    /// Shaping: requests (beyond the first) passed without delay; `None` polices.
    shape_free: Option<u64>,
}

impl Meter {
    fn new(capacity: u64, interval: Nanos, shape_free: Option<u64>) -> Result<Self, ParamError> {
        if capacity == 0 {
            return Err(ParamError::Zero { field: "capacity" });
        }
        let Some(tau) = capacity.checked_mul(interval) else {
            return Err(ParamError::TooLarge { field: "capacity" });
        };
        Ok(Self { interval, capacity, tau, reciprocal: u64::MAX / interval, shape_free })
    }

    /// Whole tokens in `room` nanoseconds: `room / interval`, exactly. The estimate from the
    /// reciprocal is never above the quotient and at most two below it (`room < 2^64`).
    #[inline]
    fn tokens(&self, room: Nanos) -> u64 {
        if room < self.interval {
            return 0; // the common denial: less than one token
        }
        let mut q = ((room as u128 * self.reciprocal as u128) >> 64) as u64;
        let mut rest = room - q * self.interval;
        while rest >= self.interval {
            q += 1;
            rest -= self.interval;
        }
        q
    }

    /// All in 64 bits: the backlog `max(tat, now) - now` and the charge `cost * interval` are
    /// both at most what a `tat` can hold, and every sum that could pass the end of u64 time is
    /// checked.
    #[inline]
    fn decide(&self, s: &GcraState, now: Nanos, cost: u64) -> Result<(Decision, GcraState), CostError> {
        check_charge(cost, self.capacity)?;
        let backlog = s.tat.saturating_sub(now);
        let charge = cost * self.interval; // cost <= capacity: at most tau
        // `need` is the new tat minus now. A tat past the end of u64 time cannot be stored, and
        // storing less would charge less: near the end a request is admitted only if its tat
        // still fits (the strict direction), and a denial that could never fit waits forever.
        let end = u64::MAX - now;
        let need = backlog.checked_add(charge).filter(|&n| n <= end);
        let (allowed, held, retry_after) = match need {
            Some(n) if n <= self.tau => (true, n, 0),
            Some(n) => (false, backlog, n - self.tau),
            None => (false, backlog, u64::MAX),
        };
        let delay = match (allowed, self.shape_free) {
            (true, Some(free)) => backlog.saturating_sub(free * self.interval),
            _ => 0,
        };
        // `held` exceeds the room only when denied after the clock stepped back.
        let remaining = self.tokens(self.tau.min(end).saturating_sub(held));
        let d = Decision { allowed, limit: self.capacity, remaining, reset_after: held, retry_after, delay };
        Ok((d, GcraState { tat: now + held }))
    }

    #[inline]
    fn check(&self, s: &mut GcraState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        commit(s, self.decide(s, now, cost))
    }
}

/// Both buckets are the same meter behind the `Algorithm` trait.
macro_rules! gcra_algorithm {
    ($t:ident) => {
        impl Algorithm for $t {
            type State = GcraState;

            fn limit(&self) -> u64 {
                self.meter.capacity
            }

            #[inline]
            fn check(&self, state: &mut GcraState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
                self.meter.check(state, now, cost)
            }

            #[inline]
            fn peek(&self, state: &GcraState, now: Nanos, cost: u64) -> Result<Decision, CostError> {
                self.meter.decide(state, now, cost).map(|(d, _)| d)
            }

            #[inline]
            fn is_fresh(&self, state: &GcraState, now: Nanos) -> bool {
                state.tat <= now
            }

            /// The theoretical arrival time moves back by the cost, never before the charge
            /// (nor, then, before now: every time at or before now decides alike, a full
            /// bucket): the tokens come back, up to the capacity. `now` is not read. Exact when
            /// no request was charged after this one; otherwise it may give back the time the
            /// bucket would have refilled between this charge and the next: the bound still
            /// holds — in any interval of length L, what checks admit minus what is refunded is
            /// at most `capacity + L / interval` (tested in `tests/settle.rs`).
            fn refund(&self, state: &mut GcraState, charged_at: Nanos, cost: u64, _now: Nanos) {
                if state.tat > charged_at {
                    let back = state.tat.saturating_sub(cost.saturating_mul(self.meter.interval));
                    state.tat = back.max(charged_at);
                }
            }

            fn refund_reads_now(&self) -> bool {
                false
            }

            /// The theoretical arrival time moves on by the cost, past `now + capacity ×
            /// interval` if need be, up to a debt of one capacity (`now + 2 × capacity ×
            /// interval`): paid back at the rate, and until then every request is denied.
            /// Checks still admit at most `capacity + L / interval` in any interval of length L.
            fn overrun(&self, state: &mut GcraState, now: Nanos, cost: u64) {
                let m = &self.meter;
                let owed = state.tat.max(now).saturating_add(cost.saturating_mul(m.interval));
                state.tat = state.tat.max(owed.min(now.saturating_add(m.tau.saturating_mul(2))));
            }

            /// `tat = max(tat, at) + cost × interval`.
            fn charge_held(&self, state: &mut GcraState, at: Nanos, cost: u64) {
                state.tat = state.tat.max(at).saturating_add(cost.saturating_mul(self.meter.interval));
            }
        }
    };
}

/// Token bucket: starts full with `capacity` tokens, refills continuously at
/// `refill_per_second`, and admits a request when it holds at least `cost` tokens.
///
/// ```
/// use sluice_core::{Algorithm, TokenBucket, NANOS_PER_SEC};
/// let tb = TokenBucket::new(5, 1.0).unwrap();
/// let mut s = Default::default();
/// for _ in 0..5 { assert!(tb.check(&mut s, 0, 1).unwrap().allowed); }
/// let d = tb.check(&mut s, 0, 1).unwrap();
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after, NANOS_PER_SEC); // one token per second
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    meter: Meter,
}

impl TokenBucket {
    /// A bucket of `capacity` tokens refilled at `refill_per_second`.
    pub fn new(capacity: u64, refill_per_second: f64) -> Result<Self, ParamError> {
        let t = interval("refill_per_second", refill_per_second)?;
        Ok(Self { meter: Meter::new(capacity, t, None)? })
    }

    /// The bucket's capacity in tokens.
    pub fn capacity(&self) -> u64 {
        self.meter.capacity
    }

    /// Nanoseconds per token (1 / refill rate, rounded up).
    pub fn interval(&self) -> Nanos {
        self.meter.interval
    }
}

gcra_algorithm!(TokenBucket);

/// What a leaky bucket does with a request beyond the steady rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeakMode {
    /// Reject what exceeds the burst (nginx `limit_req ... nodelay`).
    Police,
    /// Admit up to the capacity and return a `delay` that paces output at the rate (nginx without
    /// `nodelay`); the first `delay` excess requests pass without waiting (nginx `delay=N`).
    Shape {
        /// Excess requests passed without delay.
        delay: u64,
    },
}

/// Leaky bucket as a GCRA meter: a fresh key admits `capacity` back-to-back requests, then one
/// every `1 / rate_per_second`. nginx `limit_req rate=R burst=B` is
/// `LeakyBucket::new(R, B + 1, mode)`.
///
/// ```
/// use sluice_core::{Algorithm, LeakyBucket, LeakMode, NANOS_PER_SEC};
/// // nginx: rate=2r/s burst=2 (no nodelay): 3 requests at once, paced half a second apart.
/// let lb = LeakyBucket::new(2.0, 3, LeakMode::Shape { delay: 0 }).unwrap();
/// let mut s = Default::default();
/// let delays: Vec<u64> = (0..3).map(|_| lb.check(&mut s, 0, 1).unwrap().delay).collect();
/// assert_eq!(delays, [0, NANOS_PER_SEC / 2, NANOS_PER_SEC]);
/// assert!(!lb.check(&mut s, 0, 1).unwrap().allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    meter: Meter,
}

impl LeakyBucket {
    /// A meter draining at `rate_per_second` that holds `capacity` requests.
    pub fn new(rate_per_second: f64, capacity: u64, mode: LeakMode) -> Result<Self, ParamError> {
        let t = interval("rate_per_second", rate_per_second)?;
        let shape_free = match mode {
            LeakMode::Police => None,
            LeakMode::Shape { delay } if delay >= capacity.max(1) => {
                return Err(ParamError::DelayTooLarge { delay, capacity });
            }
            LeakMode::Shape { delay } => Some(delay),
        };
        Ok(Self { meter: Meter::new(capacity, t, shape_free)? })
    }

    /// The meter's capacity (nginx `burst + 1`).
    pub fn capacity(&self) -> u64 {
        self.meter.capacity
    }

    /// Nanoseconds between two requests at the steady rate (rounded up).
    pub fn interval(&self) -> Nanos {
        self.meter.interval
    }

    /// Police or shape.
    pub fn mode(&self) -> LeakMode {
        match self.meter.shape_free {
            None => LeakMode::Police,
            Some(delay) => LeakMode::Shape { delay },
        }
    }
}

gcra_algorithm!(LeakyBucket);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::sat;
    use proptest::prelude::*;

    /// The meter's first form, in 128-bit arithmetic: the 64-bit one must decide as it did.
    fn reference(m: &Meter, s: &GcraState, now: Nanos, cost: u64) -> Decision {
        let t = m.interval as u128;
        let tau = m.capacity as u128 * t;
        let end = u64::MAX as u128;
        let now = now as u128;
        let start = (s.tat as u128).max(now);
        let new_tat = start + cost as u128 * t;
        let span = tau.min(end - now);
        let allowed = new_tat - now <= span;
        let held = if allowed { new_tat - now } else { start - now };
        let delay = match (allowed, m.shape_free) {
            (true, Some(free)) => sat((start - now).saturating_sub(free as u128 * t)),
            _ => 0,
        };
        let retry_after = if allowed {
            0
        } else if new_tat > end {
            u64::MAX
        } else {
            sat(new_tat - now - tau)
        };
        let remaining = sat(span.saturating_sub(held) / t);
        Decision { allowed, limit: m.capacity, remaining, reset_after: sat(held), retry_after, delay }
    }

    /// Times near zero, near the end of u64 time, and anywhere.
    fn time() -> impl Strategy<Value = Nanos> {
        prop_oneof![0..10_000u64, (u64::MAX - 10_000)..=u64::MAX, any::<u64>()]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::fuzz_cases(20_000)))]

        #[test]
        fn decides_as_the_128_bit_meter(
            interval in prop_oneof![1..4u64, 1..2_000_000_000u64, any::<u64>()],
            capacity in prop_oneof![1..5u64, 1..100_000u64],
            free in proptest::option::of(0..5u64),
            tat in time(),
            now in time(),
            cost in 0..6u64,
        ) {
            let Some(tau) = capacity.checked_mul(interval) else { return Ok(()) };
            let shape_free = free.filter(|&f| f < capacity);
            let m = Meter { interval, capacity, tau, reciprocal: u64::MAX / interval, shape_free };
            let s = GcraState { tat };
            match m.decide(&s, now, cost) {
                Err(_) => prop_assert!(cost > capacity),
                Ok((d, next)) => {
                    prop_assert_eq!(d, reference(&m, &s, now, cost));
                    if d.allowed {
                        prop_assert_eq!(next.tat, now + d.reset_after);
                    }
                }
            }
        }

        #[test]
        fn tokens_is_the_exact_quotient(interval in prop_oneof![1..10u64, any::<u64>()], room in any::<u64>()) {
            let interval = interval.max(1);
            let m = Meter { interval, capacity: 1, tau: interval, reciprocal: u64::MAX / interval, shape_free: None };
            prop_assert_eq!(m.tokens(room), room / interval);
        }
    }
}
