//! The local deny cache: once Redis denies a key until some time, answer that key here.

use std::collections::HashMap;
use std::sync::Mutex;

use sluice_core::{Decision, Nanos};
use sluice_store::KeyHash;

const SHARDS: usize = 16;

/// Which clock a time was read from: the caller's explicit `at`, or this process's monotonic
/// clock. An entry answers only lookups made on the clock it was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheClock {
    Explicit,
    Local,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    clock: CacheClock,
    /// Denied until then (the request's start plus Redis's retry_after).
    until: Nanos,
    /// The key is fresh again at the latest then.
    reset_until: Nanos,
    /// The smallest cost known to be denied until `until`.
    cost: u64,
    limit: u64,
    remaining: u64,
}

/// Denials by (policy, key), bounded. It only ever denies, and only until the time Redis gave:
/// a request of at least the denied cost cannot be admitted before then (waiting is the only
/// thing that frees room, and other requests only take more), so the cache never admits what
/// Redis would deny and never denies what Redis would admit at that cost. A settlement that
/// gives units back also frees room: this process forgets the key's entry when it settles
/// ([`DenyCache::forget`]); another instance's settlement does not reach it, so its denial may
/// outlast Redis's, until the time Redis gave at most (the strict direction).
///
/// A policy is named by an id the cache gives its stored state ([`DenyCache::id_of`] its key
/// head), not by its position in one configuration: stores rebuilt on reload share the cache,
/// and a denial follows its policy wherever the new configuration puts it.
#[derive(Debug)]
pub(crate) struct DenyCache {
    shards: Vec<Mutex<HashMap<(usize, KeyHash), Entry>>>,
    per_shard: usize,
    /// The key heads given an id so far; an id is a position here. One per policy ever
    /// configured with the same options (reloads add only changed policies).
    heads: Mutex<Vec<String>>,
}

impl DenyCache {
    /// A cache of about `entries` entries (rounded up to a multiple of its shard count).
    pub fn new(entries: usize) -> Self {
        let per_shard = entries.div_ceil(SHARDS).max(1);
        let shards = (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect();
        Self { shards, per_shard, heads: Mutex::new(Vec::new()) }
    }

    /// The id of the policy whose stored keys start with `key_head` (`prefix:policy:fingerprint:`):
    /// the same for every store sharing this cache, new for a head not seen before.
    pub fn id_of(&self, key_head: &str) -> usize {
        // A list of strings, whole between operations: a panic cannot leave it torn.
        let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        match heads.iter().position(|h| h == key_head) {
            Some(id) => id,
            None => {
                heads.push(key_head.to_owned());
                heads.len() - 1
            }
        }
    }

    fn shard(&self, key: &KeyHash) -> std::sync::MutexGuard<'_, HashMap<(usize, KeyHash), Entry>> {
        let i = (key.low64() % SHARDS as u64) as usize;
        // A map of plain values, consistent between operations: a panic cannot leave it torn.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached denial of a request of `cost` at `now`, if one applies.
    pub fn lookup(&self, policy: usize, key: &KeyHash, cost: u64, clock: CacheClock, now: Nanos) -> Option<Decision> {
        let mut shard = self.shard(key);
        let e = *shard.get(&(policy, *key))?;
        if e.clock != clock {
            return None;
        }
        if now >= e.until {
            shard.remove(&(policy, *key));
            return None;
        }
        if cost < e.cost {
            return None;
        }
        let retry_after = e.until - now;
        Some(Decision {
            allowed: false,
            limit: e.limit,
            remaining: e.remaining,
            reset_after: e.reset_until.saturating_sub(now).max(retry_after),
            retry_after,
            delay: 0,
        })
    }

    /// Records Redis's denial `d` of a request of `cost` that started at `start`.
    pub fn insert(&self, policy: usize, key: &KeyHash, cost: u64, clock: CacheClock, start: Nanos, d: &Decision) {
        if d.allowed || d.retry_after == 0 {
            return;
        }
        let entry = Entry {
            clock,
            until: start.saturating_add(d.retry_after),
            reset_until: start.saturating_add(d.reset_after),
            cost,
            limit: d.limit,
            remaining: d.remaining,
        };
        let mut shard = self.shard(key);
        if shard.len() >= self.per_shard && !shard.contains_key(&(policy, *key)) {
            shard.retain(|_, e| e.clock != clock || e.until > start);
            if shard.len() >= self.per_shard {
                let victim = shard.keys().next().copied();
                if let Some(v) = victim {
                    shard.remove(&v);
                }
            }
        }
        shard.insert((policy, *key), entry);
    }

    /// Drops the denial of `key` under `policy`, if any: units were given back to it.
    pub fn forget(&self, policy: usize, key: &KeyHash) {
        self.shard(key).remove(&(policy, *key));
    }

    /// Entries held (live or not yet dropped).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(retry_after: Nanos, reset_after: Nanos) -> Decision {
        Decision { allowed: false, limit: 10, remaining: 2, reset_after, retry_after, delay: 0 }
    }

    const K: KeyHash = KeyHash([7; 16]);

    #[test]
    fn answers_until_the_retry_time_then_forgets() {
        let c = DenyCache::new(100);
        c.insert(0, &K, 1, CacheClock::Explicit, 1_000, &denial(500, 800));
        let hit = c.lookup(0, &K, 1, CacheClock::Explicit, 1_200).unwrap();
        assert!(!hit.allowed);
        assert_eq!((hit.retry_after, hit.reset_after, hit.remaining, hit.limit), (300, 600, 2, 10));
        assert!(c.lookup(0, &K, 1, CacheClock::Explicit, 1_500).is_none());
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn applies_to_larger_costs_only_and_to_its_own_policy_and_clock() {
        let c = DenyCache::new(100);
        c.insert(0, &K, 3, CacheClock::Local, 0, &denial(500, 500));
        assert!(c.lookup(0, &K, 2, CacheClock::Local, 10).is_none());
        assert!(c.lookup(0, &K, 4, CacheClock::Local, 10).is_some());
        assert!(c.lookup(1, &K, 4, CacheClock::Local, 10).is_none());
        assert!(c.lookup(0, &K, 4, CacheClock::Explicit, 10).is_none());
    }

    #[test]
    fn ids_name_stored_state_not_positions() {
        let c = DenyCache::new(100);
        let (a, b) = (c.id_of("sluice:a:f1:{"), c.id_of("sluice:b:f2:{"));
        assert_ne!(a, b);
        // Asked again (a reload that kept both, in another order): the same ids.
        assert_eq!((c.id_of("sluice:b:f2:{"), c.id_of("sluice:a:f1:{")), (b, a));
        // The same name with other parameters is another stored state.
        assert_ne!(c.id_of("sluice:a:f3:{"), a);
    }

    #[test]
    fn ignores_admissions_and_stays_bounded() {
        let c = DenyCache::new(SHARDS * 2);
        let ok = Decision { allowed: true, ..denial(0, 5) };
        c.insert(0, &K, 1, CacheClock::Local, 0, &ok);
        assert_eq!(c.len(), 0);
        for i in 0..1000u32 {
            let mut k = [0u8; 16];
            k[..4].copy_from_slice(&i.to_le_bytes());
            c.insert(0, &KeyHash(k), 1, CacheClock::Local, 0, &denial(1_000_000, 1_000_000));
        }
        assert!(c.len() <= SHARDS * 2);
    }
}
