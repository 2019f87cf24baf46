//! Counters for metrics: what reached Redis and what was answered without it.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::breaker::BreakerState;

/// A snapshot of a [`crate::RedisStore`]'s counters (all since the store was built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisStats {
    /// Script calls sent to Redis (one per request on a single node, one per slot group on a
    /// Cluster; a reload after `NOSCRIPT` counts again).
    pub redis_calls: u64,
    /// Requests whose Redis call failed (an error reply, a lost connection, a refused connect).
    pub redis_errors: u64,
    /// Requests whose Redis call did not finish within the timeout.
    pub timeouts: u64,
    /// Scripts sent again after Redis answered `NOSCRIPT` (a restart, `SCRIPT FLUSH`).
    pub script_reloads: u64,
    /// Connections made (the first, and every reconnect; on a single node over TCP, one per
    /// thread that decides).
    pub connects: u64,
    /// Requests answered from the deny cache.
    pub deny_cache_hits: u64,
    /// Requests that did not call Redis because the breaker was open.
    pub breaker_rejections: u64,
    /// Requests admitted by `fail-open` without a decision.
    pub fail_open: u64,
    /// Requests refused by `fail-closed`.
    pub fail_closed: u64,
    /// Requests decided by the local fallback.
    pub local: u64,
    /// The breaker's state.
    pub breaker: BreakerState,
    /// Times the breaker opened.
    pub breaker_opened: u64,
    /// Entries in the deny cache.
    pub deny_cache_entries: usize,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub redis_calls: AtomicU64,
    pub redis_errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub script_reloads: AtomicU64,
    pub connects: AtomicU64,
    pub deny_cache_hits: AtomicU64,
    pub breaker_rejections: AtomicU64,
    pub fail_open: AtomicU64,
    pub fail_closed: AtomicU64,
    pub local: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self, breaker: BreakerState, breaker_opened: u64, deny_cache_entries: usize) -> RedisStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RedisStats {
            redis_calls: g(&self.redis_calls),
            redis_errors: g(&self.redis_errors),
            timeouts: g(&self.timeouts),
            script_reloads: g(&self.script_reloads),
            connects: g(&self.connects),
            deny_cache_hits: g(&self.deny_cache_hits),
            breaker_rejections: g(&self.breaker_rejections),
            fail_open: g(&self.fail_open),
            fail_closed: g(&self.fail_closed),
            local: g(&self.local),
            breaker,
            breaker_opened,
            deny_cache_entries,
        }
    }
}
