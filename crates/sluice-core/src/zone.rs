//! Calendar windows: days, weeks, months and years as a time zone's clocks show them.
//!
//! A [`Zone`] is what the windows need of a time zone: its offset from UTC and the instants at
//! which that offset changes (daylight saving time, a region's change of standard time). It is
//! plain data; the caller reads it from a time-zone database (sluice's configuration does, with
//! jiff) and this module does the arithmetic, so that a window's bounds are decided here, the
//! same way for every store and face, without I/O.
//!
//! A window begins at the first instant whose local time is at or after local midnight of its
//! first day: where a change of offset skips midnight (a gap), the day begins when the clocks
//! jump; where midnight happens twice (a fold), at the first. A day is then 23, 24 or 25 hours
//! long, a month 28 to 31 days (± an hour), as the zone's clocks have it.
//!
//! ```
//! use sluice_core::{CalendarWindows, NANOS_PER_SEC as S, Period, Zone};
//! // Kyiv: UTC+2 in winter, UTC+3 from 2024-03-31 01:00 UTC.
//! let kyiv = Zone::new("Europe/Kyiv", 7_200, vec![(1_711_846_800, 10_800)]).unwrap().interned();
//! let days = CalendarWindows::new(Period::Day, kyiv);
//! // 2024-03-31 12:00 UTC: the day began at 00:00 local (22:00 UTC the evening before) and is
//! // 23 hours long.
//! let (start, end) = days.bounds(1_711_886_400 * S);
//! assert_eq!((start / S, end / S), (1_711_836_000, 1_711_918_800));
//! assert_eq!((end - start) / S, 23 * 3_600);
//! ```

use std::sync::{Mutex, OnceLock};

use crate::calendar::{civil_from_days, days_from_civil};
use crate::time::{NANOS_PER_SEC, Nanos};

/// The largest offset from UTC a zone may have, in seconds: 25:59:59, as RFC 9557 and the
/// time-zone database allow.
pub const MAX_OFFSET_SECS: i32 = 26 * 3_600 - 1;

const DAY_SECS: i64 = 86_400;

/// A time zone's offsets from UTC over time, as calendar windows need them.
#[derive(Clone, PartialEq, Eq)]
pub struct Zone {
    /// The zone's name (`Europe/Kyiv`, `UTC`): what configuration and status pages show.
    name: Box<str>,
    /// The offset in seconds before the first change.
    first: i32,
    /// `(Unix second, offset in seconds from then on)`, strictly increasing in time. After the
    /// last, the last offset holds for ever: a caller reads a database's rules far enough ahead.
    changes: Box<[(i64, i32)]>,
}

/// The name alone (`Zone("Europe/Kyiv")`): a policy's text names its zone, and stays the same
/// when an update of the tz database changes the zone's rules.
impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Zone").field(&self.name).finish()
    }
}

/// Hashes the name and the number of changes only: equal zones hash alike, and a policy's hash
/// does not walk a table of centuries.
impl std::hash::Hash for Zone {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.first.hash(state);
        self.changes.len().hash(state);
    }
}

/// A zone that cannot be used: a change out of order or an offset beyond ±25:59:59.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("time zone {zone}: {reason}")]
pub struct ZoneError {
    /// The zone's name.
    pub zone: String,
    /// What is wrong with it.
    pub reason: String,
}

impl Zone {
    /// A zone of `name` whose offset is `first` seconds east of UTC until the first of
    /// `changes` (Unix second, the offset from then on).
    pub fn new(name: &str, first: i32, changes: Vec<(i64, i32)>) -> Result<Self, ZoneError> {
        let bad = |reason: String| ZoneError { zone: name.to_string(), reason };
        for &offset in std::iter::once(&first).chain(changes.iter().map(|(_, o)| o)) {
            if offset.abs() > MAX_OFFSET_SECS {
                return Err(bad(format!("offset {offset} s is beyond ±25:59:59")));
            }
        }
        if let Some(w) = changes.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(bad(format!("changes out of order at Unix second {}", w[1].0)));
        }
        Ok(Self { name: name.into(), first, changes: changes.into() })
    }

    /// Coordinated Universal Time: no offset, no changes.
    pub fn utc() -> Self {
        Self { name: "UTC".into(), first: 0, changes: Box::new([]) }
    }

    /// The zone's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One shared copy of this zone for the life of the process: equal zones give the same
    /// reference, so reloading a configuration does not hold a new copy each time.
    pub fn interned(self) -> &'static Zone {
        static ZONES: OnceLock<Mutex<Vec<&'static Zone>>> = OnceLock::new();
        let mut zones = ZONES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(z) = zones.iter().find(|z| ***z == self) {
            return z;
        }
        let z: &'static Zone = Box::leak(Box::new(self));
        zones.push(z);
        z
    }

    /// The offset in force at Unix second `t`.
    pub fn offset_at(&self, t: i64) -> i32 {
        self.span(self.span_at(t)).2
    }

    /// The span of one offset that holds `t`: 0 before the first change, `i` after change `i - 1`.
    fn span_at(&self, t: i64) -> usize {
        self.changes.partition_point(|&(at, _)| at <= t)
    }

    /// Span `i`: its first Unix second, the first after it, and its offset.
    fn span(&self, i: usize) -> (i64, i64, i32) {
        let from = if i == 0 { i64::MIN } else { self.changes[i - 1].0 };
        let to = self.changes.get(i).map_or(i64::MAX, |c| c.0);
        let offset = if i == 0 { self.first } else { self.changes[i - 1].1 };
        (from, to, offset)
    }

    /// The earliest Unix second at or after `not_before` whose local time is at or after local
    /// second `local`. Within a span of one offset local time grows with UTC, so the first span
    /// that reaches `local` holds the answer; a span is at most one offset away from it.
    fn first_at_or_after(&self, local: i64, not_before: i64) -> i64 {
        let reach = i64::from(MAX_OFFSET_SECS) + 1;
        let mut i = self.span_at(not_before.max(local - reach));
        loop {
            let (from, to, offset) = self.span(i);
            let at = (local - i64::from(offset)).max(from).max(not_before);
            if at < to {
                return at;
            }
            i += 1;
        }
    }
}

/// How long a calendar window is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// From local midnight to the next.
    Day,
    /// From Monday's midnight to the next Monday's (ISO 8601 weeks).
    Week,
    /// From midnight of the month's first day to the next month's.
    Month,
    /// From midnight of 1 January to the next year's.
    Year,
}

impl Period {
    /// How configuration writes each period.
    pub const ALL_NAMES: [&'static str; 4] = ["1d", "1w", "1mo", "1y"];

    /// How configuration writes it: `1d`, `1w`, `1mo`, `1y`.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "1d",
            Period::Week => "1w",
            Period::Month => "1mo",
            Period::Year => "1y",
        }
    }

    /// The period of a configuration's window: `1d`, `1w` (or `7d`), `1mo`, `1y`.
    pub fn parse(text: &str) -> Option<Period> {
        match text.trim() {
            "1d" | "24h" => Some(Period::Day),
            "1w" | "7d" => Some(Period::Week),
            "1mo" => Some(Period::Month),
            "1y" => Some(Period::Year),
            _ => None,
        }
    }

    /// A typical length, for what needs one number (a policy's `w` in the RateLimit-Policy
    /// header, a window shown in `/config`): 1, 7, 30 and 365 days. Decisions never use it.
    pub fn nominal(self) -> Nanos {
        let days = match self {
            Period::Day => 1,
            Period::Week => 7,
            Period::Month => 30,
            Period::Year => 365,
        };
        days * DAY_SECS as u64 * NANOS_PER_SEC
    }

    /// The first local day of the period that holds local day `day`, and of the next one.
    fn days_around(self, day: i64) -> (i64, i64) {
        match self {
            Period::Day => (day, day + 1),
            Period::Week => {
                // 1970-01-01 was a Thursday: Monday is day 4 of that week, counting from 0.
                let monday = day - (day + 3).rem_euclid(7);
                (monday, monday + 7)
            }
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                (days_from_civil(y, m, 1), days_from_civil(next.0, next.1, 1))
            }
            Period::Year => {
                let (y, _, _) = civil_from_days(day);
                (days_from_civil(y, 1, 1), days_from_civil(y + 1, 1, 1))
            }
        }
    }
}

/// Windows that begin and end where a zone's calendar turns over: each day, week, month or
/// year. Copy, so that a policy holding one stays a plain value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CalendarWindows {
    period: Period,
    zone: &'static Zone,
}

impl CalendarWindows {
    /// Windows of `period` in `zone`.
    pub fn new(period: Period, zone: &'static Zone) -> Self {
        Self { period, zone }
    }

    /// The period.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The zone.
    pub fn zone(&self) -> &'static Zone {
        self.zone
    }

    /// The window that holds `now`: `(start, end)`, `start <= now < end`, in nanoseconds since
    /// the Unix epoch. `end` is the first instant after `now` at which the zone's clocks show
    /// the next period, so even where the clocks turn back over midnight the window holds `now`.
    pub fn bounds(&self, now: Nanos) -> (Nanos, Nanos) {
        let secs = (now / NANOS_PER_SEC) as i64;
        let local = secs + i64::from(self.zone.offset_at(secs));
        let (first, next) = self.period.days_around(local.div_euclid(DAY_SECS));
        let start = self.zone.first_at_or_after(first * DAY_SECS, i64::MIN).min(secs);
        let end = self.zone.first_at_or_after(next * DAY_SECS, secs + 1);
        let nanos = |s: i64| u64::try_from(s).unwrap_or(0).saturating_mul(NANOS_PER_SEC);
        (nanos(start), nanos(end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = NANOS_PER_SEC;

    fn at(y: i64, mo: u32, d: u32, h: i64, offset_h: i64) -> i64 {
        days_from_civil(y, mo, d) * DAY_SECS + (h - offset_h) * 3_600
    }

    /// Kyiv in 2024: UTC+2, then UTC+3 from 31 March 01:00 UTC to 27 October 01:00 UTC.
    fn kyiv() -> &'static Zone {
        Zone::new("Europe/Kyiv", 7_200, vec![(at(2024, 3, 31, 1, 0), 10_800), (at(2024, 10, 27, 1, 0), 7_200)])
            .unwrap()
            .interned()
    }

    fn bounds(p: Period, zone: &'static Zone, t: i64) -> (i64, i64) {
        let (a, b) = CalendarWindows::new(p, zone).bounds(t as u64 * S);
        ((a / S) as i64, (b / S) as i64)
    }

    #[test]
    fn days_are_23_and_25_hours_long_where_the_clocks_change() {
        let z = kyiv();
        let spring = bounds(Period::Day, z, at(2024, 3, 31, 12, 3));
        assert_eq!(spring, (at(2024, 3, 31, 0, 2), at(2024, 4, 1, 0, 3)));
        assert_eq!(spring.1 - spring.0, 23 * 3_600);
        let autumn = bounds(Period::Day, z, at(2024, 10, 27, 12, 2));
        assert_eq!(autumn, (at(2024, 10, 27, 0, 3), at(2024, 10, 28, 0, 2)));
        assert_eq!(autumn.1 - autumn.0, 25 * 3_600);
        // The last instant of a day and the first of the next.
        let (_, end) = autumn;
        assert_eq!(bounds(Period::Day, z, end - 1).1, end);
        assert_eq!(bounds(Period::Day, z, end).0, end);
    }

    #[test]
    fn months_follow_their_lengths_and_the_offset_of_their_first_midnight() {
        let z = kyiv();
        // February 2024 (a leap year), in winter time.
        assert_eq!(bounds(Period::Month, z, at(2024, 2, 10, 9, 2)), (at(2024, 2, 1, 0, 2), at(2024, 3, 1, 0, 2)));
        // March begins in winter time and ends in summer time: 31 days less an hour.
        let march = bounds(Period::Month, z, at(2024, 3, 15, 0, 2));
        assert_eq!(march, (at(2024, 3, 1, 0, 2), at(2024, 4, 1, 0, 3)));
        assert_eq!(march.1 - march.0, 31 * DAY_SECS - 3_600);
        // December into January.
        assert_eq!(bounds(Period::Month, z, at(2024, 12, 31, 23, 2)), (at(2024, 12, 1, 0, 2), at(2025, 1, 1, 0, 2)));
        assert_eq!(bounds(Period::Year, z, at(2024, 6, 1, 0, 3)), (at(2024, 1, 1, 0, 2), at(2025, 1, 1, 0, 2)));
    }

    #[test]
    fn weeks_begin_on_monday() {
        // 2024-03-27 was a Wednesday; the week ran from Monday 25 March to Monday 1 April, and
        // lost an hour on Sunday.
        let w = bounds(Period::Week, kyiv(), at(2024, 3, 27, 15, 2));
        assert_eq!(w, (at(2024, 3, 25, 0, 2), at(2024, 4, 1, 0, 3)));
        // UTC: 1970-01-01 (a Thursday) lies in the week of Monday 1969-12-29, cut at the epoch.
        let utc = Zone::utc().interned();
        assert_eq!(bounds(Period::Week, utc, 0), (0, 4 * DAY_SECS));
    }

    #[test]
    fn a_gap_over_midnight_starts_the_day_when_the_clocks_jump() {
        // A zone that springs forward at local midnight (as Havana or Beirut have): 00:00 to
        // 00:59 never happen, so the day begins at 01:00 local, the change itself.
        let change = at(2024, 3, 10, 0, -5);
        let z = Zone::new("Gap", -5 * 3_600, vec![(change, -4 * 3_600)]).unwrap().interned();
        assert_eq!(bounds(Period::Day, z, change + 3_600), (change, at(2024, 3, 11, 0, -4)));
        assert_eq!(bounds(Period::Day, z, change - 1), (at(2024, 3, 9, 0, -5), change));
    }

    #[test]
    fn a_fold_over_midnight_keeps_now_inside_its_window() {
        // Clocks go back from 24:00 to 23:00 (as Chile's have): the day that began before the
        // change ends when 00:00 is first shown, an hour after the change.
        let change = at(2024, 4, 7, 0, -3);
        let z = Zone::new("Fold", -3 * 3_600, vec![(change, -4 * 3_600)]).unwrap().interned();
        let (start, end) = bounds(Period::Day, z, change + 1_800);
        assert_eq!((start, end), (at(2024, 4, 6, 0, -3), change + 3_600));
        for t in [change - 1, change, change + 3_599, change + 3_600, change + 7_200] {
            let (a, b) = bounds(Period::Day, z, t);
            assert!(a <= t && t < b, "{t}: {a}..{b}");
        }
    }

    #[test]
    fn bad_zones_are_refused_and_equal_zones_shared() {
        assert!(Zone::new("x", 26 * 3_600, vec![]).is_err());
        assert!(Zone::new("x", 0, vec![(10, 3_600), (10, 0)]).is_err());
        let a = Zone::new("Europe/Kyiv", 7_200, vec![(5, 10_800)]).unwrap().interned();
        let b = Zone::new("Europe/Kyiv", 7_200, vec![(5, 10_800)]).unwrap().interned();
        assert!(std::ptr::eq(a, b));
        assert_eq!(Period::parse("7d"), Some(Period::Week));
        assert_eq!(Period::parse("30d"), None);
        assert!(Period::ALL_NAMES.iter().all(|n| Period::parse(n).is_some()));
    }
}
