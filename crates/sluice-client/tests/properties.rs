//! Invariants of the retry policy, over generated inputs.

mod support;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use proptest::prelude::*;
use sluice_client::{
    Attempt, AttemptResult, GiveUpReason, Jitter, ManualSleeper, Retrier, RetryAfter, RetryBudget, RetryDecision,
    RetryPolicy, SplitMix64,
};
use sluice_core::{Clock, ManualClock, NANOS_PER_SEC};
use support::three_formats;

/// 2025-06-15T12:00:00Z
const NOW: u64 = 1_749_988_800 * NANOS_PER_SEC;

fn policy(base_ms: u64, extra_cap_ms: u64, jitter: Jitter) -> RetryPolicy {
    RetryPolicy::builder()
        .base(Duration::from_millis(base_ms))
        .cap(Duration::from_millis(base_ms + extra_cap_ms))
        .jitter(jitter)
        .max_attempts(u32::MAX)
        .no_deadline()
        .build()
        .unwrap()
}

fn limited(headers: &HeaderMap) -> AttemptResult<'_> {
    AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers }
}

proptest! {
    #[test]
    fn full_jitter_stays_within_zero_and_the_capped_ceiling(
        base_ms in 0u64..10_000, extra_cap_ms in 0u64..600_000, index in 0u32..100, seed: u64,
    ) {
        let p = policy(base_ms, extra_cap_ms, Jitter::Full);
        let rng = SplitMix64::seeded(seed);
        let cap = (base_ms + extra_cap_ms) as u128 * 1_000_000;
        let ceiling = if index >= 64 { cap } else { ((base_ms as u128 * 1_000_000) << index).min(cap) };
        let headers = HeaderMap::new();
        let attempt = Attempt { index, method: &Method::GET, result: limited(&headers), now: NOW, deadline: None };
        let RetryDecision::RetryAfter(wait) = p.decide(&attempt, &rng) else { panic!("a 429 with no deadline is retried") };
        prop_assert!(wait.as_nanos() <= ceiling, "{wait:?} > {ceiling}");
        prop_assert_eq!(p.backoff_ceiling(index) as u128, ceiling);
    }

    #[test]
    fn equal_jitter_stays_in_the_upper_half(
        base_ms in 0u64..10_000, extra_cap_ms in 0u64..600_000, index in 0u32..100, seed: u64,
    ) {
        let p = policy(base_ms, extra_cap_ms, Jitter::Equal);
        let ceiling = p.backoff_ceiling(index);
        let wait = p.backoff(index, &SplitMix64::seeded(seed));
        prop_assert!(wait >= ceiling - ceiling / 2 && wait <= ceiling, "{wait} not in the upper half of {ceiling}");
        prop_assert_eq!(policy(base_ms, extra_cap_ms, Jitter::None).backoff(index, &SplitMix64::seeded(seed)), ceiling);
    }

    /// Whatever the server says and however long attempts take, no wait reaches the deadline,
    /// and a call stops within it.
    #[test]
    fn the_deadline_is_never_passed(
        deadline_s in 1u64..120,
        answers in proptest::collection::vec((0u64..200, 0u8..4), 1..40),
        seed: u64,
    ) {
        let clock = Arc::new(ManualClock::new(NOW));
        let policy = RetryPolicy::builder()
            .deadline(Duration::from_secs(deadline_s))
            .max_attempts(u32::MAX)
            .cap(Duration::from_secs(60))
            .build()
            .unwrap();
        let retrier = Retrier::new(policy)
            .with_clock(clock.clone())
            .with_random(Arc::new(SplitMix64::seeded(seed)))
            .with_sleeper(Arc::new(ManualSleeper::new(clock.clone())));
        let deadline = NOW + deadline_s * NANOS_PER_SEC;
        let mut session = retrier.session(&Method::GET);
        for (value, kind) in answers {
            // Each attempt takes up to 2 s of the budget.
            clock.advance(value % 20 * NANOS_PER_SEC / 10);
            let mut headers = HeaderMap::new();
            let text = match kind {
                0 => value.to_string(),
                1 => three_formats(clock.now() / NANOS_PER_SEC + value)[(value % 3) as usize].clone(),
                2 => "garbage".to_string(),
                _ => String::new(),
            };
            if !text.is_empty() {
                headers.insert("retry-after", HeaderValue::from_str(&text).unwrap());
            }
            let before = clock.now();
            match session.record(&limited(&headers), true) {
                RetryDecision::RetryAfter(wait) => {
                    prop_assert!(before + (wait.as_nanos() as u64) < deadline, "wait {wait:?} reaches the deadline");
                    session.wait(wait).await_now();
                    prop_assert!(clock.now() < deadline);
                }
                RetryDecision::GiveUp(reason) => {
                    let is_deadline = matches!(reason, GiveUpReason::DeadlineWouldPass { .. });
                    prop_assert!(is_deadline, "{reason:?}");
                    break;
                }
            }
        }
    }

    /// Retries never exceed the allowance plus `ratio` per original request, whatever the mix.
    #[test]
    fn the_budget_holds(
        ratio in 0.001f64..2.0, allowance in 1u64..50, ops in proptest::collection::vec(any::<bool>(), 0..3000),
    ) {
        let budget = RetryBudget::new(ratio, allowance).unwrap();
        let (mut requests, mut retries) = (0u64, 0u64);
        for op in ops {
            if op {
                budget.deposit();
                requests += 1;
            } else if budget.try_withdraw() {
                retries += 1;
            }
            prop_assert!(
                retries as f64 <= allowance as f64 + ratio * requests as f64 + 1e-9,
                "{} retries for {} requests (ratio {}, allowance {})", retries, requests, ratio, allowance
            );
        }
    }

    #[test]
    fn delay_seconds_of_any_size_parse_without_overflow(n: u64, extra_digits in 0usize..30) {
        prop_assert_eq!(RetryAfter::parse(&n.to_string(), NOW), Some(RetryAfter::Seconds(n)));
        let huge = format!("{n}{}", "9".repeat(extra_digits));
        let parsed = RetryAfter::parse(&huge, NOW);
        prop_assert!(matches!(parsed, Some(RetryAfter::Seconds(_))));
        let wait = parsed.unwrap().wait_from(NOW);
        prop_assert!(wait == n.saturating_mul(NANOS_PER_SEC) || extra_digits > 0);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,40}") {
        let _ = RetryAfter::parse(&text, NOW);
    }

    /// An independent formatter (the `httpdate` crate) and this parser agree on every
    /// IMF-fixdate and asctime date (RFC 850 dates: see the next property).
    #[test]
    fn dates_round_trip_through_imf_fixdate_and_asctime(unix in 0u64..253_402_300_799) {
        let [imf, _, asctime] = three_formats(unix);
        prop_assert_eq!(RetryAfter::parse(&imf, NOW), Some(RetryAfter::Date(unix as i64)));
        prop_assert_eq!(RetryAfter::parse(&asctime, NOW), Some(RetryAfter::Date(unix as i64)));
        let at = UNIX_EPOCH + Duration::from_secs(unix);
        prop_assert_eq!(httpdate::parse_http_date(&imf).unwrap(), at);
    }

    /// RFC 850 dates name only two digits of the year: inside the 100-year window around now
    /// (kept a year clear of its edges) they resolve to the same instant as the full date.
    #[test]
    fn rfc850_dates_resolve_inside_the_window(offset in -(49i64 * 365 * 86_400)..(49 * 365 * 86_400)) {
        let unix = (NOW / NANOS_PER_SEC) as i64 + offset;
        let [_, rfc850, _] = three_formats(unix as u64);
        prop_assert_eq!(RetryAfter::parse(&rfc850, NOW), Some(RetryAfter::Date(unix)), "{}", rfc850);
    }
}

/// Polls a future that is ready at once (the manual sleeper never blocks).
trait AwaitNow: std::future::Future + Sized {
    fn await_now(self) -> Self::Output {
        let mut fut = std::pin::pin!(self);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the manual sleeper should be ready at once"),
        }
    }
}

impl<F: std::future::Future> AwaitNow for F {}
