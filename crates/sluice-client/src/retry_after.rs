//! `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.
//!
//! ```
//! use sluice_client::RetryAfter;
//!
//! let now = 784_111_777 * 1_000_000_000; // Sun, 06 Nov 1994 08:49:37 GMT, in Unix nanoseconds
//! let date = RetryAfter::parse("Sun, 06 Nov 1994 08:50:07 GMT", now).unwrap();
//! assert_eq!(date.wait_from(now), 30_000_000_000);
//! assert_eq!(RetryAfter::parse("30", now).unwrap().wait_from(now), 30_000_000_000);
//! assert_eq!(RetryAfter::parse("1.5", now), None, "delay-seconds has no fractions");
//! ```

use sluice_core::{NANOS_PER_SEC, Nanos};

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

/// `1*DIGIT` (RFC 9110's delay-seconds, and the integers of the older RateLimit headers),
/// saturating at `u64::MAX`.
pub(crate) fn delay_seconds(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(value.bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-06-15T12:00:00Z in nanoseconds.
    const NOW: Nanos = 1_749_988_800 * NANOS_PER_SEC;

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
}
