//! Invariants over random arrival sequences: sorted times (often several at the same instant,
//! often near a window boundary), costs from 0 to the limit.
//!
//! Every decision in every sequence also goes through `verified_check`, so `retry_after`
//! (admitted at now + retry_after, not one nanosecond earlier), `remaining`, `reset_after`,
//! `peek` and "a denial charges nothing" are checked on each step of each case.

mod common;

use common::verified_check;
use proptest::collection::vec;
use proptest::prelude::*;
use sluice_core::{
    Algorithm, Decision, FixedWindow, GcraState, LeakMode, LeakyBucket, NANOS_PER_SEC, Nanos, Policy, SlidingLog,
    SlidingWindow, TokenBucket,
};

/// One generated scenario: a limit, a window, a bucket interval and the arrivals.
#[derive(Debug, Clone)]
struct Case {
    limit: u64,
    window: Nanos,
    /// Nanoseconds per token for the buckets, on the same scale as `window / limit`.
    interval: Nanos,
    /// (time, cost), times non-decreasing.
    arrivals: Vec<(Nanos, u64)>,
}

impl Case {
    fn fixed_window(&self) -> FixedWindow {
        FixedWindow::new(self.limit, self.window).unwrap()
    }
    fn sliding_log(&self) -> SlidingLog {
        SlidingLog::new(self.limit, self.window).unwrap()
    }
    fn sliding_window(&self) -> SlidingWindow {
        SlidingWindow::new(self.limit, self.window).unwrap()
    }
    fn rate(&self) -> f64 {
        NANOS_PER_SEC as f64 / self.interval as f64
    }
    fn token_bucket(&self) -> TokenBucket {
        TokenBucket::new(self.limit, self.rate()).unwrap()
    }
    fn leaky_bucket(&self, mode: LeakMode) -> LeakyBucket {
        LeakyBucket::new(self.rate(), self.limit, mode).unwrap()
    }
}

/// Turns random seeds into a scenario; with `near_end` the last arrival lands close to `u64::MAX`.
fn case(near_end: bool) -> impl Strategy<Value = Case> {
    let window = prop_oneof![1..=200u64, 1..=20 * NANOS_PER_SEC];
    (1..=8u64, window, any::<u64>(), 0..1_000u64, vec(any::<(u64, u64)>(), 1..120)).prop_map(
        move |(limit, window, interval_seed, offset, seeds)| {
            let interval = 1 + interval_seed % (2 * window / limit).max(1);
            let span = 2 * window.max(interval * limit);
            let gaps: Vec<(Nanos, u64)> = seeds
                .iter()
                .map(|&(g, c)| {
                    let gap = match g % 4 {
                        0 => 0,                     // several requests at one instant
                        1 => (g >> 2) % 3,          // a nanosecond or two apart
                        _ => (g >> 2) % (span + 1), // anywhere up to two periods on
                    };
                    (gap, c % (limit + 1))
                })
                .collect();
            let total: u64 = gaps.iter().fold(0, |a, &(g, _)| a.saturating_add(g));
            let mut t = if near_end { u64::MAX - total.saturating_add(offset) } else { offset };
            let arrivals = gaps
                .into_iter()
                .map(|(gap, cost)| {
                    t = t.saturating_add(gap);
                    (t, cost)
                })
                .collect();
            Case { limit, window, interval, arrivals }
        },
    )
}

/// Runs the arrivals through `alg`, verifying every decision; returns each decision.
fn run<A: Algorithm>(alg: &A, arrivals: &[(Nanos, u64)]) -> Vec<Decision> {
    let fresh = A::State::default();
    let mut s = A::State::default();
    arrivals
        .iter()
        .map(|&(t, cost)| {
            if alg.is_fresh(&s, t) {
                assert_decides_as_fresh(alg, &s, &fresh, t);
            }
            verified_check(alg, &mut s, t, cost)
        })
        .collect()
}

/// A state reported fresh at `t` decides every request at `t` and later as a new key would.
fn assert_decides_as_fresh<A: Algorithm>(alg: &A, s: &A::State, fresh: &A::State, t: Nanos) {
    for off in [0, 1, 7, 1_000, NANOS_PER_SEC, 30 * NANOS_PER_SEC] {
        let Some(at) = t.checked_add(off) else { continue };
        for cost in 0..=alg.limit() {
            assert_eq!(alg.peek(s, at, cost), alg.peek(fresh, at, cost), "fresh at {t}, differs at {at}");
        }
    }
}

/// The admitted (time, cost) pairs.
fn admitted(arrivals: &[(Nanos, u64)], decisions: &[Decision]) -> Vec<(Nanos, u64)> {
    arrivals.iter().zip(decisions).filter(|(_, d)| d.allowed).map(|(&a, _)| a).collect()
}

/// The most units admitted in any half-open interval [s, s + len).
fn max_in_any_interval(adm: &[(Nanos, u64)], len: u128) -> u64 {
    (0..adm.len())
        .map(|i| {
            let end = adm[i].0 as u128 + len;
            adm[i..].iter().take_while(|(t, _)| (*t as u128) < end).map(|(_, c)| c).sum()
        })
        .max()
        .unwrap_or(0)
}

/// The most units admitted in one aligned window [k * len, (k + 1) * len).
fn max_in_aligned_window(adm: &[(Nanos, u64)], len: Nanos) -> u64 {
    let mut best = 0;
    let mut i = 0;
    while i < adm.len() {
        let k = adm[i].0 / len;
        let units = adm[i..].iter().take_while(|(t, _)| t / len == k).map(|(_, c)| c).sum();
        best = best.max(units);
        i += adm[i..].iter().take_while(|(t, _)| t / len == k).count();
    }
    best
}

/// Checks units admitted in every [t1, t2] against capacity + floor((t2 - t1) / interval).
fn assert_bucket_bound(adm: &[(Nanos, u64)], capacity: u64, interval: Nanos) {
    for i in 0..adm.len() {
        if i > 0 && adm[i - 1].0 == adm[i].0 {
            continue; // [t1, ...] starts with the first request at t1
        }
        let mut units = 0;
        for j in i..adm.len() {
            units += adm[j].1;
            if j + 1 < adm.len() && adm[j + 1].0 == adm[j].0 {
                continue; // [..., t2] ends with the last request at t2
            }
            let (t1, t2) = (adm[i].0, adm[j].0);
            let bound = capacity + (t2 - t1) / interval;
            assert!(units <= bound, "{units} units admitted in [{t1}, {t2}], bound {bound}");
        }
    }
}

/// `Policy` gives the same answers as the algorithm it wraps.
fn assert_policy_matches<A: Algorithm + Into<Policy> + Copy>(alg: A, arrivals: &[(Nanos, u64)]) {
    let p: Policy = alg.into();
    assert_eq!(p.limit(), alg.limit());
    let mut ps = p.fresh_state();
    let mut s = A::State::default();
    for &(t, cost) in arrivals {
        assert_eq!(p.peek(&ps, t, cost), alg.peek(&s, t, cost));
        assert_eq!(p.check(&mut ps, t, cost), alg.check(&mut s, t, cost));
        assert_eq!(p.check(&mut ps, t, alg.limit() + 1), alg.check(&mut s, t, alg.limit() + 1));
        assert_eq!(p.is_fresh(&ps, t), alg.is_fresh(&s, t));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sliding_log_never_admits_more_than_limit_in_any_window(c in case(false)) {
        let adm = admitted(&c.arrivals, &run(&c.sliding_log(), &c.arrivals));
        prop_assert!(max_in_any_interval(&adm, c.window as u128) <= c.limit);
    }

    #[test]
    fn fixed_window_admits_limit_per_aligned_window_and_at_most_twice_that_in_any_window(c in case(false)) {
        let adm = admitted(&c.arrivals, &run(&c.fixed_window(), &c.arrivals));
        prop_assert!(max_in_aligned_window(&adm, c.window) <= c.limit);
        prop_assert!(max_in_any_interval(&adm, c.window as u128) <= 2 * c.limit);
    }

    #[test]
    fn sliding_window_never_admits_more_than_limit_in_one_aligned_window(c in case(false)) {
        let adm = admitted(&c.arrivals, &run(&c.sliding_window(), &c.arrivals));
        prop_assert!(max_in_aligned_window(&adm, c.window) <= c.limit);
    }

    #[test]
    fn token_bucket_admits_at_most_capacity_plus_rate_times_elapsed(c in case(false)) {
        let tb = c.token_bucket();
        prop_assert!(tb.interval() >= c.interval, "the interval is rounded up, never down");
        let adm = admitted(&c.arrivals, &run(&tb, &c.arrivals));
        assert_bucket_bound(&adm, c.limit, tb.interval());
    }

    #[test]
    fn leaky_bucket_police_admits_at_most_capacity_plus_rate_times_elapsed(c in case(false)) {
        let lb = c.leaky_bucket(LeakMode::Police);
        let adm = admitted(&c.arrivals, &run(&lb, &c.arrivals));
        assert_bucket_bound(&adm, c.limit, lb.interval());
    }

    #[test]
    fn token_bucket_and_leaky_police_decide_alike(c in case(false)) {
        let (tb, lb) = (c.token_bucket(), c.leaky_bucket(LeakMode::Police));
        prop_assert_eq!(run(&tb, &c.arrivals), run(&lb, &c.arrivals));
    }

    #[test]
    fn shaping_admits_what_policing_admits_and_paces_departures(c in case(false), free_seed in any::<u64>()) {
        let free = free_seed % c.limit;
        let police = run(&c.leaky_bucket(LeakMode::Police), &c.arrivals);
        let shaper = c.leaky_bucket(LeakMode::Shape { delay: free });
        let shaped = run(&shaper, &c.arrivals);
        let t = shaper.interval();
        let mut last: Option<(Nanos, u64)> = None; // (departure, cost) of the previous admitted request
        for ((&(now, cost), p), s) in c.arrivals.iter().zip(&police).zip(&shaped) {
            prop_assert_eq!(Decision { delay: 0, ..*s }, *p);
            if !s.allowed || cost == 0 {
                continue;
            }
            let departure = now as u128 + s.delay as u128;
            if free == 0 {
                // Without free slots, output leaves no faster than the rate.
                if let Some((prev, prev_cost)) = last {
                    prop_assert!(departure >= prev as u128 + prev_cost as u128 * t as u128);
                }
            }
            // Admitted means start + cost * t - now <= limit * t, and `free` slots pass undelayed.
            prop_assert!(s.delay <= (c.limit - cost).saturating_sub(free) * t);
            last = Some((departure as Nanos, cost));
        }
    }

    #[test]
    fn policy_dispatch_equals_the_direct_algorithm(c in case(false)) {
        assert_policy_matches(c.fixed_window(), &c.arrivals);
        assert_policy_matches(c.sliding_log(), &c.arrivals);
        assert_policy_matches(c.sliding_window(), &c.arrivals);
        assert_policy_matches(c.token_bucket(), &c.arrivals);
        assert_policy_matches(c.leaky_bucket(LeakMode::Shape { delay: 0 }), &c.arrivals);
    }

    #[test]
    fn every_algorithm_stays_exact_and_bounded_near_the_end_of_time(c in case(true)) {
        // `run` verifies each decision (retry_after, remaining, reset_after, peek) without panicking.
        let adm = admitted(&c.arrivals, &run(&c.sliding_log(), &c.arrivals));
        prop_assert!(max_in_any_interval(&adm, c.window as u128) <= c.limit);
        let adm = admitted(&c.arrivals, &run(&c.fixed_window(), &c.arrivals));
        prop_assert!(max_in_aligned_window(&adm, c.window) <= c.limit);
        let adm = admitted(&c.arrivals, &run(&c.sliding_window(), &c.arrivals));
        prop_assert!(max_in_aligned_window(&adm, c.window) <= c.limit);
        let tb = c.token_bucket();
        assert_bucket_bound(&admitted(&c.arrivals, &run(&tb, &c.arrivals)), c.limit, tb.interval());
        let lb = c.leaky_bucket(LeakMode::Shape { delay: 0 });
        assert_bucket_bound(&admitted(&c.arrivals, &run(&lb, &c.arrivals)), c.limit, lb.interval());
    }
}

#[test]
fn fixed_window_lets_twice_the_limit_through_at_a_boundary() {
    let fw = FixedWindow::new(5, 10 * NANOS_PER_SEC).unwrap();
    let mut s = Default::default();
    let edge = 10 * NANOS_PER_SEC;
    let arrivals: Vec<(Nanos, u64)> = (0..6).map(|_| (edge - 1, 1)).chain((0..6).map(|_| (edge, 1))).collect();
    let decisions: Vec<Decision> = arrivals.iter().map(|&(t, c)| verified_check(&fw, &mut s, t, c)).collect();
    let adm = admitted(&arrivals, &decisions);
    // Five just before the edge, five on it: ten within two nanoseconds.
    assert_eq!(adm.len(), 10);
    assert_eq!(max_in_any_interval(&adm, 2), 10);
    assert_eq!(max_in_aligned_window(&adm, 10 * NANOS_PER_SEC), 5);
    // The exact algorithms hold the line on the same traffic.
    let log = SlidingLog::new(5, 10 * NANOS_PER_SEC).unwrap();
    let mut ls = Default::default();
    let n = arrivals.iter().filter(|&&(t, c)| verified_check(&log, &mut ls, t, c).allowed).count();
    assert_eq!(n, 5);
    let tb = TokenBucket::new(5, 0.5).unwrap();
    let mut ts = GcraState::default();
    let n = arrivals.iter().filter(|&&(t, c)| verified_check(&tb, &mut ts, t, c).allowed).count();
    assert_eq!(n, 5);
}
