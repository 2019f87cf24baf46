//! How a memory store is sized, and what a full shard does.

/// Upper bound on shards per policy.
pub(crate) const MAX_SHARDS: usize = 1 << 12;

/// What a full shard does with a new key once no fresh entry is left to drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Evict the least recently used key (approximately: the oldest of [`LRU_SAMPLE`](crate::LRU_SAMPLE) sampled
    /// keys; exactly, in a shard of at most that many keys).
    #[default]
    EvictLru,
    /// Refuse the new key: the request fails with [`StoreError::Full`](crate::StoreError::Full).
    Refuse,
}

/// Sizing of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The most keys kept per policy (at least 1), split evenly across the shards.
    pub max_keys: usize,
    /// Shards per policy: rounded up to a power of two, at most 4096, and lowered so that each
    /// shard holds at least one key.
    pub shards: usize,
    /// What to do when a shard is full of live keys.
    pub when_full: WhenFull,
}

impl Default for MemoryOptions {
    /// 1,000,000 keys per policy in 64 shards, evicting the least recently used.
    fn default() -> Self {
        Self { max_keys: 1_000_000, shards: 64, when_full: WhenFull::EvictLru }
    }
}
