//! Durations as people write them, for every part of sluice: `500ms`, `30s`, `1.5h`, `1d`.
//!
//! A duration is a non-negative decimal number followed by a unit, with nothing in between:
//! `ns`, `us` (or `µs`), `ms`, `s`, `m` (or `min`), `h`, `d`. A bare number is refused, so that
//! `30` is never silently read as seconds where milliseconds were meant. The number is read
//! digit by digit, never through a binary float, so `0.1s` is exactly 100 000 000 ns; digits
//! finer than a nanosecond are rounded to the nearest (halves up). A duration beyond `u64`
//! nanoseconds (about 584 years) is an error, never a wrapped or saturated value.
//!
//! ```
//! use sluice_core::{format_duration, parse_duration, NANOS_PER_SEC};
//!
//! assert_eq!(parse_duration("500ms").unwrap(), 500_000_000);
//! assert_eq!(parse_duration("1.5h").unwrap(), 5_400 * NANOS_PER_SEC);
//! assert_eq!(parse_duration("1d").unwrap(), 86_400 * NANOS_PER_SEC);
//! assert_eq!(parse_duration("30").unwrap_err().to_string(), "`30` has no unit: write e.g. `30s`");
//! assert_eq!(format_duration(1_500_000_000), "1.5s");
//! assert_eq!(format_duration(900 * NANOS_PER_SEC), "15m");
//! ```

use thiserror::Error;

use crate::time::{NANOS_PER_SEC, Nanos};

const MINUTE: u64 = 60 * NANOS_PER_SEC;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// The units, with the nanoseconds in one of each, largest first.
const UNITS: [(&str, u64); 9] = [
    ("d", DAY),
    ("h", HOUR),
    ("min", MINUTE),
    ("m", MINUTE),
    ("s", NANOS_PER_SEC),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("µs", 1_000),
    ("ns", 1),
];

/// Why a duration could not be read. Each message quotes the text and says what to write.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// A number with no unit after it.
    #[error("`{0}` has no unit: write e.g. `{0}s`")]
    NoUnit(String),
    /// A number followed by something that is not a unit.
    #[error("`{text}`: unknown unit `{unit}` (use ns, us, µs, ms, s, m, min, h or d)")]
    UnknownUnit {
        /// The whole text.
        text: String,
        /// What follows the number.
        unit: String,
    },
    /// Not a decimal number followed by a unit.
    #[error("`{0}` is not a duration: write a number followed by a unit, e.g. `500ms`, `30s`, `15m`, `1d`")]
    Malformed(String),
    /// More nanoseconds than 64 bits hold.
    #[error("`{0}` is too large: a duration is at most about 584 years")]
    TooLarge(String),
}

/// Reads a duration: a decimal number and a unit (see the [module documentation](self)).
/// Whitespace around the whole text is ignored; whitespace inside it is not allowed.
///
/// ```
/// use sluice_core::{parse_duration, DurationError};
/// assert_eq!(parse_duration("250us"), Ok(250_000));
/// assert_eq!(parse_duration("0.0000000015s"), Ok(2));
/// assert!(matches!(parse_duration("3 weeks"), Err(DurationError::Malformed(_))));
/// assert!(matches!(parse_duration("99999999999d"), Err(DurationError::TooLarge(_))));
/// ```
pub fn parse_duration(text: &str) -> Result<Nanos, DurationError> {
    let t = text.trim();
    let malformed = || DurationError::Malformed(t.to_string());
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return Err(malformed());
    }
    if unit.is_empty() {
        return Err(DurationError::NoUnit(t.to_string()));
    }
    if unit.contains(char::is_whitespace) {
        return Err(malformed());
    }
    let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(DurationError::UnknownUnit { text: t.to_string(), unit: unit.to_string() });
    };
    let too_large = || DurationError::TooLarge(t.to_string());
    let mut whole: u64 = 0;
    for b in int.bytes() {
        whole = whole.checked_mul(10).and_then(|w| w.checked_add(u64::from(b - b'0'))).ok_or_else(too_large)?;
    }
    let (frac_nanos, round_up) = scale_fraction(frac, scale);
    whole
        .checked_mul(scale)
        .and_then(|n| n.checked_add(frac_nanos))
        .and_then(|n| n.checked_add(u64::from(round_up)))
        .ok_or_else(too_large)
}

/// `0.DIGITS * scale`, exactly: its whole part, and whether the rest is at least one half.
///
/// The fraction is multiplied by `scale` the way it is done on paper, from the last digit to
/// the first with a carry, so any number of digits is exact. The carry out of the first digit
/// is the whole part; the first digit of the product's fraction decides the rounding.
fn scale_fraction(digits: &str, scale: u64) -> (u64, bool) {
    let mut carry: u64 = 0;
    let mut first = 0;
    for b in digits.bytes().rev() {
        // At most 9 * 8.64e13 + carry (< scale): far below u64::MAX.
        let v = u64::from(b - b'0') * scale + carry;
        first = v % 10;
        carry = v / 10;
    }
    (carry, first >= 5)
}

/// Writes a duration the short way, so that [`parse_duration`] reads back exactly the same
/// nanoseconds: the largest of `d`, `h`, `m` that divides it (`1d`, `36h`, `15m`), otherwise
/// a decimal in the largest of `s`, `ms`, `us` it reaches (`90s`, `1.5s`, `250ms`, `1.5us`),
/// otherwise nanoseconds (`7ns`). Zero is `0s`.
///
/// ```
/// use sluice_core::{format_duration, parse_duration};
/// for text in ["1d", "36h", "15m", "90s", "1.5s", "250ms", "1.5us", "7ns", "0s"] {
///     assert_eq!(format_duration(parse_duration(text).unwrap()), text);
/// }
/// ```
pub fn format_duration(n: Nanos) -> String {
    if n == 0 {
        return "0s".to_string();
    }
    for (unit, scale) in [("d", DAY), ("h", HOUR), ("m", MINUTE)] {
        if n.is_multiple_of(scale) {
            return format!("{}{unit}", n / scale);
        }
    }
    for (unit, scale, digits) in [("s", NANOS_PER_SEC, 9), ("ms", 1_000_000, 6), ("us", 1_000, 3)] {
        if n >= scale {
            let frac = format!("{:0digits$}", n % scale);
            let frac = frac.trim_end_matches('0');
            let dot = if frac.is_empty() { "" } else { "." };
            return format!("{}{dot}{frac}{unit}", n / scale);
        }
    }
    format!("{n}ns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_unit_is_read() {
        assert_eq!(parse_duration("7ns"), Ok(7));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("250µs"), Ok(250_000));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration("1s"), Ok(NANOS_PER_SEC));
        assert_eq!(parse_duration("30s"), Ok(30 * NANOS_PER_SEC));
        assert_eq!(parse_duration("15m"), Ok(900 * NANOS_PER_SEC));
        assert_eq!(parse_duration("15min"), Ok(900 * NANOS_PER_SEC));
        assert_eq!(parse_duration("2h"), Ok(7_200 * NANOS_PER_SEC));
        assert_eq!(parse_duration("1.5h"), Ok(5_400 * NANOS_PER_SEC));
        assert_eq!(parse_duration("1d"), Ok(86_400 * NANOS_PER_SEC));
        assert_eq!(parse_duration(" 10s\n"), Ok(10 * NANOS_PER_SEC));
    }

    #[test]
    fn fractions_are_exact_and_round_to_the_nearest_nanosecond() {
        assert_eq!(parse_duration("0.25s"), Ok(250_000_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration(".5s"), Ok(500_000_000));
        assert_eq!(parse_duration("3.s"), Ok(3 * NANOS_PER_SEC));
        assert_eq!(parse_duration("0.1s"), Ok(100_000_000));
        assert_eq!(parse_duration("0.1234567894s"), Ok(123_456_789));
        assert_eq!(parse_duration("0.1234567895s"), Ok(123_456_790));
        assert_eq!(parse_duration("0.4ns"), Ok(0));
        assert_eq!(parse_duration("0.5ns"), Ok(1));
        // A third of a minute is not a finite decimal of seconds; 20 s is.
        assert_eq!(parse_duration("0.33333333333333333333333333333333m"), Ok(20 * NANOS_PER_SEC));
        // Digits far below a nanosecond still decide a tie.
        assert_eq!(parse_duration("0.49999999999999999999999999999ns"), Ok(0));
        assert_eq!(parse_duration("0000.0001s"), Ok(100_000));
        assert_eq!(parse_duration("18446744073.709551615s"), Ok(u64::MAX));
    }

    #[test]
    fn bare_numbers_are_refused_with_a_hint() {
        assert_eq!(parse_duration("30"), Err(DurationError::NoUnit("30".into())));
        assert_eq!(parse_duration("10").unwrap_err().to_string(), "`10` has no unit: write e.g. `10s`");
        assert_eq!(parse_duration("2"), Err(DurationError::NoUnit("2".into())));
    }

    #[test]
    fn malformed_durations_are_refused() {
        for bad in ["", "s", "ms", ".s", "1.2.3s", "10 s", "3 weeks", "-1s", "+1s", "1e3ms", "1,5s", "0x10s", "s10"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(parse_duration("10 s"), Err(DurationError::Malformed(_))));
        assert!(matches!(parse_duration("ms"), Err(DurationError::Malformed(_))));
        assert!(matches!(parse_duration("15 minutes"), Err(DurationError::Malformed(_))));
        assert_eq!(parse_duration("3w"), Err(DurationError::UnknownUnit { text: "3w".into(), unit: "w".into() }));
        assert!(parse_duration("3w").unwrap_err().to_string().contains("use ns, us, µs, ms, s, m, min, h or d"));
        assert!(parse_duration("3 weeks").unwrap_err().to_string().contains("unit"));
    }

    #[test]
    fn overflow_is_an_error() {
        for big in ["99999999999999999999d", "18446744073.709551616s", "213504d", "1e30h", "99999999999999999999999h"] {
            assert!(parse_duration(big).is_err(), "{big:?}");
        }
        assert!(matches!(parse_duration("99999999999999999999d"), Err(DurationError::TooLarge(_))));
        assert!(matches!(parse_duration("18446744073.709551616s"), Err(DurationError::TooLarge(_))));
        assert!(matches!(parse_duration("99999999999999999999999h"), Err(DurationError::TooLarge(_))));
        assert_eq!(parse_duration("213503d"), Ok(213_503 * 86_400 * NANOS_PER_SEC));
    }

    #[test]
    fn durations_print_short() {
        assert_eq!(format_duration(NANOS_PER_SEC), "1s");
        assert_eq!(format_duration(500_000_000), "500ms");
        assert_eq!(format_duration(900 * NANOS_PER_SEC), "15m");
        assert_eq!(format_duration(1_500_000_000), "1.5s");
        assert_eq!(format_duration(86_400 * NANOS_PER_SEC), "1d");
        assert_eq!(format_duration(90 * NANOS_PER_SEC), "90s");
        assert_eq!(format_duration(1_500), "1.5us");
        assert_eq!(format_duration(999), "999ns");
        assert_eq!(format_duration(1_000_000_001), "1.000000001s");
        assert_eq!(format_duration(u64::MAX), "18446744073.709551615s");
    }

    #[test]
    fn formats_round_trip() {
        for t in ["15m", "1s", "250ms", "3h", "7ns", "1d"] {
            assert_eq!(format_duration(parse_duration(t).unwrap()), t);
        }
    }

    proptest! {
        #[test]
        fn printed_durations_read_back_exactly(ns in any::<u64>()) {
            prop_assert_eq!(parse_duration(&format_duration(ns)), Ok(ns));
        }

        #[test]
        fn whole_units_read_back_exactly(n in 0u64..200_000, unit in 0usize..UNITS.len()) {
            let (name, scale) = UNITS[unit];
            prop_assert_eq!(parse_duration(&format!("{n}{name}")), Ok(n * scale));
        }

        #[test]
        fn parsing_never_panics(text in any::<String>()) {
            let _ = parse_duration(&text);
        }

        #[test]
        fn parsing_duration_like_text_never_panics(text in "[0-9.]{0,30}(ns|us|µs|ms|s|m|min|h|d|x| s)?") {
            let _ = parse_duration(&text);
        }
    }
}
