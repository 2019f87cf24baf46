//! Sliding log, hand-computed: a 10 s window; an entry admitted at t counts while t > now - 10 s.

mod common;

use common::{fill, verified_check};
use sluice_core::{Algorithm, CostError, Decision, NANOS_PER_SEC, ParamError, SlidingLog, SlidingLogState};

const S: u64 = NANOS_PER_SEC;
const W: u64 = 10 * S;

fn log(limit: u64) -> SlidingLog {
    SlidingLog::new(limit, W).unwrap()
}

fn admitted(limit: u64, remaining: u64, reset_after: u64) -> Decision {
    Decision { allowed: true, limit, remaining, reset_after, retry_after: 0, delay: 0 }
}

fn denied(limit: u64, remaining: u64, reset_after: u64, retry_after: u64) -> Decision {
    Decision { allowed: false, limit, remaining, reset_after, retry_after, delay: 0 }
}

#[test]
fn counts_the_last_window_exactly() {
    let log = log(3);
    let mut s = SlidingLogState::default();
    assert_eq!(verified_check(&log, &mut s, S, 1), admitted(3, 2, W));
    assert_eq!(verified_check(&log, &mut s, 2 * S, 1), admitted(3, 1, W));
    assert_eq!(verified_check(&log, &mut s, 3 * S, 1), admitted(3, 0, W));
    // The entry from 1 s leaves at 11 s; the log is empty again at 13 s.
    assert_eq!(verified_check(&log, &mut s, 4 * S, 1), denied(3, 0, 9 * S, 7 * S));
    assert_eq!(verified_check(&log, &mut s, 11 * S - 1, 1), denied(3, 0, 2 * S + 1, 1));
}

#[test]
fn an_entry_leaves_exactly_one_window_after_it_was_admitted() {
    let log = log(3);
    let mut s = SlidingLogState::default();
    for t in 1..=3 {
        verified_check(&log, &mut s, t * S, 1);
    }
    // At 11 s the entry from 1 s is out (1 s > 11 s - 10 s is false), the others count.
    assert_eq!(verified_check(&log, &mut s, 11 * S, 1), admitted(3, 0, W));
    assert_eq!(verified_check(&log, &mut s, 11 * S, 1), denied(3, 0, W, S));
    assert_eq!(verified_check(&log, &mut s, 12 * S, 1), admitted(3, 0, W));
}

#[test]
fn cost_above_one_waits_for_as_many_entries_to_leave() {
    let log = log(3);
    let mut s = SlidingLogState::default();
    for t in 1..=3 {
        verified_check(&log, &mut s, t * S, 1);
    }
    // Two units must leave: the second oldest (2 s) leaves at 12 s.
    assert_eq!(verified_check(&log, &mut s, 5 * S, 2), denied(3, 0, 8 * S, 7 * S));
    assert_eq!(verified_check(&log, &mut s, 11 * S, 2), denied(3, 1, 2 * S, S));
    assert_eq!(verified_check(&log, &mut s, 12 * S, 2), admitted(3, 0, W));
    assert_eq!(s.len(), 3);
}

#[test]
fn a_cost_above_the_limit_is_an_error_not_a_denial() {
    let log = log(3);
    let mut s = SlidingLogState::default();
    assert_eq!(log.check(&mut s, S, 4), Err(CostError { cost: 4, capacity: 3 }));
    assert_eq!(log.peek(&s, S, 4), Err(CostError { cost: 4, capacity: 3 }));
    assert!(s.is_empty());
    assert_eq!(verified_check(&log, &mut s, S, 3), admitted(3, 0, W));
}

#[test]
fn cost_zero_is_admitted_and_reports_the_true_reset() {
    let log = log(3);
    let mut s = SlidingLogState::default();
    assert_eq!(verified_check(&log, &mut s, S, 0), admitted(3, 3, 0));
    assert!(s.is_empty());
    for t in 1..=3 {
        verified_check(&log, &mut s, t * S, 1);
    }
    // Nothing is recorded, so the log still empties when the entry from 3 s leaves.
    assert_eq!(verified_check(&log, &mut s, 5 * S, 0), admitted(3, 0, 8 * S));
    assert_eq!(s.len(), 3);
}

#[test]
fn time_standing_still_admits_exactly_the_limit() {
    let log = log(4);
    let mut s = SlidingLogState::default();
    let decisions: Vec<Decision> = (0..10).map(|_| verified_check(&log, &mut s, 7 * S, 1)).collect();
    let remaining: Vec<u64> = decisions[..4].iter().map(|d| d.remaining).collect();
    assert_eq!(remaining, [3, 2, 1, 0]);
    assert!(decisions[4..].iter().all(|d| *d == denied(4, 0, W, W)));
}

#[test]
fn the_log_never_holds_more_than_limit_timestamps() {
    let log = log(5);
    let mut s = SlidingLogState::default();
    let mut now = 0;
    for i in 0..2_000u64 {
        now += (i * 7919) % (3 * S); // an irregular but deterministic arrival pattern
        verified_check(&log, &mut s, now, 1 + i % 3);
        assert!(s.len() <= 5, "{} timestamps held", s.len());
    }
}

#[test]
fn huge_gaps_and_the_end_of_time_neither_overflow_nor_panic() {
    let log = log(3);
    let mut s = SlidingLogState::default();
    fill(&log, &mut s, S, 1, 3);
    assert_eq!(verified_check(&log, &mut s, u64::MAX / 2, 1), admitted(3, 2, W));
    assert_eq!(s.len(), 1, "expired entries are pruned");
    assert_eq!(verified_check(&log, &mut s, u64::MAX - 1, 1), admitted(3, 2, W));
    fill(&log, &mut s, u64::MAX, 1, 2);
    // The entry from MAX - 1 would leave at MAX - 1 + W, past the end of u64 time.
    assert_eq!(verified_check(&log, &mut s, u64::MAX, 1), denied(3, 0, W, W - 1));
}

#[test]
fn a_limit_near_u64_max_does_not_overflow() {
    let log = SlidingLog::new(u64::MAX, W).unwrap();
    let mut s = SlidingLogState::default();
    assert_eq!(verified_check(&log, &mut s, S, 1), admitted(u64::MAX, u64::MAX - 1, W));
    assert_eq!(verified_check(&log, &mut s, 2 * S, u64::MAX), denied(u64::MAX, u64::MAX - 1, 9 * S, 9 * S));
}

#[test]
fn retry_after_is_exact_to_the_nanosecond() {
    let log = log(2);
    let mut s = SlidingLogState::default();
    verified_check(&log, &mut s, 1_234_567_891, 1);
    verified_check(&log, &mut s, 5 * S + 3, 1);
    let d = log.peek(&s, 6 * S, 1).unwrap();
    assert_eq!(d.retry_after, 1_234_567_891 + W - 6 * S);
    assert!(!log.peek(&s, 6 * S + d.retry_after - 1, 1).unwrap().allowed);
    assert!(log.peek(&s, 6 * S + d.retry_after, 1).unwrap().allowed);
    // Both must leave for a cost of 2.
    let d = log.peek(&s, 6 * S, 2).unwrap();
    assert_eq!(d.retry_after, 5 * S + 3 + W - 6 * S);
}

#[test]
fn peek_reports_without_charging() {
    let log = log(2);
    let mut s = SlidingLogState::default();
    verified_check(&log, &mut s, S, 1);
    let before = s.clone();
    for _ in 0..5 {
        assert_eq!(log.peek(&s, 2 * S, 1).unwrap(), admitted(2, 0, W));
    }
    assert_eq!(s, before);
}

#[test]
fn a_clock_that_stepped_back_keeps_the_log_ordered_and_reports_the_true_reset() {
    let log = log(2);
    let mut s = SlidingLogState::default();
    verified_check(&log, &mut s, 20 * S, 1);
    // Recorded no earlier than the newest entry: the log empties at 30 s.
    assert_eq!(verified_check(&log, &mut s, 15 * S, 1), admitted(2, 0, 15 * S));
    assert_eq!(verified_check(&log, &mut s, 16 * S, 1), denied(2, 0, 14 * S, 14 * S));
    assert_eq!(verified_check(&log, &mut s, 30 * S, 2), admitted(2, 0, W));
}

#[test]
fn bad_parameters_are_refused() {
    assert_eq!(SlidingLog::new(0, W), Err(ParamError::Zero { field: "limit" }));
    assert_eq!(SlidingLog::new(1, 0), Err(ParamError::Zero { field: "window" }));
    assert_eq!(log(3).window(), W);
}
