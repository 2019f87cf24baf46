//! Exact decimal times: `12.5`, `0.25`, `1e-3` seconds, the instants of an arrivals file.
//! (Durations, `30s` or `500ms`, are read by [`sluice_core::parse_duration`].)
//!
//! Decimals are read digit by digit into whole nanoseconds, never through a binary float, so
//! `0.1` is exactly 100 000 000 ns. Digits finer than a nanosecond are rounded to the nearest
//! nanosecond (halves round up).

use sluice_core::{NANOS_PER_SEC, Nanos};
use thiserror::Error;

/// Why a time could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecimalError {
    /// Not a non-negative decimal number.
    #[error("`{0}` is not a non-negative decimal number")]
    Malformed(String),
    /// Too large for 64-bit nanoseconds (about 584 years).
    #[error("`{0}` is too large: the limit is about 584 years in nanoseconds")]
    TooLarge(String),
}

/// Reads a non-negative decimal number of seconds (`12`, `0.25`, `.5`, `3.`, `1e-3`, `2.5E2`)
/// into nanoseconds, exactly, rounding digits below one nanosecond to the nearest.
///
/// ```
/// use sluice_sim::parse_seconds;
/// assert_eq!(parse_seconds("0.1").unwrap(), 100_000_000);
/// assert_eq!(parse_seconds("1e-9").unwrap(), 1);
/// assert_eq!(parse_seconds("2.0000000005").unwrap(), 2_000_000_001);
/// assert!(parse_seconds("-1").is_err());
/// ```
pub fn parse_seconds(text: &str) -> Result<Nanos, DecimalError> {
    parse_scaled(text, 9)
}

/// Reads a decimal number and multiplies it by `10^scale`, exactly, rounding to the nearest
/// integer (halves up).
fn parse_scaled(text: &str, scale: i64) -> Result<u64, DecimalError> {
    let malformed = || DecimalError::Malformed(text.to_string());
    let s = text.strip_prefix('+').unwrap_or(text);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, ""),
    };
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int_part.is_empty() && frac_part.is_empty() || !all_digits(int_part) || !all_digits(frac_part) {
        return Err(malformed());
    }
    let exp: i64 = match exponent {
        None => 0,
        Some(e) => {
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !all_digits(digits) {
                return Err(malformed());
            }
            // Anything beyond a few dozen digits either overflows or rounds to zero anyway.
            let significant = digits.trim_start_matches('0');
            let magnitude: i64 =
                if significant.is_empty() { 0 } else { significant.parse::<i64>().map_or(1_000, |v| v.min(1_000)) };
            if e.starts_with('-') { -magnitude } else { magnitude }
        }
    };
    // The number is 0.DIGITS * 10^point, with DIGITS the mantissa's digits without leading zeros.
    let digits: String = format!("{int_part}{frac_part}");
    let trimmed = digits.trim_start_matches('0');
    if trimmed.is_empty() {
        return Ok(0);
    }
    let leading_zeros = (digits.len() - trimmed.len()) as i64;
    let point = int_part.len() as i64 - leading_zeros + exp + scale;
    if point > 20 {
        return Err(DecimalError::TooLarge(text.to_string()));
    }
    let bytes = trimmed.as_bytes();
    let mut value: u128 = 0;
    for i in 0..point.max(0) {
        let d = bytes.get(i as usize).map_or(0, |b| b - b'0');
        value = value * 10 + d as u128;
    }
    let round_digit = if point >= 0 { bytes.get(point as usize).map_or(0, |b| b - b'0') } else { 0 };
    if round_digit >= 5 {
        value += 1;
    }
    u64::try_from(value).map_err(|_| DecimalError::TooLarge(text.to_string()))
}

/// Writes nanoseconds as seconds with all nine decimals: `1.500000000`.
pub fn format_seconds(ns: Nanos) -> String {
    format!("{}.{:09}", ns / NANOS_PER_SEC, ns % NANOS_PER_SEC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seconds_are_read_exactly() {
        assert_eq!(parse_seconds("0").unwrap(), 0);
        assert_eq!(parse_seconds("12").unwrap(), 12 * NANOS_PER_SEC);
        assert_eq!(parse_seconds(".5").unwrap(), 500_000_000);
        assert_eq!(parse_seconds("3.").unwrap(), 3 * NANOS_PER_SEC);
        assert_eq!(parse_seconds("+1.25").unwrap(), 1_250_000_000);
        assert_eq!(parse_seconds("0.123456789").unwrap(), 123_456_789);
        assert_eq!(parse_seconds("0.1234567894").unwrap(), 123_456_789);
        assert_eq!(parse_seconds("0.1234567895").unwrap(), 123_456_790);
        assert_eq!(parse_seconds("1e-05").unwrap(), 10_000);
        assert_eq!(parse_seconds("2.5E2").unwrap(), 250 * NANOS_PER_SEC);
        assert_eq!(parse_seconds("0000.0001").unwrap(), 100_000);
        assert_eq!(parse_seconds("1e-400").unwrap(), 0);
        assert_eq!(parse_seconds("3e0").unwrap(), 3 * NANOS_PER_SEC);
        assert_eq!(parse_seconds("3e-000").unwrap(), 3 * NANOS_PER_SEC);
        assert_eq!(parse_seconds("5e-10").unwrap(), 1);
        assert_eq!(parse_seconds("4e-10").unwrap(), 0);
        // Python's repr of a float keeps 17 significant digits.
        assert_eq!(parse_seconds("12.345678901234567").unwrap(), 12_345_678_901);
        assert_eq!(parse_seconds("18446744073.709551615").unwrap(), u64::MAX);
    }

    #[test]
    fn bad_numbers_are_refused() {
        for bad in ["", ".", "-1", "1,5", "abc", "1e", "1e+", "nan", "inf", "1..2", "0x10", " 1", "1 "] {
            assert!(matches!(parse_seconds(bad), Err(DecimalError::Malformed(_))), "{bad:?}");
        }
        for big in ["18446744073.709551616", "1e20", "1e999999999999"] {
            assert!(matches!(parse_seconds(big), Err(DecimalError::TooLarge(_))), "{big:?}");
        }
    }

    #[test]
    fn seconds_print_with_nine_decimals() {
        assert_eq!(format_seconds(1_500_000_000), "1.500000000");
        assert_eq!(format_seconds(0), "0.000000000");
    }

    proptest! {
        #[test]
        fn printed_seconds_read_back_exactly(ns in any::<u64>()) {
            prop_assert_eq!(parse_seconds(&format_seconds(ns)).unwrap(), ns);
        }
    }
}
