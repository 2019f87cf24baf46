//! What a response says about when to come back: `Retry-After`, then the RateLimit headers.
//!
//! Order of precedence, first valid one wins:
//! 1. `Retry-After` (RFC 9110 §10.2.3): delay-seconds (`120`) or an HTTP-date in any of the three
//!    formats (see [`crate::http_date`]). A date in the past means "now".
//! 2. `RateLimit-Reset` (draft-ietf-httpapi-ratelimit-headers-06): delay-seconds until the quota
//!    resets, unless `RateLimit-Remaining` says quota is left.
//! 3. `RateLimit` (the current draft): a list of policies like `"default";r=0;t=30`; the largest
//!    `t` of a policy with no quota left (`r=0`, or `r` absent) is the wait.
//!
//! A value that does not follow its grammar (negative, fractional, garbage, an impossible date)
//! is ignored, as if the header were absent. Very large values saturate instead of overflowing.

use http::HeaderMap;
use sluice_core::{NANOS_PER_SEC, Nanos};

use crate::decision::DelaySource;
use crate::http_date::parse_http_date;

/// A parsed `Retry-After` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// delay-seconds (saturated at `u64::MAX`).
    Seconds(u64),
    /// An HTTP-date, as seconds since the Unix epoch (negative before 1970).
    Date(i64),
}

impl RetryAfter {
    /// Parses a `Retry-After` field value. `now` (Unix nanoseconds) only places the two-digit
    /// year of an RFC 850 date. Returns `None` for anything outside the grammar.
    ///
    /// ```
    /// use sluice_client::RetryAfter;
    /// assert_eq!(RetryAfter::parse("120", 0), Some(RetryAfter::Seconds(120)));
    /// assert_eq!(RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT", 0), Some(RetryAfter::Date(784_111_777)));
    /// assert_eq!(RetryAfter::parse("-5", 0), None);
    /// ```
    pub fn parse(value: &str, now: Nanos) -> Option<RetryAfter> {
        let value = value.trim_matches([' ', '\t']);
        if let Some(secs) = delay_seconds(value) {
            return Some(RetryAfter::Seconds(secs));
        }
        let now_secs = i64::try_from(now / NANOS_PER_SEC).unwrap_or(i64::MAX);
        parse_http_date(value, now_secs).map(RetryAfter::Date)
    }

    /// Nanoseconds to wait from `now` (Unix nanoseconds): zero for a past date, saturated at
    /// `u64::MAX` for values too large to represent.
    pub fn wait_from(self, now: Nanos) -> Nanos {
        match self {
            RetryAfter::Seconds(s) => s.saturating_mul(NANOS_PER_SEC),
            RetryAfter::Date(unix) => {
                let at = i128::from(unix) * i128::from(NANOS_PER_SEC);
                let wait = (at - i128::from(now)).max(0);
                u64::try_from(wait).unwrap_or(u64::MAX)
            }
        }
    }
}

/// `1*DIGIT`, saturating at `u64::MAX`.
fn delay_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(value.bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))))
}

/// The wait a response asks for, in nanoseconds from `now` (Unix nanoseconds), and which header
/// said so. `None` when no header gives a valid one.
pub fn server_delay(headers: &HeaderMap, now: Nanos) -> Option<(Nanos, DelaySource)> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ra) = text("retry-after").and_then(|v| RetryAfter::parse(v, now)) {
        let source = match ra {
            RetryAfter::Seconds(_) => DelaySource::RetryAfterSeconds,
            RetryAfter::Date(_) => DelaySource::RetryAfterDate,
        };
        return Some((ra.wait_from(now), source));
    }
    let remaining_left = text("ratelimit-remaining").and_then(|v| delay_seconds(v.trim())).is_some_and(|r| r > 0);
    if !remaining_left && let Some(secs) = text("ratelimit-reset").and_then(|v| delay_seconds(v.trim())) {
        return Some((secs.saturating_mul(NANOS_PER_SEC), DelaySource::RateLimitReset));
    }
    let mut longest: Option<u64> = None;
    for value in headers.get_all("ratelimit").iter().filter_map(|v| v.to_str().ok()) {
        for member in split_outside_quotes(value, b',') {
            if let Some(t) = exhausted_policy_reset(member) {
                longest = Some(longest.map_or(t, |l| l.max(t)));
            }
        }
    }
    longest.map(|t| (t.saturating_mul(NANOS_PER_SEC), DelaySource::RateLimit))
}

/// From one member of a `RateLimit` list (`"name";r=0;t=30`): its `t` when the policy has no
/// quota left. A member whose `r` or `t` is not a non-negative integer is skipped.
fn exhausted_policy_reset(member: &str) -> Option<u64> {
    let mut parts = split_outside_quotes(member, b';');
    let name = parts.next()?.trim();
    if name.is_empty() {
        return None;
    }
    let (mut r, mut t) = (None, None);
    for param in parts {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        // Structured fields: a later parameter of the same name replaces an earlier one.
        match key.trim() {
            "r" => r = Some(sf_non_negative_integer(value)?),
            "t" => t = Some(sf_non_negative_integer(value)?),
            _ => {}
        }
    }
    match r {
        Some(left) if left > 0 => None,
        _ => t,
    }
}

/// A structured-field integer (at most 15 digits) that is not negative.
fn sf_non_negative_integer(value: &str) -> Option<u64> {
    let value = value.trim();
    if value.len() > 15 {
        return None;
    }
    delay_seconds(value)
}

/// Splits `s` on `sep` where it is not inside a quoted string (`"..."` with `\` escapes).
fn split_outside_quotes(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    let mut cuts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if in_quotes {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_quotes = false,
                _ => {}
            }
        } else if b == b'"' {
            in_quotes = true;
        } else if b == sep {
            cuts.push(&s[start..i]);
            start = i + 1;
        }
    }
    cuts.push(&s[start..]);
    cuts.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    /// 2025-06-15T12:00:00Z in nanoseconds.
    const NOW: Nanos = 1_749_988_800 * NANOS_PER_SEC;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn delay_seconds_and_dates() {
        assert_eq!(RetryAfter::parse("0", NOW), Some(RetryAfter::Seconds(0)));
        assert_eq!(RetryAfter::parse(" 007 ", NOW), Some(RetryAfter::Seconds(7)));
        assert_eq!(
            RetryAfter::parse("99999999999999999999999999", NOW),
            Some(RetryAfter::Seconds(u64::MAX)),
            "huge values saturate"
        );
        assert_eq!(RetryAfter::Seconds(u64::MAX).wait_from(NOW), u64::MAX);
        for bad in ["-5", "+5", "1.5", "5s", "", "soon", "0x10", "1 2"] {
            assert_eq!(RetryAfter::parse(bad, NOW), None, "{bad:?}");
        }
        let in_90s = RetryAfter::parse("Sun, 15 Jun 2025 12:01:30 GMT", NOW).unwrap();
        assert_eq!(in_90s.wait_from(NOW), 90 * NANOS_PER_SEC);
        // A date in the past means now.
        let past = RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT", NOW).unwrap();
        assert_eq!(past.wait_from(NOW), 0);
        // Sub-second `now`: the wait is to the exact second named.
        assert_eq!(in_90s.wait_from(NOW + 250_000_000), 89_750_000_000);
        // A date far beyond what nanoseconds hold saturates.
        let far = RetryAfter::parse("Fri, 31 Dec 9999 23:59:59 GMT", NOW).unwrap();
        assert_eq!(far.wait_from(NOW), u64::MAX);
    }

    #[test]
    fn retry_after_wins_over_ratelimit_headers() {
        let h = headers(&[("retry-after", "3"), ("ratelimit-reset", "40"), ("ratelimit", "\"p\";r=0;t=50")]);
        assert_eq!(server_delay(&h, NOW), Some((3 * NANOS_PER_SEC, DelaySource::RetryAfterSeconds)));
        let h = headers(&[("retry-after", "Sun, 15 Jun 2025 12:00:04 GMT"), ("ratelimit-reset", "40")]);
        assert_eq!(server_delay(&h, NOW), Some((4 * NANOS_PER_SEC, DelaySource::RetryAfterDate)));
    }

    #[test]
    fn malformed_retry_after_falls_back_to_ratelimit_headers() {
        let h = headers(&[("retry-after", "later"), ("ratelimit-reset", "40")]);
        assert_eq!(server_delay(&h, NOW), Some((40 * NANOS_PER_SEC, DelaySource::RateLimitReset)));
        let h = headers(&[("retry-after", "-1")]);
        assert_eq!(server_delay(&h, NOW), None);
    }

    #[test]
    fn draft6_reset_unless_quota_remains() {
        let h = headers(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "12")]);
        assert_eq!(server_delay(&h, NOW), Some((12 * NANOS_PER_SEC, DelaySource::RateLimitReset)));
        let h = headers(&[("ratelimit-remaining", "3"), ("ratelimit-reset", "12")]);
        assert_eq!(server_delay(&h, NOW), None);
        let h = headers(&[("ratelimit-reset", "-12")]);
        assert_eq!(server_delay(&h, NOW), None);
    }

    #[test]
    fn current_draft_takes_the_longest_reset_of_an_exhausted_policy() {
        let h = headers(&[("ratelimit", "\"default\";r=0;t=30")]);
        assert_eq!(server_delay(&h, NOW), Some((30 * NANOS_PER_SEC, DelaySource::RateLimit)));
        let h = headers(&[("ratelimit", "\"burst\";r=5;t=1, \"day\";r=0;t=3600, \"hour\";r=0;t=60")]);
        assert_eq!(server_delay(&h, NOW), Some((3600 * NANOS_PER_SEC, DelaySource::RateLimit)));
        // Two field lines form one list.
        let h = headers(&[("ratelimit", "\"a\";r=0;t=5"), ("ratelimit", "\"b\";r=0;t=9")]);
        assert_eq!(server_delay(&h, NOW), Some((9 * NANOS_PER_SEC, DelaySource::RateLimit)));
        // Quoted names may hold the separators.
        let h = headers(&[("ratelimit", "\"a;b,c\\\"d\";r=0;t=7")]);
        assert_eq!(server_delay(&h, NOW), Some((7 * NANOS_PER_SEC, DelaySource::RateLimit)));
        // Quota left, no t, negative or oversized t: nothing to go on.
        for v in ["\"p\";r=1;t=30", "\"p\";r=0", "\"p\";r=0;t=-3", "\"p\";r=0;t=1234567890123456", ";r=0;t=3"] {
            assert_eq!(server_delay(&headers(&[("ratelimit", v)]), NOW), None, "{v}");
        }
    }
}
