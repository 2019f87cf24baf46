//! The rows of cells a shard folds evicted keys into.

use sluice_core::{Algorithm, Nanos};

use super::Summary;
use crate::memory::options::{MAX_FOLD_DEPTH, SHARD_BITS};

/// `depth` rows of `2^bits` cells: a count-min-style sketch that keeps, in each cell, an upper
/// bound of the states folded into it instead of a sum.
pub(crate) struct Sketch<C> {
    /// Row `r`'s cells are `cells[r << bits ..][.. 1 << bits]`.
    cells: Box<[C]>,
    /// log2 of the cells per row.
    bits: u32,
    /// Rows.
    depth: usize,
    /// The latest time anything was folded: a lookup before it (the clock stepped back) cannot
    /// trust cells that age.
    since: Nanos,
}

impl<C: Copy + Default> Sketch<C> {
    /// Empty rows: `depth` (1 to [`MAX_FOLD_DEPTH`]) rows of `2^bits` cells, `bits * depth` at
    /// most the key bits left to rows.
    pub(crate) fn new(bits: u32, depth: usize) -> Self {
        debug_assert!((1..=MAX_FOLD_DEPTH).contains(&depth) && bits * depth as u32 <= 128 - SHARD_BITS);
        Self { cells: vec![C::default(); depth << bits].into_boxed_slice(), bits, depth, since: 0 }
    }

    /// The cell of `key` in each row: row `r` reads bits `r * bits ..` of the key bits the shard
    /// choice leaves alone (all of the first 64, and the last 64 above the shard bits), so rows
    /// are independent of each other and of the shard.
    fn cells_of(&self, key: &[u8; 16]) -> impl Iterator<Item = usize> + use<C> {
        let lo = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
        let source = u128::from(lo) | (u128::from(hi >> SHARD_BITS) << 64);
        let (bits, mask) = (self.bits, (1u128 << self.bits) - 1);
        (0..self.depth).map(move |r| (r << bits) | ((source >> (r as u32 * bits)) & mask) as usize)
    }

    /// Folds `cell` (a key's state, see [`Summary::of`]) into the key's cell of every row.
    pub(crate) fn fold<A: Algorithm>(&mut self, alg: &A, key: &[u8; 16], cell: C, now: Nanos)
    where
        C: Summary<A>,
    {
        for i in self.cells_of(key) {
            self.cells[i] = self.cells[i].join(cell, alg, now);
        }
        self.since = self.since.max(now);
    }

    /// The state `key` starts from when it is not in the table: the meet of its cells (at least
    /// as strict as whatever state it was last evicted with), or a saturated state when `now` is
    /// before the latest fold.
    pub(crate) fn seed<A: Algorithm>(&self, alg: &A, key: &[u8; 16], now: Nanos) -> A::State
    where
        C: Summary<A>,
    {
        if now < self.since
            && let Some(saturated) = C::saturated(alg, self.since)
        {
            return saturated;
        }
        let meet = self.cells_of(key).map(|i| self.cells[i]).reduce(|a, b| a.meet(b, alg, now));
        meet.unwrap_or_default().state(alg, now)
    }

    /// The bytes the cells take.
    pub(crate) fn bytes(&self) -> usize {
        size_of_val(&*self.cells)
    }

    /// (log2 of the cells per row, rows): what a snapshot's cells must match to be put back in
    /// place.
    pub(crate) fn layout(&self) -> (u32, usize) {
        (self.bits, self.depth)
    }

    /// The latest time anything was folded.
    pub(crate) fn since(&self) -> Nanos {
        self.since
    }

    /// Every cell, with its index (row `r`'s cells after `r << bits`).
    pub(crate) fn cells(&self) -> impl Iterator<Item = (usize, C)> + '_ {
        self.cells.iter().copied().enumerate()
    }

    /// Joins `cell` into the cell at `index` (a cell read back from a snapshot) and counts `at`
    /// as a fold time. False, changing nothing, when there is no such cell.
    pub(crate) fn restore<A: Algorithm>(&mut self, index: usize, cell: C, alg: &A, at: Nanos, now: Nanos) -> bool
    where
        C: Summary<A>,
    {
        let Some(slot) = self.cells.get_mut(index) else { return false };
        *slot = slot.join(cell, alg, now);
        self.since = self.since.max(at);
        true
    }

    /// Joins `cell` into every cell and counts `at` as a fold time: a summary at least as strict
    /// as whatever `cell` bounds, whichever key asks (for cells whose keys cannot be placed).
    pub(crate) fn restore_everywhere<A: Algorithm>(&mut self, cell: C, alg: &A, at: Nanos, now: Nanos)
    where
        C: Summary<A>,
    {
        for slot in self.cells.iter_mut() {
            *slot = slot.join(cell, alg, now);
        }
        self.since = self.since.max(at);
    }
}
