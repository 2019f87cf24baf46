//! The memory store against the conformance suite, with the default sizing and with a bound so
//! tight that only fresh entries can make room.

use std::future::{Ready, ready};
use std::sync::Arc;

use sluice_core::ManualClock;
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, WhenFull, conformance};

fn memory(options: MemoryOptions) -> impl FnMut(Vec<NamedPolicy>) -> Ready<MemoryStore> {
    move |policies| ready(MemoryStore::new(policies, options, Arc::new(ManualClock::new(0))))
}

#[test]
fn memory_store_conforms() {
    conformance::block_on(conformance::run_all(memory(MemoryOptions::default())));
}

/// The scenarios use at most four keys per policy: a one-shard store of four keys that refuses
/// when full must still decide exactly as the core, making room only by dropping fresh entries.
#[test]
fn memory_store_conforms_at_its_bound() {
    let options = MemoryOptions { max_keys: 4, shards: 1, when_full: WhenFull::Refuse };
    conformance::block_on(conformance::run_all(memory(options)));
}

#[test]
fn the_suite_catches_a_store_that_forgets() {
    // A store rebuilt from nothing before every request forgets every charge: the suite must fail.
    use sluice_core::Nanos;
    use sluice_store::{Check, Store, StoreFuture};
    struct Forgetful(MemoryStore);
    impl Store for Forgetful {
        fn decide<'a>(&'a self, checks: &'a [Check], at: Option<Nanos>) -> StoreFuture<'a> {
            let fresh = self.0.rebuild(Vec::new()).rebuild(self.0.policies().to_vec());
            let verdict = fresh.decide_at(checks, at.unwrap_or(0));
            Box::pin(ready(verdict))
        }
        fn policies(&self) -> &[NamedPolicy] {
            self.0.policies()
        }
        fn kind(&self) -> &'static str {
            "forgetful"
        }
    }
    let mut make = |policies| {
        ready(Forgetful(MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(0)))))
    };
    let caught = std::panic::catch_unwind(move || {
        conformance::block_on(conformance::token_bucket(&mut make));
    });
    assert!(caught.is_err(), "a store that keeps no state passed the token bucket scenario");
}
