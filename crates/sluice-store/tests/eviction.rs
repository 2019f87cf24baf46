//! The bound on keys: fresh entries are dropped first (and no decision changes), then the least
//! recently used is evicted (folded into the summary, or forgotten) or the new key refused; the
//! counters say which happened.

use std::sync::Arc;

use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy, TokenBucket};
use sluice_store::conformance::Reference;
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, PolicyStats, StoreError, WhenFull};

const T: u64 = 1_000 * NANOS_PER_SEC;
const S: u64 = NANOS_PER_SEC;

fn named(name: &str, policy: impl Into<Policy>) -> NamedPolicy {
    NamedPolicy { name: name.into(), policy: policy.into() }
}

fn store(policies: Vec<NamedPolicy>, max_keys: usize, shards: usize, when_full: WhenFull) -> MemoryStore {
    MemoryStore::new(policies, MemoryOptions { max_keys, shards, when_full }, Arc::new(ManualClock::new(T)))
}

fn key(n: u64) -> KeyHash {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    k[8..].copy_from_slice(&n.wrapping_mul(0xc2b2_ae3d_27d4_eb4f).to_le_bytes());
    KeyHash(k)
}

fn one(policy: usize, n: u64, cost: u64) -> [Check; 1] {
    [Check { policy, key: key(n), cost }]
}

fn counts(s: &PolicyStats) -> (usize, u64, u64, u64) {
    (s.keys, s.evicted_fresh, s.evicted_lru, s.refused)
}

#[test]
fn fresh_entries_are_dropped_first_and_no_decision_changes() {
    // Buckets of 10 refilled at 1/s: a charge of 1 is fresh again after 1 s, a charge of 5 after 5 s.
    let policies = vec![named("bucket", TokenBucket::new(10, 1.0).unwrap())];
    let s = store(policies.clone(), 4, 1, WhenFull::default());
    let mut reference = Reference::new(&policies);
    let mut both = |n: u64, cost: u64, at: u64| {
        let checks = one(0, n, cost);
        let got = s.decide_at(&checks, at);
        assert_eq!(got, reference.decide(&checks, at), "key {n} at T + {} ns", at - T);
        got.unwrap()
    };
    for (n, cost) in [(1, 1), (2, 1), (3, 5), (4, 5)] {
        assert!(both(n, cost, T).allowed);
    }
    // At T + 2 s keys 1 and 2 are fresh, 3 and 4 are not: a fifth key drops the fresh ones.
    assert!(both(5, 1, T + 2 * S).allowed);
    assert_eq!(counts(&s.stats()[0]), (3, 2, 0, 0));
    // Every key still decides as the core does, dropped ones as the fresh keys they were (cost 0
    // reads a key's state without storing it), kept ones with their charges.
    for n in 1..=5 {
        both(n, 0, T + 2 * S);
    }
    for n in [3, 4, 5] {
        assert!(both(n, 3, T + 2 * S).allowed);
    }
    assert_eq!(counts(&s.stats()[0]), (3, 2, 0, 0));
}

/// Four live keys of a bucket that does not refill during a test, key 2 the least recently used,
/// then a fifth key, which evicts key 2.
fn key_2_evicted(when_full: WhenFull) -> MemoryStore {
    let s = store(vec![named("bucket", TokenBucket::new(100, 0.001).unwrap())], 4, 1, when_full);
    for n in 1..=4 {
        assert!(s.decide_at(&one(0, n, 1), T).unwrap().allowed);
    }
    for n in [1, 3, 4] {
        s.decide_at(&one(0, n, 1), T).unwrap();
    }
    assert!(s.decide_at(&one(0, 5, 1), T).unwrap().allowed);
    assert_eq!(counts(&s.stats()[0]), (4, 0, 1, 0));
    s
}

#[test]
fn when_all_are_live_the_least_recently_used_is_evicted_and_forgotten_if_asked() {
    let s = key_2_evicted(WhenFull::Forget);
    // Keys 1, 3, 4 kept both charges, key 5 its one.
    for (n, remaining) in [(1, 97), (3, 97), (4, 97), (5, 98)] {
        assert_eq!(s.decide_at(&one(0, n, 1), T).unwrap().decisions[0].remaining, remaining, "key {n}");
    }
    // Key 2 lost its charges: it starts over (and evicts key 1, now the least recently used).
    assert_eq!(s.decide_at(&one(0, 2, 1), T).unwrap().decisions[0].remaining, 99);
    assert_eq!(s.decide_at(&one(0, 3, 1), T).unwrap().decisions[0].remaining, 96);
    assert_eq!(s.decide_at(&one(0, 1, 1), T).unwrap().decisions[0].remaining, 99);
    assert_eq!(counts(&s.stats()[0]), (4, 0, 3, 0));
}

#[test]
fn refusing_store_rejects_new_keys_until_one_is_fresh() {
    let s = store(vec![named("bucket", TokenBucket::new(10, 1.0).unwrap())], 4, 1, WhenFull::Refuse);
    for (n, cost) in [(1, 1), (2, 10), (3, 10), (4, 10)] {
        assert!(s.decide_at(&one(0, n, cost), T).unwrap().allowed);
    }
    assert_eq!(s.decide_at(&one(0, 5, 1), T), Err(StoreError::Full { max_keys: 4 }));
    assert_eq!(counts(&s.stats()[0]), (4, 0, 0, 1));
    // Known keys are still decided.
    assert!(s.decide_at(&one(0, 1, 1), T).unwrap().allowed);
    // Key 1 (2 tokens short) is fresh at T + 2 s: it makes room.
    assert!(s.decide_at(&one(0, 5, 1), T + 2 * S).unwrap().allowed);
    assert_eq!(counts(&s.stats()[0]), (4, 1, 0, 1));
}

#[test]
fn a_refused_request_charges_none_of_its_checks() {
    let policies = vec![
        named("window", FixedWindow::new(3, 60 * S).unwrap()),
        named("bucket", TokenBucket::new(10, 0.001).unwrap()),
    ];
    let s = store(policies, 2, 1, WhenFull::Refuse);
    for n in [1, 2] {
        assert!(s.decide_at(&[one(0, n, 1)[0], one(1, n, 1)[0]], T).unwrap().allowed);
    }
    // A new key for the bucket is refused: the window's known key is not charged.
    let request = [one(0, 1, 1)[0], one(1, 7, 1)[0]];
    assert_eq!(s.decide_at(&request, T), Err(StoreError::Full { max_keys: 2 }));
    assert_eq!(s.decide_at(&one(0, 1, 1), T).unwrap().decisions[0].remaining, 1);
    // A request denied anyway needs no room: it is a denial, not an error.
    assert!(s.decide_at(&one(0, 1, 1), T).unwrap().allowed);
    let v = s.decide_at(&request, T).unwrap();
    assert!(!v.allowed);
    let stats = s.stats();
    assert_eq!((counts(&stats[0]), counts(&stats[1])), ((2, 0, 0, 0), (2, 0, 0, 1)));
}

#[test]
fn the_bound_holds_across_shards() {
    // 10 keys in 4 shards hold 3 + 3 + 2 + 2; 3 keys asked of 64 shards use 2 shards of 2 + 1.
    // (Forgetting, so that every new key is admitted and stored: tests/fold.rs floods a folding
    // store.)
    for (max_keys, shards) in [(10, 4), (3, 64), (1, 1)] {
        let s = store(vec![named("w", FixedWindow::new(5, 60 * S).unwrap())], max_keys, shards, WhenFull::Forget);
        for n in 0..1_000 {
            assert!(s.decide_at(&one(0, n, 1), T).unwrap().allowed);
        }
        let stats = &s.stats()[0];
        assert_eq!(stats.keys, max_keys, "{max_keys} keys in {shards} shards");
        assert_eq!(stats.evicted_lru, 1_000 - max_keys as u64);
        assert_eq!(stats.evicted_fresh, 0);
    }
}

#[test]
fn a_request_that_leaves_a_key_fresh_stores_nothing() {
    let s = store(vec![named("w", FixedWindow::new(5, 60 * S).unwrap())], 4, 1, WhenFull::Refuse);
    // Cost 0 charges nothing: the key stays fresh and takes no room.
    for n in 0..10 {
        assert!(s.decide_at(&one(0, n, 0), T).unwrap().allowed);
    }
    assert_eq!(counts(&s.stats()[0]), (0, 0, 0, 0));
}

#[test]
fn counters_are_per_policy() {
    let policies = vec![named("a", FixedWindow::new(5, S).unwrap()), named("b", FixedWindow::new(5, S).unwrap())];
    let s = store(policies, 2, 1, WhenFull::default());
    for n in 0..5 {
        s.decide_at(&one(0, n, 1), T).unwrap();
    }
    // Policy a's keys are all fresh in the next window: the next new keys drop them.
    for n in 10..12 {
        s.decide_at(&one(0, n, 1), T + S).unwrap();
    }
    s.decide_at(&one(1, 0, 1), T).unwrap();
    let stats = s.stats();
    assert_eq!(stats[0].name, "a");
    assert_eq!(counts(&stats[0]), (2, 2, 3, 0));
    assert_eq!(stats[1].name, "b");
    assert_eq!(counts(&stats[1]), (1, 0, 0, 0));
}

#[test]
fn when_all_are_live_the_least_recently_used_is_evicted_and_folded() {
    // Folding (the default), an evicted key keeps its charges.
    let s = key_2_evicted(WhenFull::default());
    // Key 2 was folded with 99 tokens left: it comes back with them (or fewer, never more; here
    // its summary cells, one per row in so small a store, hold nothing stricter).
    assert_eq!(s.decide_at(&one(0, 2, 1), T).unwrap().decisions[0].remaining, 98);
    // Key 1, evicted now with 98 left into the same cells, keeps its charges too.
    assert_eq!(s.decide_at(&one(0, 3, 1), T).unwrap().decisions[0].remaining, 97);
    assert_eq!(s.decide_at(&one(0, 1, 1), T).unwrap().decisions[0].remaining, 97);
    assert_eq!(counts(&s.stats()[0]), (4, 0, 3, 0));
}
