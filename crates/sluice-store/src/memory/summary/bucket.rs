//! The buckets' cell: the latest theoretical arrival time (TAT) of the keys folded into it.
//!
//! A GCRA state is one number, `tat`, and `tat_A >= tat_B` is exactly "A is at least as strict as
//! B": the join is the max, the meet the min. `tat` is absolute time, so a cell needs no care
//! when the clock steps back. It is read as `now + reset_after` (the time until the bucket is
//! full again) and rebuilt by charging one token to a fresh bucket at `tat - T`, which leaves
//! exactly `tat`.

use sluice_core::{Algorithm, GcraState, LeakyBucket, Nanos, TokenBucket};

use super::{Summary, charged, reset_after};

/// The latest TAT folded in; 0 (a full bucket) when empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BucketCell {
    /// A bucket whose TAT is this is at least as strict as every bucket folded in.
    pub(crate) tat: Nanos,
}

/// A bucket algorithm with its emission interval (nanoseconds per token).
pub(crate) trait Meter: Algorithm<State = GcraState> + Copy {
    /// Nanoseconds per token.
    fn token_interval(&self) -> Nanos;
}

impl Meter for TokenBucket {
    fn token_interval(&self) -> Nanos {
        self.interval()
    }
}

impl Meter for LeakyBucket {
    fn token_interval(&self) -> Nanos {
        self.interval()
    }
}

impl<A: Meter> Summary<A> for BucketCell {
    fn of(alg: &A, state: &GcraState, now: Nanos) -> Option<Self> {
        // `reset_after` is `max(tat, now) - now`: exact whenever the state is not fresh.
        Some(Self { tat: now.saturating_add(reset_after(alg, state, now)) })
    }

    fn join(self, other: Self, _: &A, _: Nanos) -> Self {
        Self { tat: self.tat.max(other.tat) }
    }

    fn meet(self, other: Self, _: &A, _: Nanos) -> Self {
        Self { tat: self.tat.min(other.tat) }
    }

    fn state(self, alg: &A, now: Nanos) -> GcraState {
        if self.tat <= now {
            return GcraState::default();
        }
        // One token charged at `tat - T` leaves `tat` (a TAT below `T`, within the first token
        // interval of the epoch, becomes `T`: later, the strict direction).
        let at = self.tat.saturating_sub(alg.token_interval());
        let (state, admitted) = charged(alg, GcraState::default(), at, 1);
        debug_assert!(admitted, "one token of a full bucket");
        state
    }

    fn saturated(_: &A, _: Nanos) -> Option<GcraState> {
        None
    }
}
