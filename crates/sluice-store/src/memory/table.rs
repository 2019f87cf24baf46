//! One policy's table: its shards, its bound and its counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_core::Policy;

use super::counters::Counters;
use super::holds::Holds;
use super::layout::Stored;
use super::options::{MAX_SHARDS, MemoryOptions};
use super::shard::{Setup, Shard, ShardOps};
use crate::key::KeyHash;

/// Gives every table a distinct, increasing id: locks are taken in (table id, shard) order, one
/// global order even across stores that share tables after a rebuild.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// A shard behind its lock.
type LockedShard = Mutex<dyn ShardOps>;

/// The keys of one policy, split into shards.
pub(crate) struct Table {
    pub(crate) id: u64,
    shards: Box<[Box<LockedShard>]>,
    mask: u64,
    pub(crate) max_keys: usize,
    pub(crate) counters: Arc<Counters>,
    /// Units set apart for quota leases (a policing bucket's; empty for every other policy).
    pub(crate) holds: Holds,
}

impl Table {
    /// An empty table for `policy`. The shard count is rounded up to a power of two and lowered
    /// so that every shard holds at least one key; `max_keys` is split as evenly as it divides.
    pub(crate) fn new(policy: Policy, options: &MemoryOptions) -> Self {
        let max_keys = options.max_keys.max(1);
        let largest_fit = 1usize << (usize::BITS - 1 - max_keys.leading_zeros());
        let count = options.shards.clamp(1, MAX_SHARDS).next_power_of_two().min(largest_fit);
        let counters = Arc::new(Counters::default());
        let setup = Setup::new(options, count, Arc::clone(&counters));
        let seed: u64 = rand::random();
        let shards = (0..count)
            .map(|i| {
                let cap = max_keys / count + usize::from(i < max_keys % count);
                let seed = seed.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                match policy {
                    Policy::FixedWindow(a) => boxed(a, cap, seed, &setup),
                    Policy::SlidingLog(a) => boxed(a, cap, seed, &setup),
                    Policy::SlidingWindow(a) => boxed(a, cap, seed, &setup),
                    Policy::TokenBucket(a) => boxed(a, cap, seed, &setup),
                    Policy::LeakyBucket(a) => boxed(a, cap, seed, &setup),
                }
            })
            .collect();
        Self {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            shards,
            mask: count as u64 - 1,
            max_keys,
            counters,
            holds: Holds::default(),
        }
    }

    /// The shard `key` lives in: picked by the key's last 64 bits (the index hashes the first 64).
    pub(crate) fn shard_of(&self, key: &KeyHash) -> usize {
        let mut b = [0u8; 8];
        b.copy_from_slice(&key.0[8..]);
        (u64::from_le_bytes(b) & self.mask) as usize
    }

    /// Locks shard `i`. A lock poisoned by a panic elsewhere is taken over: every shard operation
    /// leaves the shard consistent between steps.
    pub(crate) fn lock(&self, i: usize) -> MutexGuard<'_, dyn ShardOps + 'static> {
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of shards.
    pub(crate) fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Keys held, over all shards (locks each shard in turn).
    pub(crate) fn keys(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).len()).sum()
    }

    /// Estimated heap bytes, over all shards (locks each shard in turn).
    pub(crate) fn bytes(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).bytes()).sum()
    }
}

fn boxed<A: Stored>(alg: A, cap: usize, seed: u64, setup: &Setup) -> Box<LockedShard>
where
    A::State: Clone,
{
    Box::new(Mutex::new(Shard::new(alg, cap, seed, setup)))
}
