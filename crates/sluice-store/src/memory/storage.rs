//! How a shard lays out its slots, indexed by the key's own bits (the key is already a keyed
//! hash, so no hasher runs).
//!
//! [`Dense`]: the slots live back to back in a vector, and a hash table holds 4-byte positions
//! into it (5 bytes per bucket with its control byte). hashbrown keeps between 7/16 and 7/8 of
//! its power-of-two buckets full, so empty buckets cost 5 bytes instead of a whole slot: 1M
//! token-bucket keys take 1M x 28 bytes of slots and 2^21 x 5 bytes of index (about 39 MiB),
//! where slots inside the table's buckets took 2^21 x 29 bytes (58 MiB). A lookup reads one
//! more line (the position) and measured no slower in the keyed benchmark. Removal swaps the
//! last slot into the hole and fixes its position.
//!
//! Slots are addressed by a position in `0..positions()`.
//!
//! A full shard removes and inserts keys without end. hashbrown marks some removed buckets as
//! deleted rather than empty, and a table whose room is used up by them would double on the next
//! insert: the index is rebuilt at its size instead, once it already has buckets for the
//! shard's bound, so a shard's memory stays at what its bound needs however long it churns.

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

    /// Heap bytes held (the table's allocation, and the slots').
    fn bytes(&self) -> usize;
}

/// Entries a table of `buckets` buckets holds before it grows (hashbrown keeps 1/8 free).
fn bucket_capacity(buckets: usize) -> usize {
    if buckets < 8 { buckets.saturating_sub(1) } else { buckets / 8 * 7 }
}

/// Before an insert into a table that will never need to hold more than `cap` entries: when its
/// room is used up although its buckets could hold `cap`, moves its entries into a new table
/// sized for `cap` (clearing deleted buckets) instead of letting the insert double it.
fn settle<T>(table: &mut HashTable<T>, cap: usize, hasher: impl Fn(&T) -> u64) {
    if table.len() < table.capacity() || bucket_capacity(table.num_buckets()) < cap {
        return;
    }
    let old = std::mem::replace(table, HashTable::with_capacity(cap));
    for entry in old {
        table.insert_unique(hasher(&entry), entry, &hasher);
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
        settle(&mut self.index, cap, |&i| hash(slots[i as usize].key()));
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

    fn bytes(&self) -> usize {
        self.index.allocation_size() + self.slots.capacity() * size_of::<S>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::slot::PackedSlot;
    use sluice_core::GcraState;

    type Entry = PackedSlot<GcraState>;

    /// A well-mixed key, as a keyed hash is.
    fn key(n: u64) -> [u8; 16] {
        let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        k
    }

    /// A full shard churning for long: the oldest key out, a new one in, 200,000 times, at 85% of
    /// the buckets its bound needs (where removals leave the most deleted buckets).
    fn churn<S: Storage<Entry>>(mut storage: S, cap: usize) -> S {
        for n in 0..cap as u64 {
            storage.insert(Entry::new(key(n), 0, GcraState::default()), cap);
        }
        for n in cap as u64..200_000 {
            let pos = storage.find(&key(n - cap as u64)).expect("the oldest key is held");
            storage.remove(pos);
            storage.insert(Entry::new(key(n), 0, GcraState::default()), cap);
            assert_eq!(storage.len(), cap);
        }
        storage
    }

    #[test]
    fn a_churning_full_table_keeps_its_size() {
        let cap = 870; // 1,024 buckets hold 896
        let dense = churn(Dense::default(), cap);
        assert_eq!(dense.index.num_buckets(), 1_024);
        assert_eq!(dense.slots.capacity(), cap);
        for n in 200_000 - cap as u64..200_000 {
            assert!(dense.find(&key(n)).is_some(), "key {n} lost");
        }
    }
}
