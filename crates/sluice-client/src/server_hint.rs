//! What a response says about when to come back: the headers read, and which one wins.
//!
//! In order of precedence. The first that asks for a wait wins; one that is absent, malformed,
//! or says quota is left hands over to the next:
//!
//! 1. `Retry-After` (RFC 9110 §10.2.3): delay-seconds (`120`) or an HTTP-date in any of the
//!    three formats (see [`crate::http_date`]); a date in the past means "now". See
//!    [`RetryAfter`].
//! 2. `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10): a list of policies such as
//!    `"per-ip";r=0;t=30, "burst";r=5;t=2`; the longest `t` among those with `r=0`. See
//!    [`crate::service_limit`].
//! 3. `RateLimit-Reset` (draft -06): delay-seconds until the quota resets, unless
//!    `RateLimit-Remaining` is a positive integer.
//! 4. `X-RateLimit-Reset` (no standard): seconds from now, a Unix time in seconds or in
//!    milliseconds, told apart by magnitude (see [`x_ratelimit_reset`]), unless
//!    `X-RateLimit-Remaining` is a positive integer.
//!
//! `Retry-After` comes first because it is the field made for exactly this question, and the
//! draft says it takes precedence over `RateLimit`. The standards' drafts come before the
//! conventions, the current one before the one it replaced, and the one header whose form has
//! to be guessed comes last.
//!
//! A `-Remaining` of `0` (or none at all) means that the reset beside it is the wait. A positive
//! one says that quota of that policy is left, so the 429 came from some other limit and waiting
//! for that reset would be a guess: the next header decides, and without one, the backoff.
//!
//! A value that does not follow its grammar (negative, fractional where fractions are not
//! allowed, garbage, an impossible date) is ignored, as if the header were absent. Very large
//! values saturate instead of overflowing; the policy then refuses waits that pass its deadline
//! or its [`max_server_wait`](crate::RetryPolicyBuilder::max_server_wait).
//!
//! ```
//! use http::{HeaderMap, HeaderValue};
//! use sluice_client::{DelaySource, server_delay};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("ratelimit-remaining", HeaderValue::from_static("7"));
//! headers.insert("ratelimit-reset", HeaderValue::from_static("60"));
//! assert_eq!(server_delay(&headers, 0), None, "quota is left: that reset is not the reason");
//!
//! headers.insert("ratelimit", HeaderValue::from_static(r#""hourly";r=0;t=90"#));
//! assert_eq!(server_delay(&headers, 0), Some((90_000_000_000, DelaySource::RateLimit)));
//!
//! headers.insert("retry-after", HeaderValue::from_static("5"));
//! assert_eq!(server_delay(&headers, 0), Some((5_000_000_000, DelaySource::RetryAfterSeconds)));
//! ```

use http::HeaderMap;
use sluice_core::{NANOS_PER_SEC, Nanos};

use crate::decision::DelaySource;
use crate::retry_after::{RetryAfter, delay_seconds};
use crate::service_limit::exhausted_wait;
use crate::x_ratelimit::x_ratelimit_reset;

/// The wait a response asks for, in nanoseconds from `now` (Unix nanoseconds), and which header
/// said so. `None` when no header gives a valid one. Never panics, whatever the header bytes.
///
/// The first of these that asks for a wait wins: `Retry-After`; `RateLimit` (draft 10, the
/// longest `t` among policies with `r=0`); `RateLimit-Reset` (draft 6) unless
/// `RateLimit-Remaining` is positive; `X-RateLimit-Reset` (see [`x_ratelimit_reset`]) unless
/// `X-RateLimit-Remaining` is positive. A header that is absent, malformed or says quota is left
/// hands over to the next. The crate documentation has the whole table.
pub fn server_delay(headers: &HeaderMap, now: Nanos) -> Option<(Nanos, DelaySource)> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim_matches([' ', '\t']));
    let quota_left = |name: &str| text(name).and_then(delay_seconds).is_some_and(|left| left > 0);
    if let Some(ra) = text("retry-after").and_then(|v| RetryAfter::parse(v, now)) {
        let source = match ra {
            RetryAfter::Seconds(_) => DelaySource::RetryAfterSeconds,
            RetryAfter::Date(_) => DelaySource::RetryAfterDate,
        };
        return Some((ra.wait_from(now), source));
    }
    if let Some(wait) = exhausted_wait(headers) {
        return Some((wait, DelaySource::RateLimit));
    }
    if !quota_left("ratelimit-remaining")
        && let Some(secs) = text("ratelimit-reset").and_then(delay_seconds)
    {
        return Some((secs.saturating_mul(NANOS_PER_SEC), DelaySource::RateLimitReset));
    }
    if !quota_left("x-ratelimit-remaining")
        && let Some((wait, form)) = text("x-ratelimit-reset").and_then(|v| x_ratelimit_reset(v, now))
    {
        return Some((wait, DelaySource::XRateLimitReset(form)));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x_ratelimit::ResetForm;
    use http::HeaderValue;

    /// 2025-06-15T12:00:00Z.
    const NOW_S: u64 = 1_749_988_800;
    const NOW: Nanos = NOW_S * NANOS_PER_SEC;
    const S: u64 = NANOS_PER_SEC;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn delay(pairs: &[(&'static str, &str)]) -> Option<(Nanos, DelaySource)> {
        server_delay(&headers(pairs), NOW)
    }

    const GITHUB_RESET: DelaySource = DelaySource::XRateLimitReset(ResetForm::UnixSeconds);

    #[test]
    fn retry_after_wins_over_every_ratelimit_header() {
        let all = [
            ("retry-after", "3"),
            ("ratelimit", "\"p\";r=0;t=50"),
            ("ratelimit-reset", "40"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1749988860"),
        ];
        assert_eq!(delay(&all), Some((3 * S, DelaySource::RetryAfterSeconds)));
        let h = [("retry-after", "Sun, 15 Jun 2025 12:00:04 GMT"), ("ratelimit-reset", "40")];
        assert_eq!(delay(&h), Some((4 * S, DelaySource::RetryAfterDate)));
        // Even a Retry-After of zero: the server said "now".
        assert_eq!(
            delay(&[("retry-after", "0"), ("ratelimit", "\"p\";r=0;t=50")]),
            Some((0, DelaySource::RetryAfterSeconds))
        );
    }

    #[test]
    fn then_the_current_draft_then_draft_6_then_x_ratelimit() {
        let list = ("ratelimit", "\"p\";r=0;t=50");
        let draft6 = ("ratelimit-reset", "40");
        let x = ("x-ratelimit-reset", "1749988830");
        assert_eq!(delay(&[x, draft6, list]), Some((50 * S, DelaySource::RateLimit)));
        assert_eq!(delay(&[x, draft6]), Some((40 * S, DelaySource::RateLimitReset)));
        assert_eq!(delay(&[x]), Some((30 * S, GITHUB_RESET)));
    }

    #[test]
    fn a_header_that_asks_for_no_wait_hands_over_to_the_next() {
        // The list names no exhausted policy: the older headers decide.
        let h = [("ratelimit", "\"p\";r=3;t=50"), ("ratelimit-reset", "40")];
        assert_eq!(delay(&h), Some((40 * S, DelaySource::RateLimitReset)));
        // A malformed list likewise.
        let h = [("ratelimit", "\"p\";r=0;t=-50"), ("x-ratelimit-reset", "7")];
        assert_eq!(delay(&h), Some((7 * S, DelaySource::XRateLimitReset(ResetForm::DeltaSeconds))));
        // A malformed Retry-After.
        let h = [("retry-after", "later"), ("ratelimit-reset", "40")];
        assert_eq!(delay(&h), Some((40 * S, DelaySource::RateLimitReset)));
        assert_eq!(delay(&[("retry-after", "-1")]), None);
    }

    #[test]
    fn remaining_zero_means_wait_for_the_reset_and_quota_left_means_it_is_not_the_reason() {
        // draft 6
        assert_eq!(
            delay(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "12")]),
            Some((12 * S, DelaySource::RateLimitReset))
        );
        assert_eq!(delay(&[("ratelimit-reset", "12")]), Some((12 * S, DelaySource::RateLimitReset)));
        assert_eq!(delay(&[("ratelimit-remaining", "3"), ("ratelimit-reset", "12")]), None);
        assert_eq!(delay(&[("ratelimit-reset", "-12")]), None);
        // X-RateLimit, as GitHub sends it.
        let reset = ("x-ratelimit-reset", "1749988812");
        assert_eq!(delay(&[("x-ratelimit-remaining", "0"), reset]), Some((12 * S, GITHUB_RESET)));
        assert_eq!(delay(&[reset]), Some((12 * S, GITHUB_RESET)));
        assert_eq!(delay(&[("x-ratelimit-remaining", "4999"), reset]), None);
        // A Remaining that is not a count does not say quota is left.
        assert_eq!(delay(&[("x-ratelimit-remaining", "lots"), reset]), Some((12 * S, GITHUB_RESET)));
        // Each family's Remaining speaks for its own Reset only.
        let h = [
            ("ratelimit-remaining", "3"),
            ("ratelimit-reset", "12"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "9"),
        ];
        assert_eq!(delay(&h), Some((9 * S, DelaySource::XRateLimitReset(ResetForm::DeltaSeconds))));
        // Remaining 0 with no reset anywhere: nothing to go on.
        assert_eq!(delay(&[("x-ratelimit-remaining", "0"), ("ratelimit-remaining", "0")]), None);
    }

    #[test]
    fn every_x_ratelimit_reset_form_arrives_with_its_source() {
        assert_eq!(
            delay(&[("x-ratelimit-reset", "2.5")]),
            Some((2 * S + S / 2, DelaySource::XRateLimitReset(ResetForm::DeltaSeconds)))
        );
        let ms = ((NOW_S + 2) * 1000).to_string();
        assert_eq!(
            delay(&[("x-ratelimit-reset", &ms)]),
            Some((2 * S, DelaySource::XRateLimitReset(ResetForm::UnixMillis)))
        );
        assert_eq!(delay(&[("x-ratelimit-reset", "1600000000")]), Some((0, GITHUB_RESET)), "a past reset means now");
        assert_eq!(delay(&[("x-ratelimit-reset", "soon")]), None);
    }
}
