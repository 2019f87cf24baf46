//! Fixed and sliding windows on a calendar: days, weeks, months and years of a zone whose
//! clocks change (Kyiv's rules for 2024-2025, written out by hand), with explicit time.
//!
//! Every decision goes through `verified_check`: the Retry-After of a denial is the real
//! calendar boundary to the nanosecond, `remaining` and `reset_after` are exact, a denial
//! charges nothing. The properties: never more than the limit in any calendar window; and a
//! sliding window decides as its definition reads, from the whole history of admissions.

mod common;

use common::verified_check;
use proptest::collection::vec;
use proptest::prelude::*;
use sluice_core::calendar::days_from_civil;
use sluice_core::{
    Algorithm, CalendarWindows, FixedWindow, FixedWindowState, NANOS_PER_SEC as S, Nanos, Period, Policy,
    SlidingWindow, SlidingWindowState, Zone, fuzz_cases,
};

const HOUR: i64 = 3_600;

/// Unix seconds of `h`:00 on y-m-d at UTC offset `offset_h`.
fn at(y: i64, m: u32, d: u32, h: i64, offset_h: i64) -> i64 {
    days_from_civil(y, m, d) * 86_400 + (h - offset_h) * HOUR
}

fn ns(secs: i64) -> Nanos {
    secs as u64 * S
}

/// Europe/Kyiv in 2024 and 2025: UTC+2, UTC+3 from the last Sunday of March to the last of
/// October (at 01:00 UTC).
fn kyiv() -> &'static Zone {
    let changes = vec![
        (at(2024, 3, 31, 1, 0), 3 * HOUR as i32),
        (at(2024, 10, 27, 1, 0), 2 * HOUR as i32),
        (at(2025, 3, 30, 1, 0), 3 * HOUR as i32),
        (at(2025, 10, 26, 1, 0), 2 * HOUR as i32),
    ];
    Zone::new("Europe/Kyiv", 2 * HOUR as i32, changes).unwrap().interned()
}

fn calendar(limit: u64, period: Period) -> FixedWindow {
    FixedWindow::calendar(limit, CalendarWindows::new(period, kyiv())).unwrap()
}

fn sliding(limit: u64, period: Period) -> SlidingWindow {
    SlidingWindow::calendar(limit, CalendarWindows::new(period, kyiv())).unwrap()
}

#[test]
fn a_monthly_quota_resets_at_the_zones_midnight_and_says_so() {
    let monthly = calendar(3, Period::Month);
    let mut s = FixedWindowState::default();
    // 31 March 2024, 22:30 local (summer time, UTC+3): the last 90 minutes of March.
    let t = ns(at(2024, 3, 31, 22, 3) + 30 * 60);
    for _ in 0..3 {
        assert!(verified_check(&monthly, &mut s, t, 1).allowed);
    }
    let denied = verified_check(&monthly, &mut s, t, 1);
    assert!(!denied.allowed);
    // April begins at 00:00 Kyiv time (21:00 UTC), not at midnight UTC three hours later.
    assert_eq!(denied.retry_after, 90 * 60 * S);
    assert_eq!(denied.reset_after, 90 * 60 * S);
    let april = ns(at(2024, 4, 1, 0, 3));
    assert!(!verified_check(&monthly, &mut s, april - 1, 1).allowed);
    assert!(verified_check(&monthly, &mut s, april, 3).allowed);
    // And April lasts 30 days: its reset is 1 May's midnight.
    let d = monthly.peek(&s, april + S, 1).unwrap();
    assert_eq!(d.retry_after, ns(at(2024, 5, 1, 0, 3)) - april - S);
}

#[test]
fn a_daily_quota_on_the_day_the_clocks_go_back_lasts_25_hours() {
    let daily = calendar(1, Period::Day);
    let mut s = FixedWindowState::default();
    let start = ns(at(2024, 10, 27, 0, 3));
    assert!(verified_check(&daily, &mut s, start, 1).allowed);
    let d = verified_check(&daily, &mut s, start + S, 1);
    assert_eq!(d.retry_after, 25 * HOUR as u64 * S - S);
    // 24 hours after midnight it is still 27 October (23:00 local).
    assert!(!verified_check(&daily, &mut s, start + 24 * HOUR as u64 * S, 1).allowed);
    assert!(verified_check(&daily, &mut s, start + 25 * HOUR as u64 * S, 1).allowed);
}

#[test]
fn a_refund_gives_back_while_the_calendar_window_lasts() {
    let weekly = calendar(2, Period::Week);
    let mut s = FixedWindowState::default();
    // Sunday 31 March 2024, 12:00: the week began on Monday 25 March in winter time.
    let sunday = ns(at(2024, 3, 31, 12, 3));
    assert!(weekly.check(&mut s, sunday, 2).unwrap().allowed);
    weekly.refund(&mut s, sunday, 1, sunday + S);
    assert_eq!(weekly.peek(&s, sunday + S, 1).unwrap().remaining, 0);
    assert!(weekly.check(&mut s, sunday + S, 1).unwrap().allowed);
    // Monday: a new week; a refund of Sunday's charge gives nothing to it.
    let monday = ns(at(2024, 4, 1, 0, 3));
    assert!(weekly.check(&mut s, monday, 2).unwrap().allowed);
    weekly.refund(&mut s, sunday, 2, monday + S);
    assert!(!weekly.peek(&s, monday + S, 1).unwrap().allowed);
    // An overrun is a debt until the week ends.
    weekly.overrun(&mut s, monday + S, 2);
    let d = weekly.peek(&s, monday + S, 1).unwrap();
    assert_eq!(d.retry_after, ns(at(2024, 4, 8, 0, 3)) - monday - S);
}

#[test]
fn calendar_windows_are_their_own_policy() {
    let m = calendar(5, Period::Month);
    let p = Policy::from(m);
    assert_eq!(p.name(), "fixed-window");
    assert_eq!(p.window(), 30 * 86_400 * S, "a typical month, for the headers' `w`");
    assert_ne!(p, Policy::from(calendar(5, Period::Week)));
    assert_ne!(p, Policy::from(FixedWindow::new(5, 30 * 86_400 * S).unwrap()));
    assert_eq!(m.calendar_windows().unwrap().zone().name(), "Europe/Kyiv");
    // A memory store's snapshot names a policy by its text: an epoch window's is what it was
    // before calendars, and a calendar's names its zone, not the zone's rules.
    assert_eq!(format!("{:?}", FixedWindow::new(3, 4).unwrap()), "FixedWindow { limit: 3, window: 4 }");
    assert_eq!(
        format!("{m:?}"),
        "FixedWindow { limit: 5, window: 2592000000000000, calendar: CalendarWindows { period: Month, zone: Zone(\"Europe/Kyiv\") } }"
    );
}

#[test]
fn a_sliding_month_weighs_the_last_by_the_share_of_this_one_still_to_run() {
    let monthly = sliding(29, Period::Month);
    let mut s = SlidingWindowState::default();
    // February 2024 (29 days): its whole quota on its last day.
    let feb_29 = ns(at(2024, 2, 29, 12, 2));
    assert!(verified_check(&monthly, &mut s, feb_29, 29).allowed);
    let denied = verified_check(&monthly, &mut s, feb_29, 1);
    // March begins at Kyiv's midnight weighing February fully; one nanosecond later,
    // floor(29 * (1 - 1 ns / 31 days minus an hour)) = 28, and one request fits.
    let march = ns(at(2024, 3, 1, 0, 2));
    assert_eq!(denied.retry_after, march + 1 - feb_29);
    // March 2024 is 31 days less the hour its clocks lose on the 31st.
    let march_len = ns(at(2024, 4, 1, 0, 3)) - march;
    assert_eq!(march_len, (31 * 24 - 1) * HOUR as u64 * S);
    // A third of the way through March, two thirds of February still weigh: floor(29 * 2/3) = 19.
    let third = march + march_len / 3;
    assert_eq!(verified_check(&monthly, &mut s, third, 10).remaining, 0);
    assert!(!verified_check(&monthly, &mut s, third, 1).allowed);
    // In April, February weighs nothing and March's 10 weigh, fading.
    let d = verified_check(&monthly, &mut s, ns(at(2024, 4, 1, 0, 3)), 19);
    assert!(d.allowed);
    // April's count weighs through May, fading: the key is fresh on 1 June.
    assert_eq!(d.reset_after, ns(at(2024, 6, 1, 0, 3)) - ns(at(2024, 4, 1, 0, 3)));
}

#[test]
fn a_sliding_day_where_the_clocks_go_forward_is_23_hours_long() {
    let daily = sliding(2, Period::Day);
    let mut s = SlidingWindowState::default();
    let saturday = ns(at(2024, 3, 30, 9, 2));
    assert!(verified_check(&daily, &mut s, saturday, 2).allowed);
    // Sunday 31 March has 23 hours: Saturday's 2 weigh nothing once more than half of them
    // have passed (floor(2 * (23 h - e) / 23 h) = 0 from e = 11.5 h + 1 ns).
    let sunday = ns(at(2024, 3, 31, 0, 2));
    let denied = verified_check(&daily, &mut s, sunday, 2);
    assert_eq!(denied.retry_after, 23 * HOUR as u64 * S / 2 + 1);
    let later = sunday + denied.retry_after;
    assert!(verified_check(&daily, &mut s, later, 2).allowed);
    // A refund of Saturday's charge lowers the weighted count; of Sunday's, the current one.
    daily.refund(&mut s, saturday, 2, later);
    assert_eq!(daily.peek(&s, later, 1).unwrap().remaining, 0);
    daily.refund(&mut s, later, 2, later);
    assert!(daily.is_fresh(&s, later));
}

#[test]
fn sliding_calendar_windows_are_their_own_policy() {
    let m = Policy::from(sliding(5, Period::Month));
    assert_eq!(m.name(), "sliding-window");
    assert_eq!(m.calendar_windows().unwrap().period(), Period::Month);
    assert_ne!(m, Policy::from(calendar(5, Period::Month)));
    assert_ne!(m, Policy::from(SlidingWindow::new(5, 30 * 86_400 * S).unwrap()));
    assert_eq!(format!("{:?}", SlidingWindow::new(3, 4).unwrap()), "SlidingWindow { limit: 3, window: 4 }");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases(256)))]

    /// Over 2024-2025, with arrivals bunched at one instant, a second apart, around the clock
    /// changes or days apart: no calendar window of any period ever admits more than the
    /// limit, and every decision tells the truth (`verified_check`).
    #[test]
    fn never_more_than_the_limit_in_any_calendar_window(
        limit in 1..=5u64,
        period in prop_oneof![Just(Period::Day), Just(Period::Week), Just(Period::Month), Just(Period::Year)],
        start in 0..(700 * 86_400i64),
        seeds in vec(any::<(u64, u64)>(), 1..100),
    ) {
        let alg = calendar(limit, period);
        let mut s = FixedWindowState::default();
        let mut t = ns(at(2024, 1, 1, 0, 2) + start);
        let mut per_window: std::collections::BTreeMap<Nanos, u64> = Default::default();
        for (g, c) in seeds {
            t += match g % 5 {
                0 => 0,
                1 => (g >> 3) % 3 * S,
                2 => (g >> 3) % (3 * HOUR as u64) * S,
                _ => (g >> 3) % (9 * 86_400) * S,
            };
            let cost = c % (limit + 1);
            let d = verified_check(&alg, &mut s, t, cost);
            let (window_start, end) = alg.bounds(t);
            prop_assert!(window_start <= t && t < end);
            if d.allowed {
                *per_window.entry(window_start).or_default() += cost;
            } else {
                prop_assert_eq!(d.retry_after, end - t, "a denial waits for the calendar's boundary");
            }
        }
        for (w, units) in per_window {
            prop_assert!(units <= limit, "{} units in the window from {}", units, w);
        }
    }

    /// A sliding window on a calendar decides as its definition reads: from every admission so
    /// far, `curr` (this calendar window's units) and `prev` (the previous window's), a request
    /// of `cost` is admitted when `floor(prev * (end - now) / (end - start)) + curr + cost` is
    /// within the limit; and every decision tells the truth (`verified_check`).
    #[test]
    fn a_sliding_calendar_window_decides_from_the_history(
        limit in 1..=6u64,
        period in prop_oneof![Just(Period::Day), Just(Period::Week), Just(Period::Month)],
        start in 0..(700 * 86_400i64),
        seeds in vec(any::<(u64, u64)>(), 1..80),
    ) {
        let alg = sliding(limit, period);
        let mut s = SlidingWindowState::default();
        let mut t = ns(at(2024, 1, 1, 0, 2) + start);
        let mut admitted: Vec<(Nanos, u64)> = Vec::new();
        for (g, c) in seeds {
            t += match g % 5 {
                0 => 0,
                1 => (g >> 3) % 3 * S,
                2 => (g >> 3) % (3 * HOUR as u64) * S,
                _ => (g >> 3) % (40 * 86_400) * S + (g >> 40) % S,
            };
            let cost = c % (limit + 1);
            let (from, end) = alg.bounds(t);
            let before = alg.bounds(from - 1).0;
            let units = |a: Nanos, b: Nanos| admitted.iter().filter(|(at, _)| (a..b).contains(at)).map(|(_, c)| c).sum::<u64>();
            let (prev, curr) = (units(before, from) as u128, units(from, end) as u128);
            let estimate = prev * u128::from(end - t) / u128::from(end - from) + curr;
            let d = verified_check(&alg, &mut s, t, cost);
            prop_assert_eq!(d.allowed, estimate + u128::from(cost) <= u128::from(limit), "at {} cost {}", t, cost);
            if d.allowed {
                admitted.push((t, cost));
                prop_assert!(curr + u128::from(cost) <= u128::from(limit));
            }
        }
    }
}
