//! `Store::key_stats` of the memory store: what the metrics endpoint reports as
//! `sluice_keys` and `sluice_evictions_total`.

use std::sync::Arc;

use sluice_core::{FixedWindow, ManualClock, NANOS_PER_SEC, Policy};
use sluice_store::{Check, KeyHasher, KeyStats, MemoryOptions, MemoryStore, NamedPolicy, Store, WhenFull};

fn policy(name: &str, limit: u64) -> NamedPolicy {
    NamedPolicy { name: name.into(), policy: Policy::from(FixedWindow::new(limit, NANOS_PER_SEC).unwrap()) }
}

#[test]
fn key_stats_count_keys_per_policy_and_lru_evictions() {
    let options = MemoryOptions { max_keys: 4, shards: 1, when_full: WhenFull::default() };
    let store = MemoryStore::new(vec![policy("a", 10), policy("b", 10)], options, Arc::new(ManualClock::new(0)));
    let h = KeyHasher::from_secret(b"0123456789abcdef");
    // Six distinct live keys under "a" (4 fit: 2 evicted as LRU), one under "b".
    for i in 0u8..6 {
        let key = h.hash(&[&[i]]);
        assert!(store.decide_at(&[Check { policy: 0, key, cost: 1 }], i as u64).unwrap().allowed);
    }
    store.decide_at(&[Check { policy: 1, key: h.hash(&[b"x"]), cost: 1 }], 6).unwrap();

    let dyn_store: Arc<dyn Store> = Arc::new(store);
    let stats = dyn_store.key_stats();
    assert_eq!(
        stats,
        vec![
            KeyStats { policy: "a".into(), keys: 4, evicted_fresh: 0, evicted_lru: 2 },
            KeyStats { policy: "b".into(), keys: 1, evicted_fresh: 0, evicted_lru: 0 },
        ]
    );
}

#[test]
fn fresh_entries_are_evicted_first_and_counted_as_such() {
    let options = MemoryOptions { max_keys: 2, shards: 1, when_full: WhenFull::default() };
    let store = MemoryStore::new(vec![policy("a", 10)], options, Arc::new(ManualClock::new(0)));
    let h = KeyHasher::from_secret(b"0123456789abcdef");
    for i in 0u8..2 {
        store.decide_at(&[Check { policy: 0, key: h.hash(&[&[i]]), cost: 1 }], 0).unwrap();
    }
    // One window later both entries are fresh again: a new key replaces one of them.
    store.decide_at(&[Check { policy: 0, key: h.hash(&[b"new"]), cost: 1 }], 2 * NANOS_PER_SEC).unwrap();
    let s = &store.key_stats()[0];
    // Every fresh entry the sweep met was dropped (none as LRU); what is left plus what was
    // dropped is the three keys seen.
    assert_eq!(s.evicted_lru, 0, "{s:?}");
    assert!(s.evicted_fresh >= 1, "{s:?}");
    assert_eq!(s.keys + s.evicted_fresh, 3, "{s:?}");
}

#[test]
fn stores_without_keys_of_their_own_report_nothing_and_are_ready() {
    struct Empty;
    impl Store for Empty {
        fn decide<'a>(&'a self, _: &'a [Check], _: Option<u64>) -> sluice_store::StoreFuture<'a> {
            Box::pin(std::future::ready(Ok(sluice_store::Verdict::at(true, vec![], 0))))
        }
        fn policies(&self) -> &[NamedPolicy] {
            &[]
        }
        fn kind(&self) -> &'static str {
            "empty"
        }
    }
    let s: Arc<dyn Store> = Arc::new(Empty);
    assert!(s.key_stats().is_empty());
    assert!(s.ready());
    assert_eq!((s.breaker_open(), s.deny_cache_hits()), (None, None));
}
