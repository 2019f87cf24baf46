//! The busiest keys of a stream in fixed memory: the space-saving summary (Metwally, Agrawal
//! and El Abbadi, 2005).
//!
//! It keeps at most `capacity` keys with a count each. A key not kept takes the place of the
//! key with the smallest count, and inherits that count as its possible overcount. So every
//! count is an upper bound, `count - overcount` a lower bound, and any key seen more than
//! `requests / capacity` times is kept. While no more than `capacity` distinct keys have come,
//! every count is exact (overcount 0). Denials are counted from when a key was last taken in,
//! so they are exact when the overcount is 0 and a lower bound otherwise.
//!
//! ```
//! use sluice_sim::HeavyHitters;
//! use sluice_store::KeyHash;
//! let mut top = HeavyHitters::new(2);
//! let (a, b, c) = (KeyHash([1; 16]), KeyHash([2; 16]), KeyHash([3; 16]));
//! for (key, denied) in [(a, false), (a, true), (b, false), (a, false), (c, true)] {
//!     top.add(key, denied);
//! }
//! let best = top.top(1);
//! assert_eq!((best[0].key, best[0].requests, best[0].denied, best[0].overcount), (a, 3, 1, 0));
//! // c took b's place and may have been counted once too often.
//! let second = &top.top(2)[1];
//! assert_eq!((second.key, second.requests, second.overcount), (c, 2, 1));
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use sluice_store::KeyHash;

/// How many keys each limit's summary keeps by default.
pub const HEAVY_HITTERS_CAPACITY: usize = 1024;

/// One kept key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeavyHitter {
    /// The keyed hash (as in the gateway's decision logs).
    pub key: KeyHash,
    /// Requests counted for it (an upper bound; exact when `overcount` is 0).
    pub requests: u64,
    /// Of which denied (a lower bound; exact when `overcount` is 0).
    pub denied: u64,
    /// At most this many of `requests` belong to keys it replaced.
    pub overcount: u64,
}

/// Key hashes are already uniform: their first 8 bytes are a good hash.
#[derive(Default)]
struct KeyHashHasher(u64);

impl Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(b);
        }
    }
}

/// The space-saving summary of one stream of keys.
///
/// The slots are kept sorted by count, so the slot to replace is always the first. A count
/// only ever grows by one: a slot moves to the end of its group of equal counts (found by
/// binary search) before its count grows, and the order holds. Empty slots count 0, so taking
/// a new key into an empty slot and into the least counted one are the same step.
#[derive(Clone)]
pub struct HeavyHitters {
    /// One entry per slot, in a fixed place for as long as its key is kept.
    entries: Vec<HeavyHitter>,
    /// Slot numbers in order of count, least first.
    order: Vec<u32>,
    /// The count of each slot in `order`, in the same order (a compact array to search).
    counts: Vec<u64>,
    /// Where each slot is in `order`.
    position: Vec<u32>,
    /// The slot of each kept key.
    index: HashMap<KeyHash, u32, BuildHasherDefault<KeyHashHasher>>,
}

impl std::fmt::Debug for HeavyHitters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeavyHitters").field("capacity", &self.entries.len()).field("kept", &self.index.len()).finish()
    }
}

impl HeavyHitters {
    /// A summary keeping at most `capacity` keys (at least 1, at most 2^32).
    pub fn new(capacity: usize) -> Self {
        let n = capacity.clamp(1, u32::MAX as usize);
        let empty = HeavyHitter { key: KeyHash([0; 16]), requests: 0, denied: 0, overcount: 0 };
        Self {
            entries: vec![empty; n],
            order: (0..n as u32).collect(),
            counts: vec![0; n],
            position: (0..n as u32).collect(),
            index: HashMap::with_capacity_and_hasher(n, BuildHasherDefault::default()),
        }
    }

    /// Counts one request of `key`, denied or not.
    pub fn add(&mut self, key: KeyHash, denied: bool) {
        let slot = match self.index.get(&key) {
            Some(&slot) => slot,
            None => {
                // The least counted slot (an empty one first) takes the key, and its count as
                // the new key's possible overcount.
                let slot = self.order[0];
                let e = &mut self.entries[slot as usize];
                if e.requests > 0 {
                    self.index.remove(&e.key);
                }
                *e = HeavyHitter { key, requests: e.requests, denied: 0, overcount: e.requests };
                self.index.insert(key, slot);
                slot
            }
        };
        // Move the slot to the end of its group of equal counts, then count.
        let at = self.position[slot as usize] as usize;
        let count = self.counts[at];
        let last = at + self.counts[at..].partition_point(|&c| c <= count) - 1;
        if last != at {
            let other = self.order[last];
            self.order.swap(at, last);
            self.position[slot as usize] = last as u32;
            self.position[other as usize] = at as u32;
        }
        self.counts[last] += 1;
        let e = &mut self.entries[slot as usize];
        e.requests += 1;
        e.denied += u64::from(denied);
    }

    /// The `n` keys with the most requests, most first (ties: by key, for a stable report).
    pub fn top(&self, n: usize) -> Vec<HeavyHitter> {
        let mut all: Vec<HeavyHitter> = self.entries.iter().filter(|e| e.requests > 0).copied().collect();
        all.sort_unstable_by(|a, b| b.requests.cmp(&a.requests).then(a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }

    /// True while every count is exact: no key was ever replaced.
    pub fn exact(&self) -> bool {
        self.entries.iter().all(|h| h.overcount == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(i: u8) -> KeyHash {
        KeyHash([i; 16])
    }

    proptest! {
        #[test]
        fn counts_bound_the_truth(stream in proptest::collection::vec((0u8..12, any::<bool>()), 0..400),
                                  capacity in 1usize..8) {
            let mut top = HeavyHitters::new(capacity);
            let mut truth: HashMap<u8, (u64, u64)> = HashMap::new();
            for &(k, denied) in &stream {
                top.add(key(k), denied);
                let t = truth.entry(k).or_default();
                t.0 += 1;
                t.1 += u64::from(denied);
            }
            let kept = top.top(usize::MAX);
            prop_assert!(kept.len() <= capacity);
            for h in &kept {
                let (requests, denied) = truth[&h.key.0[0]];
                prop_assert!(h.requests >= requests && h.requests - h.overcount <= requests);
                prop_assert!(h.denied <= denied);
                if h.overcount == 0 {
                    prop_assert_eq!((h.requests, h.denied), (requests, denied));
                }
            }
            // Every key seen more than n / capacity times is kept.
            let n = stream.len() as u64;
            for (k, (requests, _)) in &truth {
                if *requests * capacity as u64 > n {
                    prop_assert!(kept.iter().any(|h| h.key == key(*k)), "key {} lost", k);
                }
            }
            if truth.len() <= capacity {
                prop_assert!(top.exact());
            }
        }
    }
}
