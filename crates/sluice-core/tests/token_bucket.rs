//! Token bucket, hand-computed: capacity 5, one token per second unless said otherwise.

mod common;

use common::{fill, verified_check};
use sluice_core::{Algorithm, CostError, Decision, GcraState, NANOS_PER_SEC, ParamError, TokenBucket};

const S: u64 = NANOS_PER_SEC;

fn tb(capacity: u64) -> TokenBucket {
    TokenBucket::new(capacity, 1.0).unwrap()
}

fn admitted(limit: u64, remaining: u64, reset_after: u64) -> Decision {
    Decision { allowed: true, limit, remaining, reset_after, retry_after: 0, delay: 0 }
}

fn denied(limit: u64, remaining: u64, reset_after: u64, retry_after: u64) -> Decision {
    Decision { allowed: false, limit, remaining, reset_after, retry_after, delay: 0 }
}

#[test]
fn a_fresh_bucket_is_full_and_drains_one_token_per_request() {
    let tb = tb(5);
    let mut s = GcraState::default();
    let t0 = 100 * S;
    for (i, left) in [4, 3, 2, 1, 0].into_iter().enumerate() {
        let refill = (i as u64 + 1) * S; // time until the bucket is full again
        assert_eq!(verified_check(&tb, &mut s, t0, 1), admitted(5, left, refill));
    }
    assert_eq!(verified_check(&tb, &mut s, t0, 1), denied(5, 0, 5 * S, S));
    assert_eq!(verified_check(&tb, &mut s, t0 + S - 1, 1), denied(5, 0, 4 * S + 1, 1));
    assert_eq!(verified_check(&tb, &mut s, t0 + S, 1), admitted(5, 0, 5 * S));
    assert!(!tb.is_fresh(&s, t0 + 6 * S - 1));
    assert!(tb.is_fresh(&s, t0 + 6 * S));
}

#[test]
fn tokens_refill_continuously() {
    let tb = tb(5);
    let mut s = GcraState::default();
    fill(&tb, &mut s, 0, 5, 1);
    // 2.5 s later: 2.5 tokens. One is taken, 1.5 stay: one more request of cost 1 fits.
    let t = 2_500_000_000;
    assert_eq!(verified_check(&tb, &mut s, t, 1), admitted(5, 1, 3_500_000_000));
    // Cost 2 needs half a second more.
    assert_eq!(verified_check(&tb, &mut s, t, 2), denied(5, 1, 3_500_000_000, 500_000_000));
    assert_eq!(verified_check(&tb, &mut s, 3 * S, 2), admitted(5, 0, 5 * S));
}

#[test]
fn a_cost_above_the_capacity_is_an_error_not_a_denial() {
    let tb = tb(5);
    let mut s = GcraState::default();
    assert_eq!(tb.check(&mut s, S, 6), Err(CostError { cost: 6, capacity: 5 }));
    assert_eq!(tb.peek(&s, S, 6), Err(CostError { cost: 6, capacity: 5 }));
    assert_eq!(s, GcraState::default());
    assert_eq!(verified_check(&tb, &mut s, S, 5), admitted(5, 0, 5 * S));
}

#[test]
fn cost_zero_is_admitted_and_charges_nothing() {
    let tb = tb(5);
    let mut s = GcraState::default();
    assert_eq!(verified_check(&tb, &mut s, S, 0), admitted(5, 5, 0));
    assert!(tb.is_fresh(&s, S));
    fill(&tb, &mut s, S, 5, 1);
    assert_eq!(verified_check(&tb, &mut s, 2 * S, 0), admitted(5, 1, 4 * S));
    assert_eq!(verified_check(&tb, &mut s, 2 * S, 2), denied(5, 1, 4 * S, S));
}

#[test]
fn time_standing_still_admits_exactly_the_capacity() {
    let tb = tb(7);
    let mut s = GcraState::default();
    let admitted = (0..30).filter(|_| verified_check(&tb, &mut s, 9 * S, 1).allowed).count();
    assert_eq!(admitted, 7);
}

#[test]
fn a_rounded_interval_never_admits_more_than_the_rate() {
    // 3 per second: 333_333_333.3 ns per token, rounded up to 333_333_334.
    let tb = TokenBucket::new(10, 3.0).unwrap();
    assert_eq!(tb.interval(), 333_333_334);
    let mut s = GcraState::default();
    fill(&tb, &mut s, 0, 10, 1);
    assert_eq!(verified_check(&tb, &mut s, 0, 1).retry_after, 333_333_334);
    // After exactly 3 s, 8.99999997 tokens: 8 requests, not 9. The ninth token lands 6 ns later.
    let at_3s = (0..20).filter(|_| verified_check(&tb, &mut s, 3 * S, 1).allowed).count();
    assert_eq!(at_3s, 8);
    assert_eq!(tb.peek(&s, 3 * S, 1).unwrap().retry_after, 6);
    // Faster than one token per nanosecond is capped at one per nanosecond.
    assert_eq!(TokenBucket::new(1, 1e12).unwrap().interval(), 1);
}

#[test]
fn huge_gaps_refill_to_capacity_and_no_more() {
    let tb = tb(5);
    let mut s = GcraState::default();
    fill(&tb, &mut s, S, 1, 5);
    let later = u64::MAX / 2;
    let n = (0..20).filter(|_| verified_check(&tb, &mut s, later, 1).allowed).count();
    assert_eq!(n, 5);
}

#[test]
fn the_end_of_time_never_admits_more_than_the_bucket_holds() {
    let tb = tb(3);
    let mut s = GcraState::default();
    // Five seconds before the end of u64 time the bucket behaves normally.
    let t = u64::MAX - 5 * S;
    assert_eq!(verified_check(&tb, &mut s, t, 1), admitted(3, 2, S));
    fill(&tb, &mut s, t, 1, 2);
    assert_eq!(verified_check(&tb, &mut s, t, 1), denied(3, 0, 3 * S, S));
    // A request whose refill time would pass the end of u64 time cannot be charged: it is
    // refused (the strict direction) and never admitted later.
    let mut s = GcraState::default();
    let decisions: Vec<Decision> = (0..10).map(|_| verified_check(&tb, &mut s, u64::MAX - 1, 1)).collect();
    assert!(decisions.iter().all(|d| *d == denied(3, 0, 0, u64::MAX)), "{decisions:?}");
    // Up to the end exactly: a refill time of u64::MAX still fits.
    let mut s = GcraState::default();
    assert_eq!(verified_check(&tb, &mut s, u64::MAX - S, 1), admitted(3, 0, S));
    assert_eq!(verified_check(&tb, &mut s, u64::MAX - S, 1), denied(3, 0, S, u64::MAX));
}

#[test]
fn retry_after_is_exact_to_the_nanosecond() {
    let tb = TokenBucket::new(4, 7.0).unwrap(); // 142_857_143 ns per token
    let mut s = GcraState::default();
    fill(&tb, &mut s, 1_000, 1, 4);
    let d = tb.peek(&s, 50_000_000, 3).unwrap();
    assert_eq!(d.retry_after, 1_000 + 3 * 142_857_143 - 50_000_000);
    assert!(!tb.peek(&s, 50_000_000 + d.retry_after - 1, 3).unwrap().allowed);
    assert!(tb.peek(&s, 50_000_000 + d.retry_after, 3).unwrap().allowed);
}

#[test]
fn peek_reports_without_charging() {
    let tb = tb(2);
    let s = GcraState::default();
    for _ in 0..5 {
        assert_eq!(tb.peek(&s, S, 1).unwrap(), admitted(2, 1, S));
    }
    assert_eq!(s, GcraState::default());
}

#[test]
fn a_clock_that_stepped_back_is_denied_without_panicking() {
    let tb = tb(1);
    let mut s = GcraState::default();
    fill(&tb, &mut s, 10 * S, 1, 1); // full again at 11 s
    // At 5 s the bucket reads as 6 s short of full, more than its capacity: denied, nothing left.
    assert_eq!(verified_check(&tb, &mut s, 5 * S, 1), denied(1, 0, 6 * S, 6 * S));
    assert_eq!(verified_check(&tb, &mut s, 5 * S, 0), denied(1, 0, 6 * S, 5 * S));
    assert_eq!(verified_check(&tb, &mut s, 11 * S, 1), admitted(1, 0, S));
}

#[test]
fn bad_parameters_are_refused() {
    assert_eq!(TokenBucket::new(0, 1.0), Err(ParamError::Zero { field: "capacity" }));
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(TokenBucket::new(1, rate), Err(ParamError::BadRate { field: "refill_per_second", .. })));
    }
    assert_eq!(TokenBucket::new(1, 1e-12), Err(ParamError::TooLarge { field: "refill_per_second" }));
    assert_eq!(TokenBucket::new(u64::MAX, 1.0), Err(ParamError::TooLarge { field: "capacity" }));
    let tb = TokenBucket::new(5, 2.0).unwrap();
    assert_eq!((tb.capacity(), tb.interval(), tb.limit()), (5, S / 2, 5));
}
