//! The times access logs write, read exactly into Unix nanoseconds, and written back as
//! RFC 3339 in UTC for reports.
//!
//! - Common and combined logs: `10/Oct/2000:13:55:36 -0700` (nginx `$time_local`, Apache `%t`),
//!   to the second, with its zone.
//! - RFC 3339: `2000-10-10T20:55:36Z`, `2000-10-10T13:55:36.250-07:00` (nginx
//!   `$time_iso8601`), fractions to the nanosecond (finer digits are dropped).
//! - Unix seconds with an optional fraction: `971211336.25` (nginx `$msec`), read digit by digit
//!   like every decimal time in the simulator.
//!
//! ```
//! use sluice_sim::{format_rfc3339, parse_clf_time, parse_log_time};
//! let t = parse_clf_time(b"10/Oct/2000:13:55:36 -0700").unwrap();
//! assert_eq!(t, 971_211_336_000_000_000);
//! assert_eq!(format_rfc3339(t), "2000-10-10T20:55:36Z");
//! assert_eq!(parse_log_time("2000-10-10T13:55:36.25-07:00").unwrap(), t + 250_000_000);
//! assert_eq!(parse_log_time("971211336.25").unwrap(), t + 250_000_000);
//! ```

use sluice_core::calendar::{civil_from_days, days_from_civil, days_in_month};
use sluice_core::{NANOS_PER_SEC, Nanos};
use thiserror::Error;

use crate::decimal::parse_seconds;

/// The last second a log time may name, 2554-07-21T23:34:32Z: the end of 64-bit nanoseconds
/// since 1970, sluice's time. A larger Unix time is milliseconds or microseconds written where
/// seconds were expected.
pub const MAX_UNIX_SECONDS: u64 = u64::MAX / NANOS_PER_SEC - 1;

const MONTHS: [&[u8; 3]; 12] =
    [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];

/// Why a log time could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimeError {
    /// Not in the expected shape.
    #[error("`{text}` is not a time like {expected}")]
    Shape {
        /// The text (cut to 40 bytes).
        text: String,
        /// An example of the expected shape.
        expected: &'static str,
    },
    /// A field out of range (month 13, 31 April, hour 24, zone +25:00).
    #[error("`{text}`: {field} out of range")]
    Range {
        /// The text (cut to 40 bytes).
        text: String,
        /// The field.
        field: &'static str,
    },
    /// Before 1970-01-01T00:00:00Z: sluice's clocks start at the Unix epoch.
    #[error("`{0}` is before 1970")]
    BeforeEpoch(String),
    /// After [`MAX_UNIX_SECONDS`] (a Unix time in milliseconds, say).
    #[error("`{0}` is after 2554, the end of sluice's time (Unix seconds were expected: milliseconds?)")]
    TooLate(String),
}

fn cut(text: &[u8]) -> String {
    String::from_utf8_lossy(&text[..text.len().min(40)]).into_owned()
}

/// The value of the ASCII digits `d`, or `None` when one is not a digit.
fn digits(d: &[u8]) -> Option<u32> {
    d.iter().try_fold(0u32, |acc, &b| b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0')))
}

/// A calendar time and its offset east of UTC, checked and turned into Unix nanoseconds.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    /// 0 to 60: a leap second counts as the first second of the next minute.
    second: u32,
    nanos: u32,
    offset_seconds: i64,
}

impl Civil {
    fn to_unix(&self, text: &[u8]) -> Result<Nanos, TimeError> {
        let range = |field| TimeError::Range { text: cut(text), field };
        if !(1..=12).contains(&self.month) {
            return Err(range("month"));
        }
        if self.day == 0 || self.day > days_in_month(self.year, self.month) {
            return Err(range("day"));
        }
        if self.hour > 23 {
            return Err(range("hour"));
        }
        if self.minute > 59 {
            return Err(range("minute"));
        }
        if self.second > 60 {
            return Err(range("second"));
        }
        let days = days_from_civil(self.year, self.month, self.day);
        let secs = days * 86_400 + i64::from(self.hour) * 3_600 + i64::from(self.minute) * 60 + i64::from(self.second)
            - self.offset_seconds;
        if secs < 0 {
            return Err(TimeError::BeforeEpoch(cut(text)));
        }
        if secs as u64 > MAX_UNIX_SECONDS {
            return Err(TimeError::TooLate(cut(text)));
        }
        Ok(secs as u64 * NANOS_PER_SEC + u64::from(self.nanos))
    }
}

/// Reads the time of a common or combined log line, without its brackets:
/// `dd/Mon/yyyy:HH:MM:SS ±hhmm`, English month abbreviations as Apache and nginx write them.
///
/// ```
/// use sluice_sim::parse_clf_time;
/// assert_eq!(parse_clf_time(b"01/Jan/1970:00:00:00 +0000").unwrap(), 0);
/// assert_eq!(parse_clf_time(b"01/Jan/1970:01:00:01 +0100").unwrap(), 1_000_000_000);
/// assert!(parse_clf_time(b"31/Apr/2024:00:00:00 +0000").is_err());
/// ```
pub fn parse_clf_time(text: &[u8]) -> Result<Nanos, TimeError> {
    let shape = || TimeError::Shape { text: cut(text), expected: "10/Oct/2000:13:55:36 -0700" };
    if text.len() != 26
        || text[2] != b'/'
        || text[6] != b'/'
        || text[11] != b':'
        || text[14] != b':'
        || text[17] != b':'
        || text[20] != b' '
    {
        return Err(shape());
    }
    let month = MONTHS.iter().position(|m| m[..] == text[3..6]).ok_or_else(shape)? as u32 + 1;
    let num = |r: std::ops::Range<usize>| digits(&text[r]).ok_or_else(shape);
    let sign = match text[21] {
        b'+' => 1,
        b'-' => -1,
        _ => return Err(shape()),
    };
    let (zone_hours, zone_minutes) = (num(22..24)?, num(24..26)?);
    if zone_hours > 23 || zone_minutes > 59 {
        return Err(TimeError::Range { text: cut(text), field: "zone" });
    }
    Civil {
        year: i64::from(num(7..11)?),
        month,
        day: num(0..2)?,
        hour: num(12..14)?,
        minute: num(15..17)?,
        second: num(18..20)?,
        nanos: 0,
        offset_seconds: sign * i64::from(zone_hours * 3_600 + zone_minutes * 60),
    }
    .to_unix(text)
}

/// Reads an RFC 3339 time: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`; `t`, `z` and a space
/// for the `T` are accepted, as RFC 3339 allows. Fractions beyond nanoseconds are dropped.
pub fn parse_rfc3339(text: &[u8]) -> Result<Nanos, TimeError> {
    let shape = || TimeError::Shape { text: cut(text), expected: "2000-10-10T20:55:36Z" };
    if text.len() < 20
        || text[4] != b'-'
        || text[7] != b'-'
        || !matches!(text[10], b'T' | b't' | b' ')
        || text[13] != b':'
        || text[16] != b':'
    {
        return Err(shape());
    }
    let num = |r: std::ops::Range<usize>| digits(&text[r]).ok_or_else(shape);
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return Err(shape());
        }
        for i in 0..9 {
            nanos = nanos * 10 + frac.get(i).filter(|_| i < n).map_or(0, |b| u32::from(b - b'0'));
        }
        rest = &frac[n..];
    }
    let offset_seconds = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = digits(&[*h1, *h2]).ok_or_else(shape)?;
            let minutes = digits(&[*m1, *m2]).ok_or_else(shape)?;
            if hours > 23 || minutes > 59 {
                return Err(TimeError::Range { text: cut(text), field: "zone" });
            }
            let s = i64::from(hours * 3_600 + minutes * 60);
            if *sign == b'-' { -s } else { s }
        }
        _ => return Err(shape()),
    };
    Civil {
        year: i64::from(num(0..4)?),
        month: num(5..7)?,
        day: num(8..10)?,
        hour: num(11..13)?,
        minute: num(14..16)?,
        second: num(17..19)?,
        nanos,
        offset_seconds,
    }
    .to_unix(text)
}

/// Reads Unix seconds with an optional decimal fraction (`971211336`, `971211336.250`),
/// exactly.
pub fn parse_unix_seconds(text: &str) -> Result<Nanos, TimeError> {
    let shape = || TimeError::Shape { text: cut(text.as_bytes()), expected: "971211336.25 (Unix seconds)" };
    if !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(shape());
    }
    let whole = text.split('.').next().unwrap_or("");
    if whole.len() > 12 || whole.parse::<u64>().is_ok_and(|w| w > MAX_UNIX_SECONDS) {
        return Err(TimeError::TooLate(cut(text.as_bytes())));
    }
    parse_seconds(text).map_err(|_| shape())
}

/// Reads any of the three forms, told apart by their shape: a `/` makes a common log time, a
/// `-` an RFC 3339 time, digits alone (with a fraction) Unix seconds.
pub fn parse_log_time(text: &str) -> Result<Nanos, TimeError> {
    let b = text.as_bytes();
    if b.len() == 26 && b.get(2) == Some(&b'/') {
        parse_clf_time(b)
    } else if b.get(4) == Some(&b'-') {
        parse_rfc3339(b)
    } else {
        parse_unix_seconds(text)
    }
}

/// Writes Unix nanoseconds as RFC 3339 in UTC: `2000-10-10T20:55:36Z`, with the fraction of a
/// second only when there is one (`2000-10-10T20:55:36.25Z`).
pub fn format_rfc3339(at: Nanos) -> String {
    let secs = at / NANOS_PER_SEC;
    let nanos = at % NANOS_PER_SEC;
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let s = secs % 86_400;
    let mut out = format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", s / 3_600, s % 3_600 / 60, s % 60);
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_apache_example_is_read_to_the_second_with_its_zone() {
        let t = parse_clf_time(b"10/Oct/2000:13:55:36 -0700").unwrap();
        assert_eq!(t, 971_211_336 * NANOS_PER_SEC);
        assert_eq!(parse_clf_time(b"10/Oct/2000:20:55:36 +0000").unwrap(), t);
        assert_eq!(parse_clf_time(b"11/Oct/2000:02:25:36 +0530").unwrap(), t);
        // A leap day, and the last second of a year.
        assert_eq!(format_rfc3339(parse_clf_time(b"29/Feb/2024:12:00:00 +0000").unwrap()), "2024-02-29T12:00:00Z");
        assert_eq!(format_rfc3339(parse_clf_time(b"31/Dec/1999:23:59:59 +0000").unwrap()), "1999-12-31T23:59:59Z");
    }

    #[test]
    fn bad_common_log_times_are_refused() {
        for bad in [
            "10/Oct/2000:13:55:36",
            "10/oct/2000:13:55:36 -0700",
            "1/Oct/2000:13:55:36 -0700x",
            "10/Oct/2000 13:55:36 -0700",
            "10/Oct/2000:13:55:36 0700 ",
            "aa/Oct/2000:13:55:36 -0700",
        ] {
            assert!(matches!(parse_clf_time(bad.as_bytes()), Err(TimeError::Shape { .. })), "{bad}");
        }
        for (bad, field) in [
            ("29/Feb/2023:00:00:00 +0000", "day"),
            ("00/Jan/2023:00:00:00 +0000", "day"),
            ("01/Jan/2023:24:00:00 +0000", "hour"),
            ("01/Jan/2023:00:60:00 +0000", "minute"),
            ("01/Jan/2023:00:00:61 +0000", "second"),
            ("01/Jan/2023:00:00:00 +2400", "zone"),
        ] {
            assert_eq!(parse_clf_time(bad.as_bytes()), Err(TimeError::Range { text: bad.into(), field }), "{bad}");
        }
        assert!(matches!(parse_clf_time(b"01/Jan/1970:00:00:00 +0100"), Err(TimeError::BeforeEpoch(_))));
    }

    #[test]
    fn rfc3339_fractions_and_zones() {
        let t = 971_211_336 * NANOS_PER_SEC;
        assert_eq!(parse_rfc3339(b"2000-10-10T20:55:36Z").unwrap(), t);
        assert_eq!(parse_rfc3339(b"2000-10-10t20:55:36z").unwrap(), t);
        assert_eq!(parse_rfc3339(b"2000-10-10 13:55:36-07:00").unwrap(), t);
        assert_eq!(parse_rfc3339(b"2000-10-10T20:55:36.5Z").unwrap(), t + 500_000_000);
        assert_eq!(parse_rfc3339(b"2000-10-10T20:55:36.123456789Z").unwrap(), t + 123_456_789);
        assert_eq!(parse_rfc3339(b"2000-10-10T20:55:36.1234567899Z").unwrap(), t + 123_456_789);
        for bad in ["2000-10-10T20:55:36", "2000-10-10T20:55:36.Z", "2000-10-10T20:55:36+0700", "2000/10/10T20:55:36Z"]
        {
            assert!(parse_rfc3339(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn unix_seconds_are_exact_and_milliseconds_are_caught() {
        assert_eq!(parse_unix_seconds("971211336.25").unwrap(), 971_211_336_250_000_000);
        assert_eq!(parse_unix_seconds("0").unwrap(), 0);
        assert!(matches!(parse_unix_seconds("971211336250"), Err(TimeError::TooLate(_))));
        assert!(matches!(parse_unix_seconds("-5"), Err(TimeError::Shape { .. })));
        assert!(matches!(parse_unix_seconds("1e9"), Err(TimeError::Shape { .. })));
        assert_eq!(parse_log_time("971211336").unwrap(), 971_211_336 * NANOS_PER_SEC);
        assert_eq!(parse_log_time("10/Oct/2000:13:55:36 -0700").unwrap(), 971_211_336 * NANOS_PER_SEC);
        assert!(parse_log_time("yesterday").is_err());
    }

    #[test]
    fn rfc3339_output_trims_the_fraction() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_250_000_000), "1970-01-01T00:00:01.25Z");
        assert_eq!(format_rfc3339(MAX_UNIX_SECONDS * NANOS_PER_SEC), "2554-07-21T23:34:32Z");
        assert!(matches!(parse_rfc3339(b"2554-07-21T23:34:33Z"), Err(TimeError::TooLate(_))));
        assert!(parse_rfc3339(b"2554-07-21T23:34:32.999999999Z").is_ok());
    }

    proptest! {
        #[test]
        fn formatted_times_read_back(at in 0u64..MAX_UNIX_SECONDS * NANOS_PER_SEC) {
            prop_assert_eq!(parse_rfc3339(format_rfc3339(at).as_bytes()).unwrap(), at);
        }

        #[test]
        fn civil_dates_round_trip(days in 0i64..2_932_896) {
            let (y, m, d) = civil_from_days(days);
            prop_assert!(d >= 1 && d <= days_in_month(y, m));
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn arbitrary_text_never_panics(text in ".{0,40}") {
            let _ = parse_log_time(&text);
            let _ = parse_clf_time(text.as_bytes());
            let _ = parse_rfc3339(text.as_bytes());
        }
    }
}
