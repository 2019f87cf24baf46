//! Checks shared by the per-algorithm tests: every decision is verified against what it claims.
//!
//! `verified_check` runs one `check` and then proves, by replaying from copies of the state,
//! that the decision tells the truth: `peek` agrees with it, a denial changes no later decision,
//! `retry_after` is exact to the nanosecond, `remaining` is exact, and the key is fresh exactly
//! at `now + reset_after`.

#![allow(dead_code)] // each test file uses its own subset

use sluice_core::{Algorithm, Decision, Nanos};

/// Offsets from `now` at which a state's future decisions are compared.
const PROBES: [Nanos; 9] = [0, 1, 2, 999, 1_000_000, 999_999_999, 1_000_000_000, 3_600_000_000_000, 1 << 62];

/// Runs `check` and asserts everything the returned decision promises (see the module docs).
pub fn verified_check<A>(alg: &A, state: &mut A::State, now: Nanos, cost: u64) -> Decision
where
    A: Algorithm,
{
    let before = state.clone();
    let peeked = alg.peek(state, now, cost).expect("cost within capacity");
    let d = alg.check(state, now, cost).expect("cost within capacity");
    assert_eq!(peeked, d, "peek and check disagree at {now} for cost {cost}");
    assert_eq!(d.limit, alg.limit());
    if d.allowed {
        assert_eq!(d.retry_after, 0, "an admission has no retry time");
    } else {
        assert_retry_exact(alg, &before, now, cost, d.retry_after);
        assert_same_future(alg, &before, state, now);
    }
    assert_reset_exact(alg, state, now, d.reset_after);
    assert_remaining_exact(alg, state, now, d.remaining);
    d
}

/// A denied request of `cost` at `now` is admitted at `now + retry_after` and not one
/// nanosecond earlier, if nothing else happens in between.
pub fn assert_retry_exact<A: Algorithm>(alg: &A, state: &A::State, now: Nanos, cost: u64, retry_after: Nanos) {
    assert!(retry_after > 0, "a denial at {now} must wait");
    match now.checked_add(retry_after) {
        Some(at) => {
            assert!(
                alg.peek(state, at, cost).unwrap().allowed,
                "not admitted at now {now} + retry_after {retry_after}"
            );
            assert!(!alg.peek(state, at - 1, cost).unwrap().allowed, "admitted 1 ns before now {now} + {retry_after}");
        }
        // The retry time lies beyond the end of representable time: never admitted before it.
        None => assert!(!alg.peek(state, Nanos::MAX, cost).unwrap().allowed),
    }
}

/// Two states decide every later request alike (a denial charged nothing).
pub fn assert_same_future<A: Algorithm>(alg: &A, a: &A::State, b: &A::State, now: Nanos) {
    for off in PROBES {
        let Some(at) = now.checked_add(off) else { continue };
        for cost in [1, alg.limit()] {
            assert_eq!(alg.peek(a, at, cost), alg.peek(b, at, cost), "states differ at {at} for cost {cost}");
        }
    }
}

/// The key is fresh at `now + reset_after` and, when `reset_after > 0`, not one nanosecond before.
pub fn assert_reset_exact<A: Algorithm>(alg: &A, state: &A::State, now: Nanos, reset_after: Nanos) {
    if let Some(at) = now.checked_add(reset_after) {
        assert!(alg.is_fresh(state, at), "not fresh at now {now} + reset_after {reset_after}");
        if reset_after > 0 {
            assert!(!alg.is_fresh(state, at - 1), "fresh before now {now} + reset_after {reset_after}");
        }
    }
}

/// Exactly `remaining` requests of cost 1 are admitted back to back at `now` (checked when small).
pub fn assert_remaining_exact<A: Algorithm>(alg: &A, state: &A::State, now: Nanos, remaining: u64) {
    if remaining > 10_000 {
        return;
    }
    let mut s = state.clone();
    let mut admitted = 0;
    while alg.check(&mut s, now, 1).unwrap().allowed {
        admitted += 1;
        assert!(admitted <= remaining, "more than remaining = {remaining} admitted at {now}");
    }
    assert_eq!(admitted, remaining, "remaining at {now}");
}

/// Admits `n` requests of `cost` at `now`, verifying each, and returns the last decision.
pub fn fill<A: Algorithm>(alg: &A, state: &mut A::State, now: Nanos, cost: u64, n: u64) -> Decision {
    let mut last = None;
    for i in 0..n {
        let d = verified_check(alg, state, now, cost);
        assert!(d.allowed, "request {i} of {n} at {now} denied");
        last = Some(d);
    }
    last.expect("n > 0")
}
