//! Leaky bucket (GCRA meter), hand-computed: police and shape, `delay` pacing, the nginx mapping.

mod common;

use common::verified_check;
use sluice_core::{
    Algorithm, CostError, Decision, GcraState, LeakMode, LeakyBucket, NANOS_PER_MILLI, NANOS_PER_SEC, ParamError,
    TokenBucket,
};

const S: u64 = NANOS_PER_SEC;
const MS: u64 = NANOS_PER_MILLI;

fn shape(delay: u64) -> LeakMode {
    LeakMode::Shape { delay }
}

/// The `delay` of each of `n` requests of cost 1 sent at once to a fresh key (`None`: denied).
fn burst_delays(lb: &LeakyBucket, n: usize) -> Vec<Option<u64>> {
    let mut s = GcraState::default();
    (0..n)
        .map(|_| {
            let d = verified_check(lb, &mut s, 7 * S, 1);
            d.allowed.then_some(d.delay)
        })
        .collect()
}

#[test]
fn police_admits_the_capacity_back_to_back_then_one_per_interval() {
    let lb = LeakyBucket::new(2.0, 3, LeakMode::Police).unwrap(); // 500 ms per request
    let mut s = GcraState::default();
    let expect =
        |remaining, reset_after| Decision { allowed: true, limit: 3, remaining, reset_after, retry_after: 0, delay: 0 };
    assert_eq!(verified_check(&lb, &mut s, 0, 1), expect(2, 500 * MS));
    assert_eq!(verified_check(&lb, &mut s, 0, 1), expect(1, 1000 * MS));
    assert_eq!(verified_check(&lb, &mut s, 0, 1), expect(0, 1500 * MS));
    let d = verified_check(&lb, &mut s, 0, 1);
    assert_eq!((d.allowed, d.retry_after, d.delay), (false, 500 * MS, 0));
    assert_eq!(verified_check(&lb, &mut s, 500 * MS, 1), expect(0, 1500 * MS));
}

#[test]
fn shape_admits_the_same_requests_and_delays_them_to_the_rate() {
    let lb = LeakyBucket::new(2.0, 3, shape(0)).unwrap();
    let mut s = GcraState::default();
    let delays: Vec<u64> = (0..3).map(|_| verified_check(&lb, &mut s, 0, 1).delay).collect();
    assert_eq!(delays, [0, 500 * MS, 1000 * MS]);
    let d = verified_check(&lb, &mut s, 0, 1);
    assert_eq!((d.allowed, d.retry_after, d.delay), (false, 500 * MS, 0));
    // At 500 ms one slot has drained; the request leaves after the one due at 1 s: at 1.5 s.
    let d = verified_check(&lb, &mut s, 500 * MS, 1);
    assert_eq!((d.allowed, d.delay, d.remaining), (true, 1000 * MS, 0));
}

#[test]
fn shaped_output_leaves_exactly_one_interval_apart() {
    // nginx rate=4r/s burst=3: arrivals at 0, 10, 20, ..., 90 ms, a new one each 10 ms.
    let lb = LeakyBucket::new(4.0, 4, shape(0)).unwrap();
    let mut s = GcraState::default();
    let mut departures = Vec::new();
    for i in 0..10 {
        let now = i * 10 * MS;
        let d = verified_check(&lb, &mut s, now, 1);
        if d.allowed {
            departures.push(now + d.delay);
        }
    }
    assert_eq!(departures, [0, 250 * MS, 500 * MS, 750 * MS]);
}

#[test]
fn requests_arriving_at_the_rate_are_never_delayed() {
    let lb = LeakyBucket::new(2.0, 3, shape(0)).unwrap();
    let mut s = GcraState::default();
    for i in 0..20 {
        let d = verified_check(&lb, &mut s, i * 500 * MS, 1);
        assert_eq!((d.allowed, d.delay), (true, 0), "request {i}");
    }
}

#[test]
fn nginx_limit_req_maps_to_capacity_burst_plus_one() {
    // limit_req zone=... rate=10r/s burst=5 -> LeakyBucket::new(10.0, 6, mode).
    let ms = |v: u64| Some(v * MS);
    // nodelay: six at once, no delay, the seventh refused.
    let nodelay = LeakyBucket::new(10.0, 6, LeakMode::Police).unwrap();
    assert_eq!(burst_delays(&nodelay, 7), [ms(0), ms(0), ms(0), ms(0), ms(0), ms(0), None]);
    // no nodelay: every excess request waits one more interval.
    let paced = LeakyBucket::new(10.0, 6, shape(0)).unwrap();
    assert_eq!(burst_delays(&paced, 7), [ms(0), ms(100), ms(200), ms(300), ms(400), ms(500), None]);
    // delay=2: the first two excess requests pass at once, the rest are paced from there.
    let two = LeakyBucket::new(10.0, 6, shape(2)).unwrap();
    assert_eq!(burst_delays(&two, 7), [ms(0), ms(0), ms(0), ms(100), ms(200), ms(300), None]);
    // delay=burst is nodelay.
    let all = LeakyBucket::new(10.0, 6, shape(5)).unwrap();
    assert_eq!(burst_delays(&all, 7), burst_delays(&nodelay, 7));
    assert_eq!(two.mode(), shape(2));
    assert_eq!(nodelay.mode(), LeakMode::Police);
    assert_eq!((two.capacity(), two.interval()), (6, 100 * MS));
}

#[test]
fn shape_with_cost_above_one_paces_by_the_cost() {
    let lb = LeakyBucket::new(1.0, 5, shape(0)).unwrap();
    let mut s = GcraState::default();
    assert_eq!(verified_check(&lb, &mut s, 0, 2).delay, 0);
    assert_eq!(verified_check(&lb, &mut s, 0, 2).delay, 2 * S);
    let d = verified_check(&lb, &mut s, 0, 2);
    assert_eq!((d.allowed, d.retry_after, d.remaining), (false, S, 1));
    assert_eq!(verified_check(&lb, &mut s, 0, 1).delay, 4 * S);
}

#[test]
fn token_bucket_equals_leaky_police_with_the_same_parameters() {
    let tb = TokenBucket::new(4, 2.5).unwrap();
    let lb = LeakyBucket::new(2.5, 4, LeakMode::Police).unwrap();
    let (mut a, mut b) = (GcraState::default(), GcraState::default());
    let mut now = 0;
    for i in 0..500u64 {
        now += (i * 104_729) % 700_000_000;
        let cost = i % 5;
        assert_eq!(verified_check(&tb, &mut a, now, cost), verified_check(&lb, &mut b, now, cost), "request {i}");
        assert_eq!(a, b);
    }
}

#[test]
fn a_cost_above_the_capacity_is_an_error_not_a_denial() {
    let lb = LeakyBucket::new(1.0, 3, shape(1)).unwrap();
    let mut s = GcraState::default();
    assert_eq!(lb.check(&mut s, 0, 4), Err(CostError { cost: 4, capacity: 3 }));
    assert_eq!(lb.peek(&s, 0, 4), Err(CostError { cost: 4, capacity: 3 }));
    assert_eq!(s, GcraState::default());
    // Cost 0 probes without charging.
    let d = verified_check(&lb, &mut s, S, 0);
    assert_eq!((d.allowed, d.remaining, d.reset_after, d.delay), (true, 3, 0, 0));
    assert!(lb.is_fresh(&s, S));
}

#[test]
fn time_standing_still_and_the_end_of_time() {
    let lb = LeakyBucket::new(1.0, 3, shape(0)).unwrap();
    let mut s = GcraState::default();
    let n = (0..10).filter(|_| verified_check(&lb, &mut s, 4 * S, 1).allowed).count();
    assert_eq!(n, 3);
    let n = (0..10).filter(|_| verified_check(&lb, &mut s, u64::MAX / 2, 1).allowed).count();
    assert_eq!(n, 3);
    let n = (0..10).filter(|_| verified_check(&lb, &mut s, u64::MAX - 10 * S, 1).allowed).count();
    assert_eq!(n, 3);
    let n = (0..10).filter(|_| verified_check(&lb, &mut s, u64::MAX, 1).allowed).count();
    assert_eq!(n, 0, "no refill time past the end of u64 time can be recorded");
}

#[test]
fn bad_parameters_are_refused() {
    assert_eq!(LeakyBucket::new(1.0, 6, shape(6)), Err(ParamError::DelayTooLarge { delay: 6, capacity: 6 }));
    assert_eq!(LeakyBucket::new(1.0, 0, shape(0)), Err(ParamError::Zero { field: "capacity" }));
    assert_eq!(LeakyBucket::new(1.0, 0, LeakMode::Police), Err(ParamError::Zero { field: "capacity" }));
    assert!(matches!(
        LeakyBucket::new(-2.0, 3, LeakMode::Police),
        Err(ParamError::BadRate { field: "rate_per_second", .. })
    ));
    assert_eq!(LeakyBucket::new(1e-12, 3, LeakMode::Police), Err(ParamError::TooLarge { field: "rate_per_second" }));
}
