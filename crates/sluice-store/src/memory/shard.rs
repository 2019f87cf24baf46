//! One shard of a policy's table: a dense vector of slots and a hash index into it.
//!
//! Layout: `slots` holds the entries back to back; `index` is a `hashbrown::HashTable<u32>` of
//! positions into `slots`, hashed by the key's own bits (the key is already a keyed hash, so no
//! hasher runs). A table of 4-byte positions costs 5 bytes per bucket with its control byte,
//! which keeps hashbrown's power-of-two bucket counts cheap; removal swaps the last slot into the
//! hole and fixes its position.
//!
//! Bound: a shard holds at most `cap` keys. When a new key needs room, [`Shard::make_room`]
//! first drops entries that are fresh (a fresh entry decides every request exactly as an absent
//! key, so dropping it changes no decision), examining at most [`FRESH_SCAN`] entries per step
//! from a cursor that sweeps the shard; if none is fresh, it evicts the least recently used of
//! [`LRU_SAMPLE`] sampled entries ([`WhenFull::EvictLru`]) or refuses ([`WhenFull::Refuse`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hashbrown::HashTable;
use sluice_core::{CostError, Decision, Nanos, State};

use super::slot::{Slot, Stored};
use super::table::Counters;
use super::{MemoryOptions, WhenFull};
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

    /// A copy of the key's state (the fresh state when absent), for a request's working copy.
    fn working(&mut self, key: &KeyHash) -> State;

    /// Makes room for `needed` new keys, never removing a key in `keep`. False when it cannot
    /// (refusing, or every remaining entry is kept).
    fn make_room(&mut self, needed: usize, keep: &[KeyHash], now: Nanos) -> bool;

    /// Charges a check to a stored key (after [`ShardOps::peek`] admitted it).
    fn charge(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError>;

    /// Stores a working copy: overwrites the key's state, or inserts it (room was made) unless it
    /// is fresh.
    fn store(&mut self, key: &KeyHash, state: State, now: Nanos);

    /// The number of keys held.
    fn len(&self) -> usize;
}

/// One shard for algorithm `A`.
pub(crate) struct Shard<A: Stored> {
    alg: A,
    index: HashTable<u32>,
    slots: Vec<A::Slot>,
    cap: usize,
    when_full: WhenFull,
    /// Next slot the freshness sweep examines.
    cursor: usize,
    /// Logical clock for last-used stamps: one tick per use.
    tick: u32,
    /// xorshift state for LRU sampling.
    rng: u64,
    counters: Arc<Counters>,
}

/// The index hash of a key: its first 64 bits (shards are picked by the last 64).
fn hash(key: &[u8; 16]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[..8]);
    u64::from_le_bytes(b)
}

impl<A: Stored> Shard<A> {
    pub(crate) fn new(alg: A, cap: usize, options: &MemoryOptions, seed: u64, counters: Arc<Counters>) -> Self {
        Self {
            alg,
            index: HashTable::new(),
            slots: Vec::new(),
            cap,
            when_full: options.when_full,
            cursor: 0,
            tick: 0,
            rng: seed | 1,
            counters,
        }
    }

    fn position(&self, key: &[u8; 16]) -> Option<usize> {
        let slots = &self.slots;
        self.index.find(hash(key), |&i| slots[i as usize].key() == key).map(|&i| i as usize)
    }

    fn touch(&mut self, pos: usize) {
        self.tick = self.tick.wrapping_add(1);
        self.slots[pos].set_stamp(self.tick);
    }

    /// Appends a new key; the caller made room.
    fn insert(&mut self, key: [u8; 16], state: A::State) {
        let pos = self.slots.len();
        if pos == self.slots.capacity() {
            // Double, but never past the bound: a full shard holds no spare capacity.
            let grow = pos.max(4).min(self.cap.saturating_sub(pos)).max(1);
            self.slots.reserve_exact(grow);
        }
        self.tick = self.tick.wrapping_add(1);
        self.slots.push(A::Slot::new(key, self.tick, state));
        let slots = &self.slots;
        self.index.insert_unique(hash(&key), pos as u32, |&i| hash(slots[i as usize].key()));
    }

    /// Removes the slot at `pos`; the last slot moves into its place.
    fn remove(&mut self, pos: usize) {
        let key = *self.slots[pos].key();
        if let Ok(entry) = self.index.find_entry(hash(&key), |&i| i as usize == pos) {
            entry.remove();
        }
        let last = self.slots.len() - 1;
        if pos != last {
            let moved = *self.slots[last].key();
            if let Some(i) = self.index.find_mut(hash(&moved), |&i| i as usize == last) {
                *i = pos as u32;
            }
        }
        self.slots.swap_remove(pos);
    }

    /// Drops fresh entries among the next [`FRESH_SCAN`] the sweep reaches. True if any was dropped.
    fn drop_fresh(&mut self, now: Nanos, keep: &[KeyHash]) -> bool {
        let alg = self.alg;
        let budget = FRESH_SCAN.min(self.slots.len());
        let mut dropped = 0;
        for _ in 0..budget {
            if self.slots.is_empty() {
                break;
            }
            if self.cursor >= self.slots.len() {
                self.cursor = 0;
            }
            let slot = &self.slots[self.cursor];
            if slot.read(|s| alg.is_fresh(s, now)) && !keep.iter().any(|k| &k.0 == slot.key()) {
                // The last slot moves here: the cursor stays to examine it next.
                self.remove(self.cursor);
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
    /// small shard). False when every candidate is kept.
    fn evict_lru(&mut self, keep: &[KeyHash]) -> bool {
        let len = self.slots.len();
        let mut oldest: Option<(u32, usize)> = None;
        let mut consider = |this: &Self, pos: usize| {
            let slot = &this.slots[pos];
            if keep.iter().any(|k| &k.0 == slot.key()) {
                return;
            }
            let age = this.tick.wrapping_sub(slot.stamp());
            if oldest.is_none_or(|(a, _)| age > a) {
                oldest = Some((age, pos));
            }
        };
        if len <= LRU_SAMPLE {
            for pos in 0..len {
                consider(self, pos);
            }
        } else {
            for _ in 0..LRU_SAMPLE {
                let pos = (self.next_random() % len as u64) as usize;
                consider(self, pos);
            }
        }
        match oldest {
            Some((_, pos)) => {
                self.remove(pos);
                self.counters.evicted_lru.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

impl<A: Stored> ShardOps for Shard<A>
where
    A::State: Clone,
{
    fn decide_one(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, ShardError> {
        let alg = self.alg;
        if let Some(pos) = self.position(&key.0) {
            self.touch(pos);
            return Ok(self.slots[pos].write(|s| alg.check(s, now, cost))?);
        }
        let mut state = A::State::default();
        let d = alg.check(&mut state, now, cost)?;
        if d.allowed && !alg.is_fresh(&state, now) {
            if !self.make_room(1, &[], now) {
                return Err(ShardError::Full);
            }
            self.insert(key.0, state);
        }
        Ok(d)
    }

    fn contains(&self, key: &KeyHash) -> bool {
        self.position(&key.0).is_some()
    }

    fn peek(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        let alg = self.alg;
        match self.position(&key.0) {
            Some(pos) => {
                self.touch(pos);
                self.slots[pos].read(|s| alg.peek(s, now, cost))
            }
            None => alg.peek(&A::State::default(), now, cost),
        }
    }

    fn working(&mut self, key: &KeyHash) -> State {
        match self.position(&key.0) {
            Some(pos) => {
                self.touch(pos);
                A::wrap(self.slots[pos].read(|s| s.clone()))
            }
            None => A::wrap(A::State::default()),
        }
    }

    fn make_room(&mut self, needed: usize, keep: &[KeyHash], now: Nanos) -> bool {
        while self.slots.len() + needed > self.cap {
            if self.drop_fresh(now, keep) {
                continue;
            }
            let evicted = match self.when_full {
                WhenFull::Refuse => false,
                WhenFull::EvictLru => self.evict_lru(keep),
            };
            if !evicted {
                return false;
            }
        }
        true
    }

    fn charge(&mut self, key: &KeyHash, now: Nanos, cost: u64) -> Result<Decision, CostError> {
        let alg = self.alg;
        match self.position(&key.0) {
            Some(pos) => self.slots[pos].write(|s| alg.check(s, now, cost)),
            // Not reached: the store charges in place only keys it found and kept.
            None => alg.check(&mut A::State::default(), now, cost),
        }
    }

    fn store(&mut self, key: &KeyHash, state: State, now: Nanos) {
        let Some(state) = A::unwrap(state) else {
            debug_assert!(false, "a working copy of another algorithm");
            return;
        };
        match self.position(&key.0) {
            Some(pos) => self.slots[pos].replace(state),
            None if self.alg.is_fresh(&state, now) => {}
            None => self.insert(key.0, state),
        }
    }

    fn len(&self) -> usize {
        self.slots.len()
    }
}
