//! Every cell, for random states: what it rebuilds is at least as strict as each state folded
//! into it, for joins of several states and for meets of cells that all hold the state, and for
//! any traffic that follows (checked by replay: whatever the rebuilt state admits, the exact one
//! must admit too, and both are then charged).

use proptest::prelude::*;
use sluice_core::{Algorithm, FixedWindow, LeakMode, LeakyBucket, Nanos, SlidingLog, SlidingWindow, TokenBucket};

use super::{BucketCell, CounterCell, LogCell, Summary, WindowCell};

/// A state after `history` (gaps and costs) from `start`, and the time it ends at.
fn built<A: Algorithm>(alg: &A, start: Nanos, history: &[(u64, u64)]) -> (A::State, Nanos) {
    let mut state = A::State::default();
    let mut t = start;
    for &(gap, cost) in history {
        t += gap;
        alg.check(&mut state, t, cost.min(alg.limit())).unwrap();
    }
    (state, t)
}

/// Replays `future` from `now`: every request `strict` admits, `exact` must admit.
fn at_least_as_strict<A: Algorithm>(
    alg: &A,
    mut strict: A::State,
    mut exact: A::State,
    now: Nanos,
    future: &[(u64, u64)],
) -> Result<(), String> {
    let mut t = now;
    for (i, &(gap, cost)) in future.iter().enumerate() {
        t += gap;
        let cost = cost.min(alg.limit());
        if alg.check(&mut strict, t, cost).unwrap().allowed && !alg.check(&mut exact, t, cost).unwrap().allowed {
            return Err(format!("request {i} (cost {cost} at +{}) admitted by the summary, denied exactly", t - now));
        }
    }
    Ok(())
}

/// The three properties for one algorithm and its cell: a state's own cell, a join of three
/// states' cells, and a meet of two joins that both hold the first state.
fn holds<A: Algorithm, C: Summary<A>>(
    alg: &A,
    histories: [&[(u64, u64)]; 3],
    start: Nanos,
    future: &[(u64, u64)],
) -> Result<(), String> {
    // The three keys are evicted one after another, each at the end of its own history.
    let mut now = start;
    let mut states = Vec::new();
    let mut cells = Vec::new();
    for h in histories {
        let (state, end) = built(alg, now, h);
        now = end;
        let Some(cell) = C::of(alg, &state, now) else {
            return Err("a state of the present was not summarised".into());
        };
        states.push(state);
        cells.push((cell, now));
    }
    let own = cells[0].0;
    let join = cells.iter().fold(C::default(), |acc, &(c, at)| acc.join(c, alg, at));
    let other = cells[0].0.join(cells[2].0, alg, now);
    let meet = join.meet(other, alg, now);
    for (what, cell, folded) in
        [("own", own, 0usize), ("join", join, 0), ("join", join, 1), ("join", join, 2), ("meet", meet, 0)]
    {
        let exact = states[folded].clone();
        let from = if what == "own" { cells[0].1 } else { now };
        at_least_as_strict(alg, cell.state(alg, from), exact, from, future)
            .map_err(|e| format!("{what} cell, state {folded}: {e}"))?;
    }
    // A cell stays at least as strict as it ages with its state.
    let later = now + future.first().map_or(0, |f| f.0);
    at_least_as_strict(alg, join.state(alg, later), states[2].clone(), later, &future[1.min(future.len())..])
        .map_err(|e| format!("aged join: {e}"))
}

fn history() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0u64..400, 0u64..4), 0..24)
}

fn future() -> impl Strategy<Value = Vec<(u64, u64)>> {
    proptest::collection::vec((0u64..300, 0u64..6), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_cell_is_at_least_as_strict_as_what_it_holds(
        which in 0usize..6,
        a in history(), b in history(), c in history(),
        start in 0u64..5_000,
        future in future(),
    ) {
        let hs = [&a[..], &b[..], &c[..]];
        let result = match which {
            0 => holds::<_, BucketCell>(&TokenBucket::new(5, 1e7).unwrap(), hs, start, &future),
            1 => holds::<_, BucketCell>(&LeakyBucket::new(1e7, 4, LeakMode::Shape { delay: 1 }).unwrap(), hs, start, &future),
            2 => holds::<_, WindowCell>(&FixedWindow::new(5, 1_000).unwrap(), hs, start, &future),
            3 => holds::<_, CounterCell>(&SlidingWindow::new(5, 1_000).unwrap(), hs, start, &future),
            // A window shorter in nanoseconds than its limit: some joins are unreachable states.
            4 => holds::<_, CounterCell>(&SlidingWindow::new(6, 4).unwrap(), hs, start, &future),
            _ => holds::<_, LogCell>(&SlidingLog::new(5, 1_000).unwrap(), hs, start, &future),
        };
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// `history` with every gap in units of `scale` nanoseconds.
fn scaled(history: &[(u64, u64)], scale: u64) -> Vec<(u64, u64)> {
    history.iter().map(|&(gap, cost)| (gap * scale, cost)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The same on a calendar: days of a zone whose clocks go forward an hour (a 23-hour day)
    /// and back (a 25-hour one) while the keys live, with gaps of up to 20 hours.
    #[test]
    fn calendar_cells_are_at_least_as_strict_as_what_they_hold(
        sliding in any::<bool>(),
        a in history(), b in history(), c in history(),
        start in 0u64..400,
        future in future(),
    ) {
        use sluice_core::{CalendarWindows, Period, Zone};
        const UNIT: u64 = 180 * sluice_core::NANOS_PER_SEC; // three minutes
        let t0: i64 = 1_711_843_200; // 2024-03-31 00:00 UTC
        let zone = Zone::new("Test/Changing", 7_200, vec![(t0 + 7_000, 10_800), (t0 + 2 * 86_400 + 50_000, 7_200)])
            .unwrap()
            .interned();
        let days = CalendarWindows::new(Period::Day, zone);
        let (a, b, c, future) = (scaled(&a, UNIT), scaled(&b, UNIT), scaled(&c, UNIT), scaled(&future, UNIT));
        let hs = [&a[..], &b[..], &c[..]];
        let start = (t0 as u64 - 86_400) * sluice_core::NANOS_PER_SEC + start * UNIT;
        let result = if sliding {
            holds::<_, CounterCell>(&SlidingWindow::calendar(5, days).unwrap(), hs, start, &future)
        } else {
            holds::<_, WindowCell>(&FixedWindow::calendar(5, days).unwrap(), hs, start, &future)
        };
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

#[test]
fn a_cell_of_one_state_rebuilds_it_where_nothing_is_rounded() {
    // Buckets and fixed windows are summarised exactly.
    let tb = TokenBucket::new(5, 10.0).unwrap();
    let (state, now) = built(&tb, 1_000_000_000, &[(0, 3), (1_000, 1)]);
    let cell = BucketCell::of(&tb, &state, now).unwrap();
    assert_eq!(cell.state(&tb, now), state);
    let fw = FixedWindow::new(5, 1_000).unwrap();
    let (state, now) = built(&fw, 10_000, &[(10, 2), (20, 1)]);
    let cell = WindowCell::of(&fw, &state, now).unwrap();
    assert_eq!(fw.peek(&cell.state(&fw, now), now, 0), fw.peek(&state, now, 0));
    // A sliding window at the start of its window, and a log whose entries lie on sub-window ends.
    let sw = SlidingWindow::new(10, 1_000).unwrap();
    let (state, now) = built(&sw, 5_000, &[(0, 4), (1_000, 0)]);
    let cell = CounterCell::of(&sw, &state, now).unwrap();
    for t in [now, now + 500, now + 999, now + 1_000] {
        assert_eq!(sw.peek(&cell.state(&sw, now), t, 0), sw.peek(&state, t, 0), "at +{}", t - now);
    }
    let log = SlidingLog::new(10, 800).unwrap();
    let (state, now) = built(&log, 99, &[(0, 2), (100, 3)]);
    let cell = LogCell::of(&log, &state, now).unwrap();
    for t in [now, now + 99, now + 100, now + 700] {
        assert_eq!(log.peek(&cell.state(&log, now), t, 0), log.peek(&state, t, 0), "at +{}", t - now);
    }
}

#[test]
fn empty_cells_stand_for_fresh_states_and_states_after_now_are_not_summarised() {
    let fw = FixedWindow::new(5, 1_000).unwrap();
    assert_eq!(WindowCell::default().state(&fw, 7), Default::default());
    let log = SlidingLog::new(3, 1_000).unwrap();
    let (state, _) = built(&log, 5_000, &[(0, 1)]);
    // Recorded at 5,000: at 4,000 (the clock stepped back) it cannot be summarised.
    assert_eq!(LogCell::of(&log, &state, 4_000), None);
    let sw = SlidingWindow::new(3, 1_000).unwrap();
    let (state, _) = built(&sw, 5_000, &[(0, 1)]);
    assert_eq!(CounterCell::of(&sw, &state, 3_500), None);
    // Saturated states deny until everything folded by then is fresh.
    let saturated = <LogCell as Summary<SlidingLog>>::saturated(&log, 5_000).unwrap();
    assert!(!log.peek(&saturated, 4_000, 1).unwrap().allowed);
    assert!(log.peek(&saturated, 6_000, 1).unwrap().allowed);
}
