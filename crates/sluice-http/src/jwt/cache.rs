//! A bounded map of token hashes: fixed capacity, oldest entry evicted first, sharded so
//! concurrent requests rarely wait on one lock.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use sluice_store::KeyHash;

/// Capacity below which one shard is used (a small cache is not worth splitting).
const SHARDING_FROM: usize = 1024;

/// Shards of a large cache.
const SHARDS: usize = 16;

/// At most `capacity` values keyed by token hash; inserting into a full shard evicts its oldest
/// entry. Lookups do not reorder, so an attacker cannot keep an entry alive by replaying it.
///
/// ```
/// use sluice_http::jwt::TokenCache;
/// use sluice_store::KeyHash;
/// let cache = TokenCache::new(2);
/// let k = |b: u8| KeyHash([b; 16]);
/// cache.insert(k(1), "a");
/// cache.insert(k(2), "b");
/// cache.insert(k(3), "c");
/// assert_eq!(cache.get(&k(1)), None, "the oldest went first");
/// assert_eq!(cache.get(&k(3)), Some("c"));
/// assert_eq!(cache.len(), 2);
/// ```
#[derive(Debug)]
pub struct TokenCache<V> {
    /// Shards chosen by the hash's low bits, each bounded on its own.
    shards: Box<[Mutex<Shard<V>>]>,
}

#[derive(Debug)]
struct Shard<V> {
    /// The entries.
    map: HashMap<KeyHash, V>,
    /// Keys in insertion order: the front is evicted first.
    order: VecDeque<KeyHash>,
    /// Most entries this shard holds.
    capacity: usize,
}

impl<V: Clone> TokenCache<V> {
    /// A cache of at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let shards = if capacity >= SHARDING_FROM { SHARDS } else { 1 };
        let each = capacity / shards;
        let shards = (0..shards)
            .map(|_| Mutex::new(Shard { map: HashMap::new(), order: VecDeque::new(), capacity: each }))
            .collect();
        Self { shards }
    }

    fn shard(&self, key: &KeyHash) -> std::sync::MutexGuard<'_, Shard<V>> {
        let i = (key.low64() as usize) % self.shards.len();
        // A panic while holding a shard leaves a consistent map: keep using it.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value stored for `key`.
    pub fn get(&self, key: &KeyHash) -> Option<V> {
        self.shard(key).map.get(key).cloned()
    }

    /// Stores `value` for `key`, evicting the shard's oldest entry when it is full.
    pub fn insert(&self, key: KeyHash, value: V) {
        let mut shard = self.shard(&key);
        if let Some(v) = shard.map.get_mut(&key) {
            *v = value;
            return;
        }
        while shard.map.len() >= shard.capacity {
            let Some(oldest) = shard.order.pop_front() else { break };
            shard.map.remove(&oldest);
        }
        shard.order.push_back(key);
        shard.map.insert(key, value);
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).map.len()).sum()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
