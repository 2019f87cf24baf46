//! Calendar windows against jiff, the time-zone crate sluice reads zones with: for every zone of
//! the tz database, the day, week, month and year that hold an instant begin and end where
//! jiff's `start_of_day` of the period's first day and of the next period's say — at every
//! change of offset from 1970 to 2100 (a second before, at, and after it) and at instants
//! spread over those years.
//!
//! Two cases differ by design, and are checked for what sluice promises instead: a window that
//! began before 1970 begins at the epoch (sluice's time has nothing earlier); and where the
//! clocks turn back over midnight (Moncton's 00:01 changes in the 1990s, St. John's in 2009,
//! Casey's three hours in 2010), an instant in the repeated hour of the old day lies after
//! jiff's start of the next day, and sluice's window ends instead at the first instant after it
//! whose local date is the next period's.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use sluice_core::{CalendarWindows, NANOS_PER_SEC, Period};

/// jiff's window of `period` holding `t`: the start of its first day, and of the next period's;
/// and the next period's first day.
fn jiff_bounds(tz: &TimeZone, period: Period, t: Timestamp) -> ((i64, i64), Date) {
    let date = t.to_zoned_datetime(tz.clone()).date();
    let (first, next): (Date, Date) = match period {
        Period::Day => (date, date.tomorrow().unwrap()),
        Period::Week => {
            let monday = date.checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days()).unwrap();
            (monday, monday.checked_add(7.days()).unwrap())
        }
        Period::Month => (date.first_of_month(), date.last_of_month().tomorrow().unwrap()),
        Period::Year => (date.first_of_year(), date.last_of_year().tomorrow().unwrap()),
    };
    let start = |d: Date| d.to_zoned_datetime(tz.clone()).unwrap().start_of_day().unwrap().timestamp().as_second();
    ((start(first), start(next)), next)
}

/// The local date at Unix second `s`.
fn date_at(tz: &TimeZone, s: i64) -> Date {
    Timestamp::from_second(s).unwrap().to_zoned_datetime(tz.clone()).date()
}

#[test]
fn every_zone_agrees_with_jiff() {
    let until = Timestamp::from_second(4_102_444_800).unwrap(); // 2100-01-01
    let mut zones = 0;
    let mut compared = 0u64;
    let mut folds_over_midnight = 0;
    let mut mismatches = Vec::new();
    for name in jiff::tz::db().available() {
        let name = name.as_str().to_string();
        let tz = TimeZone::get(&name).unwrap();
        let zone = sluice_config::time_zone(&name).unwrap();
        zones += 1;
        let mut instants: Vec<i64> = tz
            .following(Timestamp::UNIX_EPOCH)
            .take_while(|c| c.timestamp() < until)
            .take(120)
            .flat_map(|c| {
                let s = c.timestamp().as_second();
                [s - 1, s, s + 1]
            })
            .collect();
        // Spread over 1970-2100, at an odd stride so that they fall at every hour of the day.
        instants.extend((0..40).map(|i| 86_400 + i * 102_345_679));
        for &s in instants.iter().filter(|&&s| s > 86_400 * 8) {
            for period in [Period::Day, Period::Week, Period::Month, Period::Year] {
                let (a, b) = CalendarWindows::new(period, zone).bounds(s as u64 * NANOS_PER_SEC);
                let ours = ((a / NANOS_PER_SEC) as i64, (b / NANOS_PER_SEC) as i64);
                assert!(ours.0 <= s && s < ours.1, "{name} {period:?} at {s}: {ours:?} does not hold it");
                let (theirs, next) = jiff_bounds(&tz, period, Timestamp::from_second(s).unwrap());
                compared += 1;
                let agrees = if theirs.0 < 0 {
                    ours == (0, theirs.1)
                } else if theirs.1 <= s {
                    folds_over_midnight += 1;
                    ours.0 == theirs.0 && date_at(&tz, ours.1 - 1) < next && date_at(&tz, ours.1) >= next
                } else {
                    ours == theirs
                };
                if !agrees {
                    mismatches.push(format!("{name} {period:?} at {s}: sluice {ours:?}, jiff {theirs:?}"));
                }
            }
        }
    }
    assert!(zones > 300, "the tz database has {zones} zones");
    assert!(folds_over_midnight > 0, "the clocks turning back over midnight were met");
    assert!(mismatches.is_empty(), "{} of {compared} windows differ:\n{}", mismatches.len(), mismatches.join("\n"));
}
