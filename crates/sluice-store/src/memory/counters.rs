//! What a policy's table counts: evictions and refusals, shared by its shards.

use std::sync::atomic::AtomicU64;

/// Eviction and refusal counts of one table, bumped by its shards and read for metrics.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Fresh entries dropped to make room (no decision changed).
    pub(crate) evicted_fresh: AtomicU64,
    /// Live entries evicted as least recently used.
    pub(crate) evicted_lru: AtomicU64,
    /// New keys refused because the shard was full.
    pub(crate) refused: AtomicU64,
}
