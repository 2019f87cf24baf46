//! Lossless eviction: what is evicted from a full shard is folded into a bounded summary that is
//! never looser than the states folded into it.
//!
//! ## Strictness
//!
//! A state `A` is *at least as strict as* `B` (`A ⪰ B`) when, for every request from now on,
//! `A` admitting it implies `B` admits it, and after both are charged `A ⪰ B` still holds. Then
//! any traffic `A` admits, `B` admits too, charge for charge: starting a key from `A` instead of
//! its own `B` can deny earlier, never admit beyond its limit. (It can admit a request `B`
//! would deny *later*, after `B` admitted one that `A` denied: the admitted traffic still fits
//! the limit, which is what "never loosen a limit" means.) Per algorithm, with time never going
//! backwards:
//!
//! - buckets (GCRA): `tat_A >= tat_B` (admission tests `max(tat, now) + cost * T - now`,
//!   increasing in `tat`; both charges add `cost * T` to `max(tat, now)`);
//! - fixed window: in the window of `now`, `count_A >= count_B` (both add `cost`; the next
//!   window starts both at zero);
//! - sliding window counter: in the window of `now`, `prev_A >= prev_B` and `curr_A >= curr_B`
//!   (the estimate grows with both; both add `cost` to `curr`; rolling over moves `curr` to
//!   `prev` in both);
//! - sliding log: for every `x`, the entries later than `x` are at least as many in `A` as in `B`
//!   (`live` is that count at `x = now - window`; both add `cost` entries at `now`, later than
//!   every entry).
//!
//! ## Cells and rows
//!
//! Each [`Summary`] is a cell type for one algorithm: [`Summary::of`] turns a state into a cell
//! whose [`Summary::state`] is `⪰` it; [`Summary::join`] is an upper bound of two cells (every
//! state `⪯` either is `⪯` the join) and [`Summary::meet`] a lower bound that stays above every
//! state both are above. The [`Sketch`] keeps `depth` rows of cells; a key has one cell per row,
//! picked by disjoint bits of its (keyed, uniformly random) hash. Folding a key joins its state
//! into each of its cells, so each of its cells is `⪰` its state when evicted, and stays so: a
//! later join only raises a cell, and a cell and a state age alike (both are evaluated at the
//! same `now`). A key absent from the table starts from the meet of its cells: every one of
//! them is `⪰` its evicted state, so their meet is too (the *least* strict of the rows, which is
//! the tightest bound the summary has). A key never evicted starts from a meet that is at
//! least fresh. A state the summary rebuilds is reached with the core's own `check` from a fresh
//! state, so it is a state the algorithm could hold.
//!
//! Cells read states only through the core's decisions (`remaining` and `reset_after` of a
//! request of cost 0, at `now` and at later times): no private field is needed.
//!
//! ## When the clock steps back
//!
//! The proofs assume `now` never decreases, as with every sluice clock. A state recorded in a
//! later window than `now` cannot be summarised safely: [`Summary::of`] returns `None` and the
//! shard keeps that key (refusing a new one if it has no other choice). A lookup earlier than
//! the summary's latest fold rebuilds, for the window algorithms, a saturated state
//! ([`Summary::saturated`]) that denies until every state folded so far is surely fresh.

mod bucket;
mod counter;
mod log;
mod sketch;
mod window;

use sluice_core::{Algorithm, Nanos};

pub(crate) use bucket::{BucketCell, Meter};
pub(crate) use counter::{CounterCell, aligned as window_start, following};
pub(crate) use log::{LogCell, SPAN, sub_window};
pub(crate) use sketch::Sketch;
pub(crate) use window::WindowCell;

/// A cell of an algorithm's fold summary. `Default` is the empty cell: a fresh state.
pub(crate) trait Summary<A: Algorithm>: Copy + Default + Send + 'static {
    /// A cell whose [`Summary::state`] is at least as strict as `state`, at `now` and later;
    /// `None` when that cannot be guaranteed (a state from a later window than `now`).
    fn of(alg: &A, state: &A::State, now: Nanos) -> Option<Self>;

    /// A cell at least as strict as both.
    fn join(self, other: Self, alg: &A, now: Nanos) -> Self;

    /// A cell at least as strict as every state that both `self` and `other` are at least as
    /// strict as, and no stricter than either.
    fn meet(self, other: Self, alg: &A, now: Nanos) -> Self;

    /// The state the cell stands for at `now`.
    fn state(self, alg: &A, now: Nanos) -> A::State;

    /// For a lookup at a `now` before `since`, the latest fold: a state at least as strict as
    /// any state folded until `since`; `None` when cells need no such care (they hold absolute
    /// times only).
    fn saturated(alg: &A, since: Nanos) -> Option<A::State>;
}

/// A fresh state charged with `cost` at `at`: how cells rebuild states with the core's own
/// `check`. A charge the algorithm refuses leaves the state as it was.
fn charged<A: Algorithm>(alg: &A, mut state: A::State, at: Nanos, cost: u64) -> (A::State, bool) {
    let admitted = cost == 0 || alg.check(&mut state, at, cost).is_ok_and(|d| d.allowed);
    (state, admitted)
}

/// Units counted by a state at `at` (`limit - remaining` of a request of cost 0).
fn counted<A: Algorithm>(alg: &A, state: &A::State, at: Nanos) -> u64 {
    alg.peek(state, at, 0).map_or(alg.limit(), |d| alg.limit() - d.remaining)
}

/// `reset_after` of a request of cost 0 at `now`: when the state is fresh again.
fn reset_after<A: Algorithm>(alg: &A, state: &A::State, now: Nanos) -> Nanos {
    alg.peek(state, now, 0).map_or(Nanos::MAX, |d| d.reset_after)
}

#[cfg(test)]
mod tests;
