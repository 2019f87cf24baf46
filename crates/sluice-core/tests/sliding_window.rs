//! Sliding window counter, hand-computed: estimate = floor(prev * (W - elapsed) / W) + curr.

mod common;

use common::{fill, verified_check};
use sluice_core::{Algorithm, CostError, Decision, NANOS_PER_SEC, ParamError, SlidingWindow, SlidingWindowState};

const S: u64 = NANOS_PER_SEC;
const W: u64 = 10 * S;

fn sw(limit: u64) -> SlidingWindow {
    SlidingWindow::new(limit, W).unwrap()
}

fn admitted(limit: u64, remaining: u64, reset_after: u64) -> Decision {
    Decision { allowed: true, limit, remaining, reset_after, retry_after: 0, delay: 0 }
}

fn denied(limit: u64, remaining: u64, reset_after: u64, retry_after: u64) -> Decision {
    Decision { allowed: false, limit, remaining, reset_after, retry_after, delay: 0 }
}

/// The estimate at `now`, read through a zero-cost peek: remaining = limit - estimate.
fn estimate(sw: &SlidingWindow, s: &SlidingWindowState, now: u64) -> u64 {
    sw.limit() - sw.peek(s, now, 0).unwrap().remaining
}

#[test]
fn the_previous_window_fades_linearly_and_is_floored() {
    let sw = sw(10);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, 2 * S, 1, 7); // prev = 7 once [10 s, 20 s) begins
    let at = |e: u64| estimate(&sw, &s, W + e);
    assert_eq!(at(0), 7); // 7 * 1
    assert_eq!(at(1), 6); // floor(7 * (1 - 1e-10)) = floor(6.9999999993)
    assert_eq!(at(S), 6); // floor(7 * 0.9) = floor(6.3)
    assert_eq!(at(1_428_571_428), 6); // 7 * 8_571_428_572 / 10^10 = 6.0000000004
    assert_eq!(at(1_428_571_429), 5); // 7 * 8_571_428_571 / 10^10 = 5.9999999997
    assert_eq!(at(5 * S), 3); // floor(3.5)
    assert_eq!(at(9 * S), 0); // floor(0.7)
    assert_eq!(at(W - 1), 0);
    assert_eq!(at(W), 0); // two windows on, [0, 10 s) no longer weighs
    // The current window's count adds in full: at 15 s, floor(3.5) + 2.
    assert_eq!(verified_check(&sw, &mut s, 15 * S, 2), admitted(10, 5, 15 * S));
    assert_eq!(estimate(&sw, &s, 15 * S), 5);
    assert_eq!(estimate(&sw, &s, 20 * S), 2);
    assert_eq!(estimate(&sw, &s, 25 * S), 1);
}

#[test]
fn a_request_exactly_on_the_boundary_sees_the_previous_window_at_full_weight() {
    let sw = sw(10);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, W - 1, 1, 10);
    // At t = W, elapsed = 0: estimate = 10 * 1 + 0. One nanosecond later it is floor(9.999999999) = 9.
    assert_eq!(verified_check(&sw, &mut s, W, 1), denied(10, 0, W, 1));
    assert_eq!(verified_check(&sw, &mut s, W + 1, 1), admitted(10, 0, 2 * W - 1));
}

#[test]
fn retry_after_is_exact_within_the_current_window() {
    let sw = sw(10);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, 2 * S, 1, 7);
    // At 11 s: floor(7 * 0.9) = 6, plus 3 admitted now = 9.
    assert_eq!(verified_check(&sw, &mut s, 11 * S, 3), admitted(10, 1, 19 * S));
    // Cost 2 needs floor(7 * (W - e) / W) <= 5, first true at e = 1_428_571_429 ns.
    let d = verified_check(&sw, &mut s, 11 * S, 2);
    assert_eq!(d, denied(10, 1, 19 * S, 428_571_429));
    assert!(!sw.peek(&s, 11 * S + d.retry_after - 1, 2).unwrap().allowed);
    assert!(sw.peek(&s, 11 * S + d.retry_after, 2).unwrap().allowed);
}

#[test]
fn retry_after_is_exact_in_the_next_window() {
    let sw = sw(10);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, W, 1, 10);
    // Full for the rest of [10 s, 20 s); at 20 s + e the estimate is floor(10 * (W - e) / W).
    assert_eq!(verified_check(&sw, &mut s, 15 * S, 1), denied(10, 0, 15 * S, 5 * S + 1));
    // Cost 4 needs floor(10 * (W - e) / W) <= 6: e = 3 s + 1 ns (at e = 3 s it is exactly 7).
    assert_eq!(verified_check(&sw, &mut s, 15 * S, 4), denied(10, 0, 15 * S, 8 * S + 1));
    assert_eq!(estimate(&sw, &s, 23 * S), 7);
    assert_eq!(estimate(&sw, &s, 23 * S + 1), 6);
}

#[test]
fn retry_after_is_exact_two_windows_later() {
    // A window of 4 ns and a limit of 4: in the next window the previous count weighs at least
    // floor(4 * 1 / 4) = 1 until its very end, so a request of cost 4 waits for window 2.
    let sw = SlidingWindow::new(4, 4).unwrap();
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, 0, 1, 4);
    assert_eq!(verified_check(&sw, &mut s, 1, 4), denied(4, 0, 7, 7));
    assert_eq!(estimate(&sw, &s, 7), 1);
    assert_eq!(verified_check(&sw, &mut s, 8, 4), admitted(4, 0, 8));
}

#[test]
fn cost_above_one_and_above_the_limit() {
    let sw = sw(5);
    let mut s = SlidingWindowState::default();
    assert_eq!(sw.check(&mut s, S, 6), Err(CostError { cost: 6, capacity: 5 }));
    assert_eq!(sw.peek(&s, S, 6), Err(CostError { cost: 6, capacity: 5 }));
    assert_eq!(s, SlidingWindowState::default());
    assert_eq!(verified_check(&sw, &mut s, S, 3), admitted(5, 2, 19 * S));
    let before = s;
    assert!(!verified_check(&sw, &mut s, 2 * S, 3).allowed);
    assert_eq!(s, before, "a denial charges nothing");
    assert_eq!(verified_check(&sw, &mut s, 2 * S, 2), admitted(5, 0, 18 * S));
}

#[test]
fn cost_zero_is_admitted_and_charges_nothing() {
    let sw = sw(5);
    let mut s = SlidingWindowState::default();
    assert_eq!(verified_check(&sw, &mut s, 5 * S, 0), admitted(5, 5, 0));
    assert!(sw.is_fresh(&s, 5 * S));
    fill(&sw, &mut s, 6 * S, 1, 5);
    assert_eq!(verified_check(&sw, &mut s, 7 * S, 0), admitted(5, 0, 13 * S));
}

#[test]
fn time_standing_still_admits_exactly_the_limit() {
    let sw = sw(5);
    let mut s = SlidingWindowState::default();
    let decisions: Vec<Decision> = (0..12).map(|_| verified_check(&sw, &mut s, 3 * S, 1)).collect();
    let remaining: Vec<u64> = decisions[..5].iter().map(|d| d.remaining).collect();
    assert_eq!(remaining, [4, 3, 2, 1, 0]);
    // floor(5 * (W - e) / W) <= 4 from e = 1 ns of the next window.
    assert!(decisions[5..].iter().all(|d| *d == denied(5, 0, 17 * S, 7 * S + 1)));
}

#[test]
fn counts_two_windows_old_are_forgotten() {
    let sw = sw(3);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, 4 * S, 1, 3);
    assert!(!sw.is_fresh(&s, 2 * W - 1));
    assert!(sw.is_fresh(&s, 2 * W));
    assert_eq!(verified_check(&sw, &mut s, 2 * W, 3), admitted(3, 0, 2 * W));
}

#[test]
fn huge_gaps_and_the_end_of_time_neither_overflow_nor_panic() {
    let sw = sw(3);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, S, 1, 3);
    let mid = u64::MAX / 2;
    let into = mid % W;
    assert_eq!(verified_check(&sw, &mut s, mid, 1), admitted(3, 2, 2 * W - into));
    let into = u64::MAX % W;
    assert_eq!(verified_check(&sw, &mut s, u64::MAX, 1), admitted(3, 2, 2 * W - into));
    fill(&sw, &mut s, u64::MAX, 1, 2);
    // The earliest admission (1 ns into the next window) lies past the end of u64 time.
    assert_eq!(verified_check(&sw, &mut s, u64::MAX, 1), denied(3, 0, 2 * W - into, W + 1 - into));
}

#[test]
fn a_limit_near_u64_max_does_not_overflow() {
    let sw = SlidingWindow::new(u64::MAX, W).unwrap();
    let mut s = SlidingWindowState::default();
    assert_eq!(verified_check(&sw, &mut s, S, u64::MAX - 1), admitted(u64::MAX, 1, 19 * S));
    assert_eq!(verified_check(&sw, &mut s, S, 2), denied(u64::MAX, 1, 19 * S, 9 * S + 1));
    assert!(!verified_check(&sw, &mut s, S, u64::MAX).allowed);
}

#[test]
fn peek_reports_without_charging() {
    let sw = sw(2);
    let mut s = SlidingWindowState::default();
    for _ in 0..5 {
        assert_eq!(sw.peek(&s, S, 1).unwrap(), admitted(2, 1, 19 * S));
    }
    assert_eq!(s, SlidingWindowState::default());
    fill(&sw, &mut s, S, 1, 2);
}

#[test]
fn a_clock_that_stepped_back_still_sees_the_later_window() {
    let sw = sw(2);
    let mut s = SlidingWindowState::default();
    fill(&sw, &mut s, 25 * S, 1, 2);
    // At 15 s the later window [20 s, 30 s) still counts, in full.
    assert_eq!(verified_check(&sw, &mut s, 15 * S, 1), denied(2, 0, 25 * S, 15 * S + 1));
}

#[test]
fn bad_parameters_are_refused() {
    assert_eq!(SlidingWindow::new(0, W), Err(ParamError::Zero { field: "limit" }));
    assert_eq!(SlidingWindow::new(1, 0), Err(ParamError::Zero { field: "window" }));
    assert_eq!(sw(3).window(), W);
}
