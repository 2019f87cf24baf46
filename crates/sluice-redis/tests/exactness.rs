//! Generated policies and traffic, decided by Redis and by the core's reference: equal to the
//! nanosecond, every field, including the sliding window's `retry_after` (not rounded), and
//! including parameters large enough that the script's products pass 2^53 (long multiplication).

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sluice_core::{
    FixedWindow, LeakMode, LeakyBucket, NANOS_PER_SEC, Nanos, Policy, SlidingLog, SlidingWindow, TokenBucket,
};
use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::conformance::{Reference, T0, key};
use sluice_store::{Check, NamedPolicy, Store};
use support::RedisServer;

const US: Nanos = 1_000;

/// A policy whose window or interval is a whole number of microseconds.
fn policy() -> impl Strategy<Value = Policy> {
    // Windows from 1 ms to 30 days, in microseconds; limits up to a million.
    let window = prop_oneof![1_000u64..2_000_000, 1_000_000u64..2_592_000_000_000];
    let limit = prop_oneof![1u64..20, 1u64..1_000_000];
    // Rates whose interval is whole microseconds: 1e6 / d per second, d in microseconds.
    let interval_us = prop_oneof![1u64..100, 1u64..10_000_000];
    prop_oneof![
        (limit.clone(), window.clone()).prop_map(|(l, w)| FixedWindow::new(l, w * US).unwrap().into()),
        (1u64..200, window.clone()).prop_map(|(l, w)| SlidingLog::new(l, w * US).unwrap().into()),
        (limit.clone(), window).prop_map(|(l, w)| SlidingWindow::new(l, w * US).unwrap().into()),
        (limit.clone(), interval_us.clone())
            .prop_filter("span within bounds", |(c, i)| c * i < 1 << 50)
            .prop_map(|(c, i)| TokenBucket::new(c, 1e6 / i as f64).unwrap())
            .prop_filter("a whole-microsecond interval", |tb| tb.interval() % US == 0)
            .prop_map(Policy::from),
        (2u64..50, interval_us, 0u64..3)
            .prop_map(|(c, i, mode)| {
                let mode = match mode {
                    0 => LeakMode::Police,
                    1 => LeakMode::Shape { delay: 0 },
                    _ => LeakMode::Shape { delay: c / 2 },
                };
                LeakyBucket::new(1e6 / i as f64, c, mode).unwrap()
            })
            .prop_filter("a whole-microsecond interval", |lb| lb.interval() % US == 0)
            .prop_map(Policy::from),
    ]
}

/// Steps in microseconds scaled to the policy's window, keys 0..3, costs up to the limit.
fn traffic(p: &Policy) -> impl Strategy<Value = Vec<(u64, u8, u64)>> + use<> {
    let window_us = (p.window() / US).max(1);
    let limit = p.limit();
    let step = prop_oneof![Just(0u64), 0..1_000u64, 0..window_us / 3 + 1, 0..2 * window_us + 1];
    let cost = prop_oneof![4 => Just(1u64), 1 => 1..=limit];
    proptest::collection::vec((step, 0u8..3, cost), 1..60)
}

#[test]
fn redis_equals_the_core_for_generated_policies_and_traffic() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let n = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config { cases: 96, failure_persistence: None, ..Config::default() });
    let case = policy().prop_flat_map(|p| (Just(p), traffic(&p)));
    let result = runner.run(&case, |(policy, steps)| {
        let named = NamedPolicy { name: "p".into(), policy };
        let mut options = RedisOptions::single(server.url(), OnError::FailClosed);
        options.key_prefix = format!("exact{}", n.fetch_add(1, Ordering::Relaxed));
        options.deny_cache_entries = 0;
        options.on_error = OnError::FailClosed;
        options.timeout = Duration::from_secs(5);
        let store = RedisStore::new(vec![named.clone()], options).expect("valid store");
        let mut reference = Reference::new(&[named]);
        let mut now = T0;
        runtime.block_on(async {
            for (step, k, cost) in steps {
                now += step * US;
                let checks = [Check { policy: 0, key: key(k), cost }];
                let want = reference.decide(&checks, now).expect("reference decides");
                let got = store.decide(&checks, Some(now)).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(&got, &want, "at t0 + {} us, {:?}, {:?}", (now - T0) / US, policy, checks);
            }
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn the_sliding_window_retry_is_exact_below_the_microsecond() {
    // 3 per second, 3 admitted in one window. At the start of the next, a request of cost 2
    // fits once the previous count's weight floor(3 * (W - e) / W) is at most 1, that is from
    // e = 333_333_334 ns: not a whole microsecond.
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let named = NamedPolicy { name: "sw".into(), policy: SlidingWindow::new(3, NANOS_PER_SEC).unwrap().into() };
    let mut options = RedisOptions::single(server.url(), OnError::FailClosed);
    options.on_error = OnError::FailClosed;
    options.deny_cache_entries = 0;
    let store = RedisStore::new(vec![named], options).expect("valid store");
    let one = [Check { policy: 0, key: key(1), cost: 1 }];
    let two = [Check { policy: 0, key: key(1), cost: 2 }];
    runtime.block_on(async {
        for _ in 0..3 {
            assert!(store.decide(&one, Some(T0)).await.unwrap().allowed);
        }
        let next = T0 + NANOS_PER_SEC;
        let denied = store.decide(&two, Some(next)).await.unwrap();
        assert!(!denied.allowed);
        assert_eq!(denied.decisions[0].retry_after, 333_333_334);
        // At the microsecond before, still denied; at the one after, admitted.
        assert!(!store.decide(&two, Some(next + 333_333 * US)).await.unwrap().allowed);
        assert!(store.decide(&two, Some(next + 333_334 * US)).await.unwrap().allowed);
    });
}

#[test]
fn products_beyond_two_to_the_53_stay_exact() {
    // A million per 30 days: the weighted count prev * (W - elapsed) reaches 2.6e18 us^2, far
    // beyond the doubles' exact range; the script's long multiplication must match the core.
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let window = 30 * 86_400 * NANOS_PER_SEC;
    let named = NamedPolicy { name: "big".into(), policy: SlidingWindow::new(1_000_000, window).unwrap().into() };
    let mut options = RedisOptions::single(server.url(), OnError::FailClosed);
    options.on_error = OnError::FailClosed;
    options.deny_cache_entries = 0;
    let store = RedisStore::new(vec![named.clone()], options).expect("valid store");
    let mut reference = Reference::new(&[named]);
    let start = T0 - T0 % window;
    let mut requests = vec![(start + US, 999_983)];
    // Through the next window: costs that land on both sides of the limit.
    for i in 1..200u64 {
        requests.push((start + window + i * 12_960_000_007 * US % window, 1 + (i * 7_919) % 40_000));
    }
    requests.sort_unstable();
    let mut outcomes = [0u32; 2];
    runtime.block_on(async {
        for (at, cost) in requests {
            let at = at - at % US;
            let checks = [Check { policy: 0, key: key(2), cost }];
            let want = reference.decide(&checks, at).unwrap();
            let got = store.decide(&checks, Some(at)).await.unwrap();
            assert_eq!(got, want, "at {at}, cost {cost}");
            outcomes[usize::from(got.allowed)] += 1;
        }
    });
    assert!(outcomes[0] > 10 && outcomes[1] > 10, "both sides of the limit: {outcomes:?}");
}
