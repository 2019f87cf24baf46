//! One shard of a policy's table: its slots (see [`super::storage`]), its bound and eviction.
//!
//! A shard holds at most `cap` keys. When a new key needs room, [`ShardOps::make_room`] first
//! drops entries that are fresh (a fresh entry decides every request exactly as an absent key,
//! so dropping it changes no decision), examining at most [`FRESH_SCAN`] entries per step from a
//! cursor that sweeps the shard, so every entry is looked at in turn and no request pays for a
//! full scan; if none of them is fresh, it evicts the least recently used of [`LRU_SAMPLE`]
//! sampled entries and folds its state into the shard's summary ([`WhenFull::Fold`], see
//! [`super::summary`]), evicts it and forgets it ([`WhenFull::Forget`]), or refuses
//! ([`WhenFull::Refuse`]). A key not in the table starts from its summary state (a fresh state
//! until anything was folded).
//!
//! "Last used" is a 4-byte stamp per entry from a shard-local counter that ticks on every use,
//! so recency is exact within a shard and costs no clock read; ages are compared with wrapping
//! arithmetic.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sluice_core::{CostError, Decision, Nanos, State};

use super::counters::Counters;
use super::layout::Stored;
use super::options::{MemoryOptions, WhenFull};
use super::slot::Slot;
use super::snapshot::cells::{Frame, Persist};
use super::storage::Storage;
use super::summary::{Sketch, Summary};
use crate::key::KeyHash;

/// Entries examined for freshness per make-room step.
pub const FRESH_SCAN: usize = 32;
/// Entries sampled per LRU eviction; a shard of at most this many keys evicts exactly its least
/// recently used key.
pub const LRU_SAMPLE: usize = 16;

/// Why a single-check decision in a shard failed.
pub(crate) enum ShardError {
    /// The cost can never be admitted.
    Cost(CostError),
    /// The shard is full and refuses new keys.
    Full,
}

impl From<CostError> for ShardError {
    fn from(e: CostError) -> Self {
        ShardError::Cost(e)
    }
}

/// What the store asks of a shard, whatever its algorithm.
pub(crate) trait ShardOps: Send {
    /// Decides one check alone: charges it in place, or inserts the key (making room) when a new
    /// key's request is admitted.
    fn decide_one(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, ShardError>;

    /// True when `key` is stored.
    fn contains(&self, key: &KeyHash) -> bool;

    /// The decision a check would get, charging nothing; marks the key used.
    fn peek(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError>;

    /// A copy of the key's state (its summary state when absent), for a request's working copy.
    fn working(&mut self, key: &KeyHash, now: Nanos) -> State;

    /// Makes room for `needed` new keys, never removing a key in `keep`. False when it cannot
    /// (refusing, or every remaining entry is kept).
    fn make_room(&mut self, needed: usize, keep: &[KeyHash], now: Nanos) -> bool;

    /// Charges a check to a stored key (after [`ShardOps::peek`] admitted it).
    fn charge(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError>;

    /// Settles a charge of `reserved` made at `charged_at` at `actual` ([`sluice_core::Algorithm::settle`]).
    /// False when a debt had to be stored for a key not held and the shard refuses new keys.
    fn settle(&mut self, key: &KeyHash, charged_at: Nanos, reserved: u64, actual: u64, now: Nanos) -> bool;

    /// Charges units holds set apart and spent ([`sluice_core::Algorithm::charge_held`]), each
    /// `(at, units)` in turn on one state. False when the key was not held and the shard
    /// refuses new keys.
    fn charge_held(&mut self, key: &KeyHash, charges: &[(Nanos, u64)], now: Nanos) -> bool;

    /// Stores a working copy: overwrites the key's state, or inserts it (room was made) unless it
    /// is fresh.
    fn store(&mut self, key: &KeyHash, state: State, now: Nanos);

    /// The number of keys held.
    fn len(&self) -> usize;

    /// An estimate of the heap bytes held: slots, index and summary (not a sliding log's
    /// queues).
    fn bytes(&self) -> usize;

    /// Bytes of one snapshot cell of this shard's algorithm.
    fn cell_bytes(&self) -> usize;

    /// The summary's size, (log2 of cells per row, rows), under [`WhenFull::Fold`].
    fn fold_layout(&self) -> Option<(u32, usize)>;

    /// Appends this shard's snapshot block as of `now` (see [`super::snapshot`]): its entries
    /// that are not fresh, least recently used first, and its summary's live cells.
    fn export(&self, now: Nanos, out: &mut Vec<u8>) -> Exported;

    /// Puts back an entry read from a snapshot: its cell moved into this process's clock and
    /// rebuilt, stored unless fresh, making room as a new key would. `Err` names what no writer
    /// writes.
    fn import_entry(&mut self, key: &KeyHash, cell: &[u8], frame: &Frame) -> Result<Imported, &'static str>;

    /// Joins a summary cell read from a snapshot into this shard's cell `index` (the summary
    /// has the layout the snapshot's had); `since` is the old summary's latest fold. False when
    /// this shard keeps no summary.
    fn import_cell(&mut self, index: usize, cell: &[u8], since: Nanos, frame: &Frame) -> Result<bool, &'static str>;

    /// Joins a summary cell read from a snapshot, moved, into `acc` (an encoded cell, empty at
    /// first): the bound of cells whose keys cannot be placed.
    fn join_cell(&self, acc: &mut Vec<u8>, cell: &[u8], frame: &Frame) -> Result<(), &'static str>;

    /// Joins `cell` (from [`ShardOps::join_cell`]) into every cell of the summary, allocating
    /// it; `since` as in [`ShardOps::import_cell`]. False when this shard keeps no summary.
    fn import_everywhere(&mut self, cell: &[u8], since: Nanos, frame: &Frame) -> bool;
}

/// What [`ShardOps::export`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Exported {
    /// Entries written.
    pub(crate) entries: u64,
    /// Summary cells written.
    pub(crate) cells: u64,
    /// Entries and cells left out: recorded at times later than the store's clock (explicit
    /// times), which no cell as of `now` can stand for.
    pub(crate) unwritable: u64,
}

/// What became of an entry read from a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Imported {
    /// Stored.
    Stored,
    /// Fresh by now: nothing to store.
    Fresh,
    /// The shard is full and refuses new keys ([`WhenFull::Refuse`]).
    Refused,
}

/// What every shard of a table shares.
pub(crate) struct Setup {
    /// What a full shard does.
    pub(crate) when_full: WhenFull,
    /// Under [`WhenFull::Fold`], each shard's summary size: (log2 of cells per row, rows).
    pub(crate) fold: Option<(u32, usize)>,
    /// The table's counters.
    pub(crate) counters: Arc<Counters>,
}

impl Setup {
    /// The setup of a table of `shards` shards under `options`.
    pub(crate) fn new(options: &MemoryOptions, shards: usize, counters: Arc<Counters>) -> Self {
        let fold = match options.when_full {
            WhenFull::Fold(size) => Some(size.per_shard(options.max_keys, shards)),
            WhenFull::Refuse | WhenFull::Forget => None,
        };
        Self { when_full: options.when_full, fold, counters }
    }
}

/// One shard for algorithm `A`.
pub(crate) struct Shard<A: Stored> {
    alg: A,
    slots: A::Storage,
    cap: usize,
    when_full: WhenFull,
    /// Next position the freshness sweep examines.
    cursor: usize,
    /// Logical clock for last-used stamps: one tick per use.
    tick: u32,
    /// xorshift state for LRU sampling.
    rng: u64,
    counters: Arc<Counters>,
    /// Under [`WhenFull::Fold`], the summary's size: (log2 of cells per row, rows).
    fold: Option<(u32, usize)>,
    /// The summary, allocated when the first live key is folded (its size never changes).
    sketch: Option<Box<Sketch<A::Cell>>>,
}

impl<A: Stored> Shard<A> {
    /// An empty shard of at most `cap` keys, of a table whose shards share `setup`.
    pub(crate) fn new(alg: A, cap: usize, seed: u64, setup: &Setup) -> Self {
        Self {
            alg,
            slots: A::Storage::default(),
            cap,
            when_full: setup.when_full,
            cursor: 0,
            tick: 0,
            rng: seed | 1,
            counters: Arc::clone(&setup.counters),
            fold: setup.fold,
            sketch: None,
        }
    }

    /// The state a key not in the table starts from.
    fn seed(&self, key: &KeyHash, now: Nanos) -> A::State {
        match &self.sketch {
            Some(sketch) => sketch.seed(&self.alg, &key.0, now),
            None => A::State::default(),
        }
    }

    fn next_tick(&mut self) -> u32 {
        self.tick = self.tick.wrapping_add(1);
        self.tick
    }

    /// The slot of `key`, marked used.
    fn used(&mut self, key: &KeyHash) -> Option<&mut A::Slot> {
        let pos = self.slots.find(&key.0)?;
        let tick = self.next_tick();
        let slot = self.slots.get_mut(pos)?;
        slot.set_stamp(tick);
        Some(slot)
    }

    fn insert(&mut self, key: &KeyHash, state: A::State) {
        let tick = self.next_tick();
        self.slots.insert(A::Slot::new(key.0, tick, state), self.cap);
    }

    /// Drops fresh entries among the next [`FRESH_SCAN`] the sweep reaches. True if any was dropped.
    fn drop_fresh(&mut self, now: Nanos, keep: &[KeyHash]) -> bool {
        let alg = self.alg;
        let positions = self.slots.positions();
        let mut examined = 0;
        let mut probes = 0;
        let mut dropped = 0;
        // Probes bound the walk over empty positions; a dropped entry's position is examined again.
        while examined < FRESH_SCAN && probes < positions + FRESH_SCAN && self.slots.len() > 0 {
            probes += 1;
            if self.cursor >= self.slots.positions() {
                self.cursor = 0;
            }
            let pos = self.cursor;
            let drop = match self.slots.get(pos) {
                None => false,
                Some(slot) => {
                    examined += 1;
                    slot.read(|s| alg.is_fresh(s, now)) && !keep.iter().any(|k| &k.0 == slot.key())
                }
            };
            if drop {
                self.slots.remove(pos);
                dropped += 1;
            } else {
                self.cursor += 1;
            }
        }
        self.counters.evicted_fresh.fetch_add(dropped, Ordering::Relaxed);
        dropped > 0
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64: enough to spread samples over a shard.
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Evicts the least recently used of up to [`LRU_SAMPLE`] sampled entries (all of them in a
    /// small shard), folding its state into the summary under [`WhenFull::Fold`]. False when
    /// every candidate is kept, or when the victim's state cannot be folded (it was recorded
    /// after `now`: the clock stepped back).
    fn evict_lru(&mut self, keep: &[KeyHash], now: Nanos) -> bool {
        let positions = self.slots.positions();
        let mut oldest: Option<(u32, usize)> = None;
        let consider = |this: &Self, pos: usize, oldest: &mut Option<(u32, usize)>| -> bool {
            let Some(slot) = this.slots.get(pos) else { return false };
            if !keep.iter().any(|k| &k.0 == slot.key()) {
                let age = this.tick.wrapping_sub(slot.stamp());
                if oldest.is_none_or(|(a, _)| age > a) {
                    *oldest = Some((age, pos));
                }
            }
            true
        };
        if self.slots.len() <= LRU_SAMPLE {
            for pos in 0..positions {
                consider(self, pos, &mut oldest);
            }
        } else {
            // Random positions until enough hold an entry (a table is at least 7/16 full after
            // it grew; the probe bound only guards against a table emptied by drops).
            let mut sampled = 0;
            for _ in 0..8 * LRU_SAMPLE {
                let pos = (self.next_random() % positions as u64) as usize;
                if consider(self, pos, &mut oldest) {
                    sampled += 1;
                    if sampled == LRU_SAMPLE {
                        break;
                    }
                }
            }
        }
        let Some((_, pos)) = oldest else { return false };
        if let Some((bits, depth)) = self.fold
            && !self.fold_slot(pos, bits, depth, now)
        {
            return false;
        }
        self.slots.remove(pos);
        self.counters.evicted_lru.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Folds the state at `pos` into the summary (allocated now if this is the first fold).
    /// False, folding nothing, when the state cannot be summarised.
    fn fold_slot(&mut self, pos: usize, bits: u32, depth: usize, now: Nanos) -> bool {
        let alg = self.alg;
        let Some(slot) = self.slots.get(pos) else { return false };
        let Some(cell) = slot.read(|s| A::Cell::of(&alg, s, now)) else { return false };
        let key = *slot.key();
        self.sketch.get_or_insert_with(|| Box::new(Sketch::new(bits, depth))).fold(&alg, &key, cell, now);
        true
    }
}

impl<A: Stored> ShardOps for Shard<A>
where
    A::State: Clone,
{
    fn decide_one(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, ShardError> {
        let alg = self.alg;
        if let Some(slot) = self.used(key) {
            return Ok(slot.write(|s| alg.check(s, now, cost))?);
        }
        let mut state = self.seed(key, now);
        let d = alg.check(&mut state, now, cost)?;
        if d.allowed && !alg.is_fresh(&state, now) {
            if !self.make_room(1, &[], now) {
                return Err(ShardError::Full);
            }
            self.insert(key, state);
        }
        Ok(d)
    }

    fn contains(&self, key: &KeyHash) -> bool {
        self.slots.find(&key.0).is_some()
    }

    fn peek(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        let alg = self.alg;
        match self.used(key) {
            Some(slot) => slot.read(|s| alg.peek(s, now, cost)),
            None => alg.peek(&self.seed(key, now), now, cost),
        }
    }

    fn working(&mut self, key: &KeyHash, now: Nanos) -> State {
        match self.used(key) {
            Some(slot) => A::wrap(slot.read(|s| s.clone())),
            None => A::wrap(self.seed(key, now)),
        }
    }

    fn make_room(&mut self, needed: usize, keep: &[KeyHash], now: Nanos) -> bool {
        while self.slots.len() + needed > self.cap {
            if self.drop_fresh(now, keep) {
                continue;
            }
            let evicted = match self.when_full {
                WhenFull::Refuse => false,
                WhenFull::Fold(_) | WhenFull::Forget => self.evict_lru(keep, now),
            };
            if !evicted {
                return false;
            }
        }
        true
    }

    fn charge(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        let alg = self.alg;
        match self.used(key) {
            Some(slot) => slot.write(|s| alg.check(s, now, cost)),
            // Not reached: the store charges in place only keys it found and kept.
            None => alg.check(&mut A::State::default(), now, cost),
        }
    }

    fn settle(&mut self, key: &KeyHash, charged_at: Nanos, reserved: u64, actual: u64, now: Nanos) -> bool {
        let alg = self.alg;
        if let Some(slot) = self.used(key) {
            slot.write(|s| alg.settle(s, charged_at, reserved, actual, now));
            return true;
        }
        // Not held: fresh again, or folded into the summary. Nothing to give back (a folded
        // key keeps its charge: the strict direction); a debt is stored like a new key's charge.
        if actual <= reserved {
            return true;
        }
        let mut state = self.seed(key, now);
        alg.overrun(&mut state, now, actual - reserved);
        if alg.is_fresh(&state, now) {
            return true;
        }
        if !self.make_room(1, &[], now) {
            return false;
        }
        self.insert(key, state);
        true
    }

    fn charge_held(&mut self, key: &KeyHash, charges: &[(Nanos, u64)], now: Nanos) -> bool {
        let alg = self.alg;
        let charge = |s: &mut A::State| charges.iter().for_each(|&(at, units)| alg.charge_held(s, at, units));
        if let Some(slot) = self.used(key) {
            slot.write(charge);
            return true;
        }
        let mut state = self.seed(key, now);
        charge(&mut state);
        if alg.is_fresh(&state, now) {
            return true;
        }
        if !self.make_room(1, &[], now) {
            return false;
        }
        self.insert(key, state);
        true
    }

    fn store(&mut self, key: &KeyHash, state: State, now: Nanos) {
        let Some(state) = A::unwrap(state) else {
            debug_assert!(false, "a working copy of another algorithm");
            return;
        };
        let fresh = self.alg.is_fresh(&state, now);
        match self.used(key) {
            Some(slot) => slot.replace(state),
            None if fresh => {}
            None => self.insert(key, state),
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }

    fn bytes(&self) -> usize {
        self.slots.bytes() + self.sketch.as_ref().map_or(0, |s| s.bytes())
    }

    fn cell_bytes(&self) -> usize {
        <A::Cell as Persist<A>>::BYTES
    }

    fn fold_layout(&self) -> Option<(u32, usize)> {
        self.fold
    }

    fn export(&self, now: Nanos, out: &mut Vec<u8>) -> Exported {
        let alg = self.alg;
        let mut done = Exported::default();
        out.extend_from_slice(&now.to_le_bytes());
        // Oldest first, so that a smaller store reading it back evicts the least recently used.
        let mut order: Vec<(u32, usize)> = (0..self.slots.positions())
            .filter_map(|pos| self.slots.get(pos).map(|slot| (self.tick.wrapping_sub(slot.stamp()), pos)))
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        for (_, pos) in order {
            let Some(slot) = self.slots.get(pos) else { continue };
            let cell = slot.read(|s| (!alg.is_fresh(s, now)).then(|| A::Cell::of(&alg, s, now)));
            match cell {
                None => {}
                Some(Some(cell)) if cell.fits(&alg, now) => {
                    out.extend_from_slice(slot.key());
                    cell.encode(out);
                    done.entries += 1;
                }
                Some(_) => done.unwritable += 1,
            }
        }
        let entries = u32::try_from(done.entries).expect("a shard holds fewer than 2^32 keys");
        out[count_at..count_at + 4].copy_from_slice(&entries.to_le_bytes());
        let Some(sketch) = &self.sketch else {
            out.push(0);
            return done;
        };
        let (bits, depth) = sketch.layout();
        out.extend_from_slice(&[1, bits as u8, depth as u8]);
        out.extend_from_slice(&sketch.since().min(now).to_le_bytes());
        let count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        for (index, cell) in sketch.cells() {
            if !cell.live(&alg, now) {
                continue;
            }
            match u32::try_from(index) {
                Ok(index) if cell.fits(&alg, now) => {
                    out.extend_from_slice(&index.to_le_bytes());
                    cell.encode(out);
                    done.cells += 1;
                }
                _ => done.unwritable += 1,
            }
        }
        let cells = u32::try_from(done.cells).expect("fewer than 2^32 cells");
        out[count_at..count_at + 4].copy_from_slice(&cells.to_le_bytes());
        done
    }

    fn import_entry(&mut self, key: &KeyHash, cell: &[u8], frame: &Frame) -> Result<Imported, &'static str> {
        let alg = self.alg;
        let cell = frame.cell::<A, A::Cell>(&alg, cell)?;
        let state = cell.rebuild(&alg, frame.now);
        if alg.is_fresh(&state, frame.now) {
            return Ok(Imported::Fresh);
        }
        if self.contains(key) {
            return Err("a key written twice");
        }
        if !self.make_room(1, &[], frame.now) {
            return Ok(Imported::Refused);
        }
        self.insert(key, state);
        Ok(Imported::Stored)
    }

    fn import_cell(&mut self, index: usize, cell: &[u8], since: Nanos, frame: &Frame) -> Result<bool, &'static str> {
        let alg = self.alg;
        let cell = frame.cell::<A, A::Cell>(&alg, cell)?;
        let Some((bits, depth)) = self.fold else { return Ok(false) };
        let since = frame.time::<A, A::Cell>(&alg, since);
        let sketch = self.sketch.get_or_insert_with(|| Box::new(Sketch::new(bits, depth)));
        if sketch.restore(index, cell, &alg, since, frame.now) { Ok(true) } else { Err("a summary cell out of range") }
    }

    fn join_cell(&self, acc: &mut Vec<u8>, cell: &[u8], frame: &Frame) -> Result<(), &'static str> {
        let alg = self.alg;
        let mut joined = frame.cell::<A, A::Cell>(&alg, cell)?;
        if !acc.is_empty() {
            joined = joined.join(A::Cell::decode(acc), &alg, frame.now);
        }
        acc.clear();
        joined.encode(acc);
        Ok(())
    }

    fn import_everywhere(&mut self, cell: &[u8], since: Nanos, frame: &Frame) -> bool {
        let alg = self.alg;
        let Some((bits, depth)) = self.fold else { return false };
        let cell = A::Cell::decode(cell);
        let since = frame.time::<A, A::Cell>(&alg, since);
        self.sketch
            .get_or_insert_with(|| Box::new(Sketch::new(bits, depth)))
            .restore_everywhere(cell, &alg, since, frame.now);
        true
    }
}
