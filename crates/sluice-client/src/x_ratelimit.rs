//! `X-RateLimit-Reset`, the most common rate-limit header and one without a standard: some
//! servers send the Unix time at which the quota resets (GitHub, in seconds; others in
//! milliseconds), others the seconds until then, and some add a fraction (`1.5`).
//!
//! [`x_ratelimit_reset`] tells the form by the value's magnitude and measures the wait
//! against the injected clock's `now`.
//!
//! ```
//! use sluice_client::{ResetForm, x_ratelimit_reset};
//!
//! let now = 1_750_000_000 * 1_000_000_000; // Unix nanoseconds
//! let s = 1_000_000_000;
//! assert_eq!(x_ratelimit_reset("1750000030", now), Some((30 * s, ResetForm::UnixSeconds)));
//! assert_eq!(x_ratelimit_reset("1750000030500", now), Some((30 * s + s / 2, ResetForm::UnixMillis)));
//! assert_eq!(x_ratelimit_reset("30", now), Some((30 * s, ResetForm::DeltaSeconds)));
//! assert_eq!(x_ratelimit_reset("1.5", now), Some((s + s / 2, ResetForm::DeltaSeconds)));
//! assert_eq!(x_ratelimit_reset("1749999000", now), Some((0, ResetForm::UnixSeconds)), "past: now");
//! assert_eq!(x_ratelimit_reset("-30", now), None);
//! ```

use std::fmt;

use sluice_core::{NANOS_PER_SEC, Nanos};

/// Whole values from here up are Unix times in seconds (2001-09-09T01:46:40Z).
pub const UNIX_SECONDS_FROM: u64 = 1_000_000_000;
/// Whole values from here up are Unix times in milliseconds (the year 5138 in seconds).
pub const UNIX_MILLIS_FROM: u64 = 100_000_000_000;
/// Whole values from here up are ignored (the year 5138 in milliseconds).
pub const IGNORED_FROM: u64 = 100_000_000_000_000;

/// How an `X-RateLimit-Reset` value was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResetForm {
    /// Seconds from now (below [`UNIX_SECONDS_FROM`]).
    DeltaSeconds,
    /// A Unix time in seconds (from [`UNIX_SECONDS_FROM`] to below [`UNIX_MILLIS_FROM`]).
    UnixSeconds,
    /// A Unix time in milliseconds (from [`UNIX_MILLIS_FROM`] to below [`IGNORED_FROM`]).
    UnixMillis,
}

impl fmt::Display for ResetForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ResetForm::DeltaSeconds => "seconds from now",
            ResetForm::UnixSeconds => "Unix seconds",
            ResetForm::UnixMillis => "Unix milliseconds",
        })
    }
}

/// The wait an `X-RateLimit-Reset` value asks for, in nanoseconds from `now`, and how the value
/// was read. `None` for a value outside the grammar or at or above [`IGNORED_FROM`]. Never
/// panics; waits too long for 64 bits saturate.
///
/// The form is told by the value's magnitude, and the wait is measured against `now` (Unix
/// nanoseconds, from the injected clock). The grammar is `1*DIGIT [ "." 1*DIGIT ]`, with spaces
/// and tabs allowed around it; anything else (a sign, an exponent, a list, a unit) is ignored.
///
/// | value `v` (its whole part) | read as                   | wait                           |
/// |----------------------------|---------------------------|--------------------------------|
/// | `v < 10^9`                 | seconds from now          | `v` seconds                    |
/// | `10^9 <= v < 10^11`        | Unix time in seconds      | `v - now`, zero if past        |
/// | `10^11 <= v < 10^14`       | Unix time in milliseconds | `v / 1000 - now`, zero if past |
/// | `v >= 10^14`               | nothing: ignored          |                                |
///
/// Why these bounds: 10^9 seconds is 2001-09-09T01:46:40Z, earlier than any reset a server
/// sends today, and as a wait it would be 31 years, longer than any server means. 10^11 seconds
/// is the year 5138, so a value from there up (12 digits or more) can only be milliseconds: from
/// 1973-03-03 (10^11 ms) to the year 5138 again (10^14 ms); today's are 13 digits. A fraction is
/// kept to the nanosecond, rounded up (the wait is never shortened).
///
/// The bounds are fixed numbers, not a window around `now`, on purpose: with a clock near the
/// epoch (a simulation starting at 0), a window would read small deltas as past dates and retry
/// early; fixed bounds read them as deltas, which at worst waits longer than asked.
///
/// The wait is not trusted blindly: a past reset means "now", and the policy gives up at once on
/// a wait that would pass its deadline or exceed its
/// [`max_server_wait`](crate::RetryPolicyBuilder::max_server_wait), so a server cannot make the
/// client sleep for a year.
pub fn x_ratelimit_reset(value: &str, now: Nanos) -> Option<(Nanos, ResetForm)> {
    let number = Decimal::parse(value.trim_matches([' ', '\t']))?;
    let (form, at_or_wait) = if number.whole < UNIX_SECONDS_FROM {
        (ResetForm::DeltaSeconds, number.nanos_per_unit(1))
    } else if number.whole < UNIX_MILLIS_FROM {
        (ResetForm::UnixSeconds, number.nanos_per_unit(1))
    } else if number.whole < IGNORED_FROM {
        (ResetForm::UnixMillis, number.nanos_per_unit(1_000))
    } else {
        return None;
    };
    let wait = match form {
        ResetForm::DeltaSeconds => at_or_wait,
        ResetForm::UnixSeconds | ResetForm::UnixMillis => at_or_wait.saturating_sub(u128::from(now)),
    };
    Some((u64::try_from(wait).unwrap_or(u64::MAX), form))
}

/// A non-negative decimal number: its whole part and its first nine fraction digits.
struct Decimal {
    /// The digits before the point (saturating; anything that large is ignored anyway).
    whole: u64,
    /// The fraction in billionths, rounded up when more than nine digits were given.
    billionths: u64,
}

impl Decimal {
    /// `1*DIGIT [ "." 1*DIGIT ]`.
    fn parse(text: &str) -> Option<Decimal> {
        let (whole, fraction) = match text.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (text, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !fraction.is_none_or(digits) {
            return None;
        }
        let whole = whole.bytes().fold(0u64, |acc, b| acc.saturating_mul(10).saturating_add(u64::from(b - b'0')));
        let fraction = fraction.unwrap_or("").as_bytes();
        let mut billionths = 0u64;
        for i in 0..9 {
            billionths = billionths * 10 + fraction.get(i).map_or(0, |b| u64::from(b - b'0'));
        }
        if fraction.iter().skip(9).any(|&b| b != b'0') {
            billionths += 1;
        }
        Some(Decimal { whole, billionths })
    }

    /// The number of nanoseconds when the number counts units of `1 / per_second` seconds
    /// (1 for seconds, 1000 for milliseconds), rounded up.
    fn nanos_per_unit(&self, per_second: u64) -> u128 {
        let scale = u128::from(NANOS_PER_SEC / per_second);
        u128::from(self.whole) * scale + (u128::from(self.billionths) * scale).div_ceil(u128::from(NANOS_PER_SEC))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-06-15T12:00:00Z.
    const NOW_S: u64 = 1_749_988_800;
    const NOW: Nanos = NOW_S * NANOS_PER_SEC;
    const S: u64 = NANOS_PER_SEC;

    fn read(value: &str) -> Option<(Nanos, ResetForm)> {
        x_ratelimit_reset(value, NOW)
    }

    #[test]
    fn github_style_unix_seconds() {
        assert_eq!(read(&(NOW_S + 42).to_string()), Some((42 * S, ResetForm::UnixSeconds)));
        // Sub-second `now`: the wait is to the exact second named.
        assert_eq!(
            x_ratelimit_reset(&(NOW_S + 42).to_string(), NOW + S / 4),
            Some((41 * S + 3 * S / 4, ResetForm::UnixSeconds))
        );
        assert_eq!(read(&format!("{}.25", NOW_S + 1)), Some((S + S / 4, ResetForm::UnixSeconds)));
    }

    #[test]
    fn deltas_with_and_without_fractions() {
        assert_eq!(read("0"), Some((0, ResetForm::DeltaSeconds)));
        assert_eq!(read("60"), Some((60 * S, ResetForm::DeltaSeconds)));
        assert_eq!(read(" 1.5\t"), Some((S + S / 2, ResetForm::DeltaSeconds)));
        assert_eq!(read("0.000000001"), Some((1, ResetForm::DeltaSeconds)));
        assert_eq!(read("0.0000000001"), Some((1, ResetForm::DeltaSeconds)), "beyond nanoseconds rounds up");
        assert_eq!(read("2.5000000000000"), Some((2 * S + S / 2, ResetForm::DeltaSeconds)), "trailing zeros are exact");
        assert_eq!(read("0007"), Some((7 * S, ResetForm::DeltaSeconds)));
    }

    #[test]
    fn unix_milliseconds() {
        let ms = (NOW_S + 3) * 1_000 + 250;
        assert_eq!(read(&ms.to_string()), Some((3 * S + S / 4, ResetForm::UnixMillis)));
        assert_eq!(read(&format!("{ms}.5")), Some((3 * S + S / 4 + 500_000, ResetForm::UnixMillis)));
        assert_eq!(read(&format!("{ms}.0000001")), Some((3 * S + S / 4 + 1, ResetForm::UnixMillis)), "rounded up");
        assert_eq!(read(&((NOW_S - 3) * 1_000).to_string()), Some((0, ResetForm::UnixMillis)), "past: now");
    }

    #[test]
    fn the_bounds_between_the_forms() {
        let below_epoch_bound = (UNIX_SECONDS_FROM - 1).to_string();
        assert_eq!(read(&below_epoch_bound), Some(((UNIX_SECONDS_FROM - 1) * S, ResetForm::DeltaSeconds)));
        assert_eq!(read(&format!("{below_epoch_bound}.9")).map(|r| r.1), Some(ResetForm::DeltaSeconds));
        // 10^9 is a date in 2001: long past, so "now".
        assert_eq!(read(&UNIX_SECONDS_FROM.to_string()), Some((0, ResetForm::UnixSeconds)));
        // The last second-valued date (the year 5138) and the first millisecond one (1973).
        // Both are over 3000 years away: more nanoseconds than 64 bits hold, so they saturate.
        assert_eq!(read(&(UNIX_MILLIS_FROM - 1).to_string()), Some((u64::MAX, ResetForm::UnixSeconds)));
        assert_eq!(read(&UNIX_MILLIS_FROM.to_string()), Some((0, ResetForm::UnixMillis)));
        assert_eq!(read(&(IGNORED_FROM - 1).to_string()), Some((u64::MAX, ResetForm::UnixMillis)));
        assert_eq!(read(&IGNORED_FROM.to_string()), None);
        assert_eq!(read(&"9".repeat(40)), None, "absurdly long values are ignored, not wrapped");
    }

    #[test]
    fn far_future_dates_saturate_instead_of_overflowing() {
        // 9 * 10^10 s is about 2850 years away: more nanoseconds than 64 bits hold.
        assert_eq!(read("90000000000"), Some((u64::MAX, ResetForm::UnixSeconds)));
        // A year away fits and is reported as it is; the policy decides not to wait that long.
        let year = 365 * 86_400;
        assert_eq!(read(&(NOW_S + year).to_string()), Some((year * S, ResetForm::UnixSeconds)));
    }

    #[test]
    fn a_clock_near_the_epoch_still_reads_deltas() {
        // A simulation at t = 50 s: a delta of 30 is 30 s, not a date 20 s ago.
        assert_eq!(x_ratelimit_reset("30", 50 * S), Some((30 * S, ResetForm::DeltaSeconds)));
    }

    #[test]
    fn values_outside_the_grammar_are_ignored() {
        for bad in
            ["", " ", "-5", "+5", "5.", ".5", "1..5", "1.5.2", "1e3", "0x10", "5s", "30, 40", "1 2", "١٢", "NaN", "inf"]
        {
            assert_eq!(read(bad), None, "{bad:?}");
        }
    }
}
