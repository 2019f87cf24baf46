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
#[derive(Clone)]
pub struct HeavyHitters {
    /// The most keys kept.
    capacity: usize,
    /// The kept keys as a min-heap by `requests`: the root is the one to replace.
    heap: Vec<HeavyHitter>,
    /// Where each kept key is in `heap`.
    index: HashMap<KeyHash, usize, BuildHasherDefault<KeyHashHasher>>,
}

impl std::fmt::Debug for HeavyHitters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeavyHitters").field("capacity", &self.capacity).field("kept", &self.heap.len()).finish()
    }
}

impl HeavyHitters {
    /// A summary keeping at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self { capacity: capacity.max(1), heap: Vec::new(), index: HashMap::default() }
    }

    /// Counts one request of `key`, denied or not.
    pub fn add(&mut self, key: KeyHash, denied: bool) {
        let d = u64::from(denied);
        let i = match self.index.get(&key) {
            Some(&i) => {
                self.heap[i].requests += 1;
                self.heap[i].denied += d;
                i
            }
            None if self.heap.len() < self.capacity => {
                self.heap.push(HeavyHitter { key, requests: 1, denied: d, overcount: 0 });
                let i = self.heap.len() - 1;
                self.index.insert(key, i);
                // A count of 1 is the smallest there is: it only rises towards the root.
                self.sift_up(i);
                return;
            }
            None => {
                let min = self.heap[0];
                self.index.remove(&min.key);
                self.heap[0] = HeavyHitter { key, requests: min.requests + 1, denied: d, overcount: min.requests };
                self.index.insert(key, 0);
                0
            }
        };
        self.sift_down(i);
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.index.insert(self.heap[a].key, a);
        self.index.insert(self.heap[b].key, b);
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[parent].requests <= self.heap[i].requests {
                break;
            }
            self.swap(parent, i);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut smallest = i;
            for c in [l, r] {
                if c < self.heap.len() && self.heap[c].requests < self.heap[smallest].requests {
                    smallest = c;
                }
            }
            if smallest == i {
                return;
            }
            self.swap(i, smallest);
            i = smallest;
        }
    }

    /// The `n` keys with the most requests, most first (ties: by key, for a stable report).
    pub fn top(&self, n: usize) -> Vec<HeavyHitter> {
        let mut all = self.heap.clone();
        all.sort_unstable_by(|a, b| b.requests.cmp(&a.requests).then(a.key.cmp(&b.key)));
        all.truncate(n);
        all
    }

    /// True while every count is exact: no key was ever replaced.
    pub fn exact(&self) -> bool {
        self.heap.iter().all(|h| h.overcount == 0)
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
