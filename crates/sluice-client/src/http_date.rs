//! HTTP-date (RFC 9110 §5.6.7) in the three formats a recipient must accept.
//!
//! - IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT` (the only one senders may generate);
//! - the obsolete RFC 850 form: `Sunday, 06-Nov-94 08:49:37 GMT`, with a two-digit year;
//! - ANSI C's asctime form: `Sun Nov  6 08:49:37 1994` (GMT implied).
//!
//! The grammar is followed exactly: HTTP-date is case-sensitive and has no extra whitespace.
//! The day name must be a valid one but is not checked against the date (the grammar does not
//! ask for that). A second of 60 (a leap second) is accepted and counts as the next second.
//!
//! A two-digit year is read as RFC 9110 requires: a timestamp that would be more than 50 years in
//! the future is taken to be in the most recent past year with the same last two digits. So the
//! year chosen is the latest one with those digits whose timestamp is at most 50 years after
//! `now`.

use sluice_core::calendar::{civil_from_days, days_from_civil, days_in_month};
const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const DAY_NAMES_LONG: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// A broken-down UTC time: (year, month 1..=12, day, hour, minute, second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl Civil {
    /// Seconds since the Unix epoch (negative before 1970).
    pub fn unix_seconds(&self) -> i64 {
        let days = days_from_civil(self.year, self.month, self.day);
        days * 86_400 + i64::from(self.hour) * 3_600 + i64::from(self.minute) * 60 + i64::from(self.second)
    }

    /// The broken-down form of `secs` since the Unix epoch.
    pub fn from_unix_seconds(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rest = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        // `rest` is in 0..86_400, so these casts are lossless.
        Civil {
            year,
            month,
            day,
            hour: (rest / 3_600) as u32,
            minute: (rest % 3_600 / 60) as u32,
            second: (rest % 60) as u32,
        }
    }

    fn is_valid(&self) -> bool {
        (1..=12).contains(&self.month)
            && self.day >= 1
            && self.day <= days_in_month(self.year, self.month)
            && self.hour <= 23
            && self.minute <= 59
            && self.second <= 60
    }
}

/// A cursor over the bytes of a header value.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn literal(&mut self, lit: &str) -> Option<()> {
        self.rest = self.rest.strip_prefix(lit.as_bytes())?;
        Some(())
    }

    /// Exactly `n` ASCII digits.
    fn digits(&mut self, n: usize) -> Option<u32> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        let mut v = 0u32;
        for &b in head {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u32::from(b - b'0');
        }
        self.rest = tail;
        Some(v)
    }

    /// One of `names`; returns its index. Names are matched whole and case-sensitively.
    fn one_of(&mut self, names: &[&str]) -> Option<usize> {
        let i = names.iter().position(|n| self.rest.starts_with(n.as_bytes()))?;
        self.rest = &self.rest[names[i].len()..];
        Some(i)
    }

    /// `hour ":" minute ":" second`.
    fn time_of_day(&mut self) -> Option<(u32, u32, u32)> {
        let h = self.digits(2)?;
        self.literal(":")?;
        let m = self.digits(2)?;
        self.literal(":")?;
        let s = self.digits(2)?;
        Some((h, m, s))
    }

    fn at_end(&self) -> bool {
        self.rest.is_empty()
    }
}

/// Parses an HTTP-date in any of the three formats into seconds since the Unix epoch.
///
/// `now_unix` (seconds since the Unix epoch) is only used to place a two-digit year. Returns
/// `None` for anything that is not exactly one of the three formats or names an impossible date.
pub(crate) fn parse_http_date(value: &str, now_unix: i64) -> Option<i64> {
    let civil = imf_fixdate(value).or_else(|| rfc850_date(value, now_unix)).or_else(|| asctime_date(value))?;
    civil.is_valid().then(|| civil.unix_seconds())
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn imf_fixdate(value: &str) -> Option<Civil> {
    let mut c = Cursor { rest: value.as_bytes() };
    c.one_of(&DAY_NAMES)?;
    c.literal(", ")?;
    let day = c.digits(2)?;
    c.literal(" ")?;
    let month = c.one_of(&MONTHS)? as u32 + 1;
    c.literal(" ")?;
    let year = i64::from(c.digits(4)?);
    c.literal(" ")?;
    let (hour, minute, second) = c.time_of_day()?;
    c.literal(" GMT")?;
    c.at_end().then_some(Civil { year, month, day, hour, minute, second })
}

/// `Sunday, 06-Nov-94 08:49:37 GMT`
fn rfc850_date(value: &str, now_unix: i64) -> Option<Civil> {
    let mut c = Cursor { rest: value.as_bytes() };
    c.one_of(&DAY_NAMES_LONG)?;
    c.literal(", ")?;
    let day = c.digits(2)?;
    c.literal("-")?;
    let month = c.one_of(&MONTHS)? as u32 + 1;
    c.literal("-")?;
    let two_digit_year = c.digits(2)?;
    c.literal(" ")?;
    let (hour, minute, second) = c.time_of_day()?;
    c.literal(" GMT")?;
    if !c.at_end() {
        return None;
    }
    let mut civil = Civil { year: 0, month, day, hour, minute, second };
    civil.year = resolve_two_digit_year(two_digit_year, &civil, now_unix);
    Some(civil)
}

/// The latest year ending in `yy` whose timestamp (`rest` gives month, day and time) is no more
/// than 50 years after `now_unix`.
fn resolve_two_digit_year(yy: u32, rest: &Civil, now_unix: i64) -> i64 {
    let now = Civil::from_unix_seconds(now_unix);
    let limit_year = now.year + 50;
    let mut year = limit_year - (limit_year - i64::from(yy)).rem_euclid(100);
    if year == limit_year {
        let candidate = (rest.month, rest.day, rest.hour, rest.minute, rest.second);
        let limit = (now.month, now.day, now.hour, now.minute, now.second);
        if candidate > limit {
            year -= 100;
        }
    }
    year
}

/// `Sun Nov  6 08:49:37 1994` (or `Sun Nov 06 ...`)
fn asctime_date(value: &str) -> Option<Civil> {
    let mut c = Cursor { rest: value.as_bytes() };
    c.one_of(&DAY_NAMES)?;
    c.literal(" ")?;
    let month = c.one_of(&MONTHS)? as u32 + 1;
    c.literal(" ")?;
    let day = if c.literal(" ").is_some() { c.digits(1)? } else { c.digits(2)? };
    c.literal(" ")?;
    let (hour, minute, second) = c.time_of_day()?;
    c.literal(" ")?;
    let year = i64::from(c.digits(4)?);
    c.at_end().then_some(Civil { year, month, day, hour, minute, second })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-06-15T12:00:00Z
    const NOW: i64 = 1_749_988_800;
    /// 1994-11-06T08:49:37Z, the RFC's example.
    const EXAMPLE: i64 = 784_111_777;

    #[test]
    fn the_three_formats_of_the_rfc_example_agree() {
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", NOW), Some(EXAMPLE));
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", NOW), Some(EXAMPLE));
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994", NOW), Some(EXAMPLE));
        assert_eq!(parse_http_date("Sun Nov 06 08:49:37 1994", NOW), Some(EXAMPLE));
    }

    #[test]
    fn calendar_round_trips_and_knows_leap_years() {
        assert_eq!(Civil::from_unix_seconds(NOW).unix_seconds(), NOW);
        assert_eq!(Civil::from_unix_seconds(0), Civil { year: 1970, month: 1, day: 1, hour: 0, minute: 0, second: 0 });
        assert_eq!(Civil::from_unix_seconds(-1).year, 1969);
        assert_eq!(parse_http_date("Tue, 29 Feb 2000 00:00:00 GMT", NOW), Some(951_782_400));
        assert_eq!(parse_http_date("Thu, 29 Feb 1900 00:00:00 GMT", NOW), None);
        assert_eq!(parse_http_date("Sat, 29 Feb 2100 00:00:00 GMT", NOW), None);
        assert_eq!(parse_http_date("Thu, 31 Apr 2025 00:00:00 GMT", NOW), None);
        for days in [-800_000i64, -1, 0, 59, 60, 365, 10_957, 11_016, 2_932_896] {
            let c = Civil::from_unix_seconds(days * 86_400);
            assert_eq!(days_from_civil(c.year, c.month, c.day), days);
        }
    }

    #[test]
    fn leap_second_counts_as_the_next_second() {
        let leap = parse_http_date("Sat, 31 Dec 2016 23:59:60 GMT", NOW).unwrap();
        let next = parse_http_date("Sun, 01 Jan 2017 00:00:00 GMT", NOW).unwrap();
        assert_eq!(leap, next);
        assert_eq!(parse_http_date("Sat, 31 Dec 2016 23:59:61 GMT", NOW), None);
        assert_eq!(parse_http_date("Sat, 31 Dec 2016 24:00:00 GMT", NOW), None);
    }

    #[test]
    fn grammar_is_exact_and_case_sensitive() {
        for bad in [
            "sun, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 gmt",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Nov 1994 08:49:37 +0000",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT ",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Sun Nov  6 08:49:37 94",
            "Sun Nov  6 08:49:37 1994 GMT",
            "1994-11-06T08:49:37Z",
            "",
            "Sun",
        ] {
            assert_eq!(parse_http_date(bad, NOW), None, "{bad:?} should be rejected");
        }
    }

    #[test]
    fn two_digit_years_more_than_fifty_years_ahead_are_in_the_past() {
        // now is mid-2025: "75" would be 2075, exactly 50 years ahead at the same instant.
        let at =
            |yy: &str| parse_http_date(&format!("Sunday, 15-Jun-{yy} 12:00:00 GMT"), NOW).map(Civil::from_unix_seconds);
        assert_eq!(at("25").unwrap().year, 2025);
        assert_eq!(at("49").unwrap().year, 2049);
        assert_eq!(at("74").unwrap().year, 2074);
        assert_eq!(at("75").unwrap().year, 2075, "exactly 50 years ahead is not more than 50");
        assert_eq!(at("76").unwrap().year, 1976);
        assert_eq!(at("99").unwrap().year, 1999);
        assert_eq!(at("00").unwrap().year, 2000);
        // One second past the 50-year mark falls back a century.
        let just_over = parse_http_date("Sunday, 15-Jun-75 12:00:01 GMT", NOW).unwrap();
        assert_eq!(Civil::from_unix_seconds(just_over).year, 1975);
        // Late in a century, small two-digit years belong to the next one.
        let now_2090 = Civil { year: 2090, month: 1, day: 1, hour: 0, minute: 0, second: 0 }.unix_seconds();
        let y = parse_http_date("Monday, 01-Jan-10 00:00:00 GMT", now_2090).unwrap();
        assert_eq!(Civil::from_unix_seconds(y).year, 2110);
    }
}
