//! Rebuilding a store for new policies keeps the state of the unchanged ones.

use std::sync::Arc;

use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy, TokenBucket};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy};

const T: u64 = 1_000 * NANOS_PER_SEC;

fn named(name: &str, policy: impl Into<Policy>) -> NamedPolicy {
    NamedPolicy { name: name.into(), policy: policy.into() }
}

fn remaining(s: &MemoryStore, policy: usize) -> u64 {
    let v = s.decide_at(&[Check { policy, key: KeyHash([3; 16]), cost: 1 }], T).unwrap();
    assert!(v.allowed);
    v.decisions[0].remaining
}

#[test]
fn unchanged_policies_keep_their_state_and_others_start_empty() {
    let window = named("window", FixedWindow::new(10, 60 * NANOS_PER_SEC).unwrap());
    let bucket = named("bucket", TokenBucket::new(10, 0.001).unwrap());
    let old =
        MemoryStore::new(vec![window.clone(), bucket.clone()], MemoryOptions::default(), Arc::new(ManualClock::new(T)));
    for _ in 0..3 {
        remaining(&old, 0);
        remaining(&old, 1);
    }

    let changed_bucket = named("bucket", TokenBucket::new(20, 0.001).unwrap());
    let renamed_window = named("window-2", FixedWindow::new(10, 60 * NANOS_PER_SEC).unwrap());
    let new = old.rebuild(vec![changed_bucket, window.clone(), renamed_window, window.clone()]);
    // The window (same name, same parameters) kept its 3 charges, at its new index.
    assert_eq!(remaining(&new, 1), 6);
    // Changed parameters, a new name, or a second copy of a kept policy: empty.
    assert_eq!(remaining(&new, 0), 19);
    assert_eq!(remaining(&new, 2), 9);
    assert_eq!(remaining(&new, 3), 9);
    let keys: Vec<usize> = new.stats().iter().map(|p| p.keys).collect();
    assert_eq!(keys, [1, 1, 1, 1]);

    // Old and new share the kept table until the old one is dropped.
    assert_eq!(remaining(&old, 0), 5);
    assert_eq!(remaining(&new, 1), 4);
    // The old store's bucket is its own.
    assert_eq!(remaining(&old, 1), 6);
}

#[test]
fn rebuild_keeps_options_and_clock() {
    let clock = Arc::new(ManualClock::new(T));
    let options = MemoryOptions { max_keys: 7, shards: 2, ..MemoryOptions::default() };
    let old = MemoryStore::new(vec![named("w", FixedWindow::new(1, NANOS_PER_SEC).unwrap())], options, clock.clone());
    let new = old.rebuild(vec![named("v", FixedWindow::new(1, NANOS_PER_SEC).unwrap())]);
    assert_eq!(new.options(), &options);
    let check = [Check { policy: 0, key: KeyHash([1; 16]), cost: 1 }];
    assert!(new.decide_now(&check).unwrap().allowed);
    assert!(!new.decide_now(&check).unwrap().allowed);
    clock.advance(NANOS_PER_SEC);
    assert!(new.decide_now(&check).unwrap().allowed, "the rebuilt store reads the same clock");
}
