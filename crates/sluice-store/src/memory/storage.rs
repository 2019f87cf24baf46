//! The two ways a shard lays out its slots, both indexed by the key's own bits (the key is
//! already a keyed hash, so no hasher runs).
//!
//! - [`Inline`]: the slots live in the hash table's buckets. One probe reaches the state; each
//!   bucket costs the slot plus a control byte, and hashbrown keeps between 7/16 and 7/8 of its
//!   power-of-two buckets full. Used for the token and leaky buckets (28-byte slots: 1M keys in
//!   2^21 buckets is 58 MiB).
//! - [`Dense`]: the slots live back to back in a vector and the table holds 4-byte positions into
//!   it (5 bytes per bucket). One more dependent load per lookup, but empty buckets cost 5 bytes
//!   instead of a whole slot: used for the larger states (fixed window 36 bytes, sliding window
//!   44, sliding log), which would not fit 1M keys in 64 MiB inline. Removal swaps the last slot
//!   into the hole and fixes its position.
//!
//! Both address slots by a position in `0..positions()`; a position may be empty (inline).

use hashbrown::HashTable;

use super::slot::Slot;

/// The index hash of a key: its first 64 bits (shards are picked by the last 64).
pub(crate) fn hash(key: &[u8; 16]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[..8]);
    u64::from_le_bytes(b)
}

/// Slots of one shard, addressed by position.
pub(crate) trait Storage<S: Slot>: Default + Send + 'static {
    /// The position of `key`'s slot.
    fn find(&self, key: &[u8; 16]) -> Option<usize>;

    /// The slot at `pos`, if that position holds one.
    fn get(&self, pos: usize) -> Option<&S>;

    /// The slot at `pos`, mutably.
    fn get_mut(&mut self, pos: usize) -> Option<&mut S>;

    /// Adds a slot for a key not present; `cap` bounds the slots the shard will ever hold.
    fn insert(&mut self, slot: S, cap: usize);

    /// Removes the slot at `pos`. Afterwards `pos` is empty or holds another slot that has not
    /// been seen at its old position yet (so a sweep re-examines `pos`).
    fn remove(&mut self, pos: usize);

    /// Positions are `0..positions()`.
    fn positions(&self) -> usize;

    /// Slots held.
    fn len(&self) -> usize;
}

/// Slots in the table's buckets.
pub(crate) struct Inline<S> {
    table: HashTable<S>,
}

impl<S> Default for Inline<S> {
    fn default() -> Self {
        Self { table: HashTable::new() }
    }
}

impl<S: Slot> Storage<S> for Inline<S> {
    fn find(&self, key: &[u8; 16]) -> Option<usize> {
        self.table.find_bucket_index(hash(key), |s| s.key() == key)
    }

    fn get(&self, pos: usize) -> Option<&S> {
        self.table.get_bucket(pos)
    }

    fn get_mut(&mut self, pos: usize) -> Option<&mut S> {
        self.table.get_bucket_mut(pos)
    }

    fn insert(&mut self, slot: S, _cap: usize) {
        let h = hash(slot.key());
        self.table.insert_unique(h, slot, |s| hash(s.key()));
    }

    fn remove(&mut self, pos: usize) {
        if let Ok(entry) = self.table.get_bucket_entry(pos) {
            entry.remove();
        }
    }

    fn positions(&self) -> usize {
        self.table.num_buckets()
    }

    fn len(&self) -> usize {
        self.table.len()
    }
}

/// Slots back to back, with a table of positions.
pub(crate) struct Dense<S> {
    index: HashTable<u32>,
    slots: Vec<S>,
}

impl<S> Default for Dense<S> {
    fn default() -> Self {
        Self { index: HashTable::new(), slots: Vec::new() }
    }
}

impl<S: Slot> Storage<S> for Dense<S> {
    fn find(&self, key: &[u8; 16]) -> Option<usize> {
        let slots = &self.slots;
        self.index.find(hash(key), |&i| slots[i as usize].key() == key).map(|&i| i as usize)
    }

    fn get(&self, pos: usize) -> Option<&S> {
        self.slots.get(pos)
    }

    fn get_mut(&mut self, pos: usize) -> Option<&mut S> {
        self.slots.get_mut(pos)
    }

    fn insert(&mut self, slot: S, cap: usize) {
        let pos = self.slots.len();
        if pos == self.slots.capacity() {
            // Double, but never past the bound: a full shard holds no spare capacity.
            let grow = pos.max(4).min(cap.saturating_sub(pos)).max(1);
            self.slots.reserve_exact(grow);
        }
        let h = hash(slot.key());
        self.slots.push(slot);
        let slots = &self.slots;
        self.index.insert_unique(h, pos as u32, |&i| hash(slots[i as usize].key()));
    }

    fn remove(&mut self, pos: usize) {
        let Some(slot) = self.slots.get(pos) else { return };
        if let Ok(entry) = self.index.find_entry(hash(slot.key()), |&i| i as usize == pos) {
            entry.remove();
        }
        let last = self.slots.len() - 1;
        if pos != last {
            let moved = hash(self.slots[last].key());
            if let Some(i) = self.index.find_mut(moved, |&i| i as usize == last) {
                *i = pos as u32;
            }
        }
        self.slots.swap_remove(pos);
    }

    fn positions(&self) -> usize {
        self.slots.len()
    }

    fn len(&self) -> usize {
        self.slots.len()
    }
}
