//! Invariants of the retry policy, over generated inputs.

mod support;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Method, StatusCode};
use proptest::prelude::*;
use sluice_client::{
    Attempt, AttemptResult, DelaySource, GiveUpReason, Jitter, ManualSleeper, ResetForm, Retrier, RetryAfter,
    RetryBudget, RetryDecision, RetryPolicy, SplitMix64, server_delay, x_ratelimit_reset,
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

/// Every header the policy reads a wait from.
const HINT_HEADERS: [&str; 6] = [
    "retry-after",
    "ratelimit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// Field values: any bytes at all, numbers of every size, and structured-field debris.
fn field_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..48),
        "[0-9]{0,16}(\\.[0-9]{0,12})?".prop_map(String::into_bytes),
        "[-0-9a-z\"(),;=.:*?@ \t]{0,48}".prop_map(String::into_bytes),
        "(\"[a-z]{0,4}\";r=[0-9-]{0,3}(;t=[0-9.-]{0,17})?,? ?){0,4}".prop_map(String::into_bytes),
    ]
}

/// For each hint header, zero to two field lines; values that `http` refuses are left out.
fn hint_headers() -> impl Strategy<Value = HeaderMap> {
    proptest::collection::vec((0..HINT_HEADERS.len(), field_bytes()), 0..8).prop_map(|lines| {
        let mut headers = HeaderMap::new();
        for (name, bytes) in lines {
            if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                headers.append(HINT_HEADERS[name], value);
            }
        }
        headers
    })
}

/// `n` nanoseconds as `u64`, saturating.
fn saturate(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

proptest! {
    /// Whatever bytes a server sends: no panic, no retry later than the policy allows (the
    /// server-wait maximum for a server's wait, the cap for the backoff, always before the
    /// deadline), and a server's wait is either followed exactly or refused.
    #[test]
    fn no_header_bytes_make_a_panic_or_a_wait_above_the_caps(
        headers in hint_headers(),
        now in prop_oneof![0u64..1_000 * NANOS_PER_SEC, NOW - 86_400 * NANOS_PER_SEC..NOW + 86_400 * NANOS_PER_SEC],
        max_server_s in 0u64..3_600,
        cap_ms in 0u64..60_000,
        deadline_s in proptest::option::of(1u64..600),
        seed: u64,
    ) {
        let (max_server_wait, cap) = (Duration::from_secs(max_server_s), Duration::from_millis(cap_ms));
        let builder = RetryPolicy::builder().base(cap / 2).cap(cap).max_attempts(u32::MAX).max_server_wait(max_server_wait);
        let policy = match deadline_s {
            Some(s) => builder.deadline(Duration::from_secs(s)),
            None => builder.no_deadline(),
        }.build().unwrap();
        let deadline = deadline_s.map(|s| now + s * NANOS_PER_SEC);
        let attempt = Attempt { index: 3, method: &Method::GET, result: limited(&headers), now, deadline };
        let hint = server_delay(&headers, now);
        match (policy.decide(&attempt, &SplitMix64::seeded(seed)), hint) {
            (RetryDecision::RetryAfter(wait), Some((asked, source))) => {
                prop_assert_eq!(wait.as_nanos(), u128::from(asked), "{:?} is followed exactly", source);
                prop_assert!(wait <= max_server_wait, "{:?} > {:?} from {:?}", wait, max_server_wait, source);
                prop_assert!(deadline.is_none_or(|d| now + asked < d));
            }
            (RetryDecision::RetryAfter(wait), None) => {
                prop_assert!(wait <= cap, "backoff {:?} > cap {:?}", wait, cap);
                prop_assert!(deadline.is_none_or(|d| now + (wait.as_nanos() as u64) < d));
            }
            (RetryDecision::GiveUp(GiveUpReason::ServerWaitTooLong { wait, max, source }), Some((asked, hinted))) => {
                prop_assert_eq!((wait.as_nanos(), max, source), (u128::from(asked), max_server_wait, hinted));
                prop_assert!(wait > max_server_wait);
            }
            (RetryDecision::GiveUp(GiveUpReason::DeadlineWouldPass { .. }), _) => prop_assert!(deadline.is_some()),
            (other, hint) => prop_assert!(false, "{:?} for hint {:?}", other, hint),
        }
    }

    /// A RateLimit list (draft 10), split over field lines at random: the wait is the longest `t`
    /// among the policies with `r=0`, and none if no such policy has a `t`.
    #[test]
    fn ratelimit_lists_wait_for_the_longest_exhausted_reset(
        policies in proptest::collection::vec((0u64..3, proptest::option::of(0u64..1_000_000), any::<bool>()), 1..6),
        cuts in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let mut headers = HeaderMap::new();
        let mut line = Vec::new();
        for (i, (r, t, pk)) in policies.iter().enumerate() {
            let mut item = format!("\"policy-{i}\";r={r}");
            if let Some(t) = t {
                item += &format!(";t={t}");
            }
            if *pk {
                item += ";pk=:cGFydGl0aW9u:";
            }
            line.push(item);
            if cuts[i] || i + 1 == policies.len() {
                headers.append("ratelimit", HeaderValue::from_str(&line.join(", ")).unwrap());
                line.clear();
            }
        }
        let longest = policies.iter().filter(|(r, _, _)| *r == 0).filter_map(|(_, t, _)| *t).max();
        prop_assert_eq!(server_delay(&headers, NOW), longest.map(|t| (t * NANOS_PER_SEC, DelaySource::RateLimit)));
    }

    /// X-RateLimit-Reset: each magnitude is read in its form, to the nanosecond.
    #[test]
    fn x_ratelimit_reset_reads_each_form_exactly(
        delta in 0u64..1_000_000_000,
        fraction in "[0-9]{0,9}",
        unix_s in 1_000_000_000u64..100_000_000_000,
        unix_ms in 100_000_000_000u64..100_000_000_000_000,
        now in 0u64..u64::MAX,
    ) {
        let billionths: u64 = format!("{fraction:0<9}").parse().unwrap();
        let dotted = if fraction.is_empty() { String::new() } else { format!(".{fraction}") };
        prop_assert_eq!(
            x_ratelimit_reset(&format!("{delta}{dotted}"), now),
            Some((delta * NANOS_PER_SEC + billionths, ResetForm::DeltaSeconds))
        );
        let at = u128::from(unix_s) * u128::from(NANOS_PER_SEC) + u128::from(billionths);
        prop_assert_eq!(
            x_ratelimit_reset(&format!("{unix_s}{dotted}"), now),
            Some((saturate(at.saturating_sub(u128::from(now))), ResetForm::UnixSeconds))
        );
        let at = u128::from(unix_ms) * 1_000_000 + u128::from(billionths).div_ceil(1_000);
        prop_assert_eq!(
            x_ratelimit_reset(&format!("{unix_ms}{dotted}"), now),
            Some((saturate(at.saturating_sub(u128::from(now))), ResetForm::UnixMillis))
        );
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
