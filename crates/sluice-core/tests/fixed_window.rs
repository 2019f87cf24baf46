//! Fixed window, hand-computed: aligned windows of 10 s.

mod common;

use common::{fill, verified_check};
use sluice_core::{Algorithm, CostError, Decision, FixedWindow, FixedWindowState, NANOS_PER_SEC, ParamError};

const S: u64 = NANOS_PER_SEC;
const W: u64 = 10 * S;

fn fw(limit: u64) -> FixedWindow {
    FixedWindow::new(limit, W).unwrap()
}

fn admitted(limit: u64, remaining: u64, reset_after: u64) -> Decision {
    Decision { allowed: true, limit, remaining, reset_after, retry_after: 0, delay: 0 }
}

fn denied(limit: u64, remaining: u64, reset_after: u64, retry_after: u64) -> Decision {
    Decision { allowed: false, limit, remaining, reset_after, retry_after, delay: 0 }
}

#[test]
fn counts_per_aligned_window_with_exact_remaining_and_reset() {
    let fw = fw(3);
    let mut s = FixedWindowState::default();
    // Window [10 s, 20 s).
    assert_eq!(verified_check(&fw, &mut s, 12 * S, 1), admitted(3, 2, 8 * S));
    assert_eq!(verified_check(&fw, &mut s, 15 * S, 1), admitted(3, 1, 5 * S));
    assert_eq!(verified_check(&fw, &mut s, 20 * S - 1, 1), admitted(3, 0, 1));
    assert_eq!(verified_check(&fw, &mut s, 20 * S - 1, 1), denied(3, 0, 1, 1));
    assert!(!fw.is_fresh(&s, 20 * S - 1));
    assert!(fw.is_fresh(&s, 20 * S));
}

#[test]
fn a_request_exactly_on_the_boundary_opens_the_next_window() {
    let fw = fw(2);
    let mut s = FixedWindowState::default();
    fill(&fw, &mut s, W - 1, 1, 2);
    assert_eq!(verified_check(&fw, &mut s, W - 1, 1), denied(2, 0, 1, 1));
    // t = W belongs to [W, 2W): a full window lies ahead.
    assert_eq!(verified_check(&fw, &mut s, W, 1), admitted(2, 1, W));
    assert_eq!(verified_check(&fw, &mut s, W, 1), admitted(2, 0, W));
    assert_eq!(verified_check(&fw, &mut s, W, 1), denied(2, 0, W, W));
}

#[test]
fn cost_above_one_takes_that_many_units() {
    let fw = fw(5);
    let mut s = FixedWindowState::default();
    assert_eq!(verified_check(&fw, &mut s, 3 * S, 3), admitted(5, 2, 7 * S));
    let before = s;
    assert_eq!(verified_check(&fw, &mut s, 4 * S, 3), denied(5, 2, 6 * S, 6 * S));
    assert_eq!(s, before, "a denial charges nothing");
    assert_eq!(verified_check(&fw, &mut s, 4 * S, 2), admitted(5, 0, 6 * S));
    // The next window takes the whole limit in one request.
    assert_eq!(verified_check(&fw, &mut s, W, 5), admitted(5, 0, W));
}

#[test]
fn a_cost_above_the_limit_is_an_error_not_a_denial() {
    let fw = fw(5);
    let mut s = FixedWindowState::default();
    let err = CostError { cost: 6, capacity: 5 };
    assert_eq!(fw.check(&mut s, S, 6), Err(err));
    assert_eq!(fw.peek(&s, S, 6), Err(err));
    assert_eq!(s, FixedWindowState::default());
    assert!(err.to_string().contains("never be admitted"), "{err}");
    // Even with the window full, it is the error, not a denial with a retry time.
    fill(&fw, &mut s, S, 5, 1);
    assert_eq!(fw.check(&mut s, S, u64::MAX), Err(CostError { cost: u64::MAX, capacity: 5 }));
}

#[test]
fn cost_zero_is_admitted_and_charges_nothing() {
    let fw = fw(5);
    let mut s = FixedWindowState::default();
    assert_eq!(verified_check(&fw, &mut s, 5 * S, 0), admitted(5, 5, 0));
    assert!(fw.is_fresh(&s, 5 * S));
    fill(&fw, &mut s, 6 * S, 1, 5);
    // A full window still answers a zero-cost probe with the truth.
    assert_eq!(verified_check(&fw, &mut s, 7 * S, 0), admitted(5, 0, 3 * S));
    assert_eq!(verified_check(&fw, &mut s, 7 * S, 1), denied(5, 0, 3 * S, 3 * S));
}

#[test]
fn time_standing_still_admits_exactly_the_limit() {
    let fw = fw(7);
    let mut s = FixedWindowState::default();
    let now = 42 * S;
    let decisions: Vec<Decision> = (0..20).map(|_| verified_check(&fw, &mut s, now, 1)).collect();
    assert_eq!(decisions.iter().filter(|d| d.allowed).count(), 7);
    let remaining: Vec<u64> = decisions[..7].iter().map(|d| d.remaining).collect();
    assert_eq!(remaining, [6, 5, 4, 3, 2, 1, 0]);
    assert!(decisions[7..].iter().all(|d| *d == denied(7, 0, 8 * S, 8 * S)));
}

#[test]
fn huge_gaps_and_the_end_of_time_neither_overflow_nor_panic() {
    let fw = fw(3);
    let mut s = FixedWindowState::default();
    fill(&fw, &mut s, S, 1, 3);
    // A gap of half the time range: the old window is long gone.
    assert_eq!(verified_check(&fw, &mut s, u64::MAX / 2, 1).remaining, 2);
    // The last window of u64 time is cut short by the end of the range.
    let until_end = W - u64::MAX % W;
    assert_eq!(verified_check(&fw, &mut s, u64::MAX, 1), admitted(3, 2, until_end));
    fill(&fw, &mut s, u64::MAX, 1, 2);
    assert_eq!(verified_check(&fw, &mut s, u64::MAX, 1), denied(3, 0, until_end, until_end));
    // From time 0 straight to the end.
    let mut s = FixedWindowState::default();
    verified_check(&fw, &mut s, 0, 3);
    assert_eq!(verified_check(&fw, &mut s, u64::MAX, 3), admitted(3, 0, until_end));
}

#[test]
fn a_limit_near_u64_max_does_not_overflow() {
    let fw = FixedWindow::new(u64::MAX, W).unwrap();
    let mut s = FixedWindowState::default();
    assert_eq!(verified_check(&fw, &mut s, S, u64::MAX - 1), admitted(u64::MAX, 1, 9 * S));
    assert_eq!(verified_check(&fw, &mut s, S, 2), denied(u64::MAX, 1, 9 * S, 9 * S));
    assert_eq!(verified_check(&fw, &mut s, S, u64::MAX), denied(u64::MAX, 1, 9 * S, 9 * S));
    assert_eq!(verified_check(&fw, &mut s, S, 1), admitted(u64::MAX, 0, 9 * S));
}

#[test]
fn retry_after_is_exact_to_the_nanosecond() {
    let fw = fw(4);
    let mut s = FixedWindowState::default();
    fill(&fw, &mut s, 31 * S + 7, 2, 2);
    let d = fw.peek(&s, 33 * S, 1).unwrap();
    assert_eq!(d.retry_after, 7 * S);
    assert!(!fw.peek(&s, 33 * S + d.retry_after - 1, 1).unwrap().allowed);
    assert!(fw.peek(&s, 33 * S + d.retry_after, 1).unwrap().allowed);
}

#[test]
fn peek_reports_without_charging() {
    let fw = fw(2);
    let mut s = FixedWindowState::default();
    for _ in 0..10 {
        assert_eq!(fw.peek(&s, S, 1).unwrap(), admitted(2, 1, 9 * S));
    }
    assert_eq!(s, FixedWindowState::default());
    fill(&fw, &mut s, S, 1, 2);
}

#[test]
fn a_clock_that_stepped_back_still_sees_the_later_window() {
    let fw = fw(2);
    let mut s = FixedWindowState::default();
    fill(&fw, &mut s, 25 * S, 1, 2);
    // Back to 15 s, an earlier window: the stricter reading keeps counting [20 s, 30 s).
    assert_eq!(verified_check(&fw, &mut s, 15 * S, 1), denied(2, 0, 15 * S, 15 * S));
    assert_eq!(verified_check(&fw, &mut s, 30 * S, 1), admitted(2, 1, W));
}

#[test]
fn bad_parameters_are_refused() {
    assert_eq!(FixedWindow::new(0, W), Err(ParamError::Zero { field: "limit" }));
    assert_eq!(FixedWindow::new(1, 0), Err(ParamError::Zero { field: "window" }));
    assert_eq!(fw(9).window(), W);
    assert_eq!(fw(9).limit(), 9);
}
