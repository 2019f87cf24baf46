//! The decision engine behind a simulation: the real memory store, driven at explicit times.
//! It knows nothing of lanes or arrivals; [`crate::simulation`] uses it, not the other way round.

use std::sync::Arc;

use sluice_core::{Decision, ManualClock, Nanos, Policy};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy, StoreError, WhenFull};

/// One memory store holding every lane's policy; lane `i` is policy `i`.
pub(crate) struct Engine {
    store: MemoryStore,
}

impl Engine {
    /// A store sized so that no key of the run is ever evicted (an eviction would change
    /// decisions): one shard per policy holding `distinct_keys`, refusing rather than evicting.
    pub(crate) fn new(policies: Vec<(String, Policy)>, distinct_keys: usize) -> Self {
        let policies = policies.into_iter().map(|(name, policy)| NamedPolicy { name, policy }).collect();
        let options = MemoryOptions { max_keys: distinct_keys.max(1), shards: 1, when_full: WhenFull::Refuse };
        // The clock is never read: every decision passes its time.
        Self { store: MemoryStore::new(policies, options, Arc::new(ManualClock::new(0))) }
    }

    /// Decides one request of cost 1 for `key` under lane `lane` at `at`.
    pub(crate) fn decide(&mut self, lane: usize, key: KeyHash, at: Nanos) -> Result<Decision, StoreError> {
        let verdict = self.store.decide_at(&[Check { policy: lane, key, cost: 1 }], at)?;
        verdict.decisions.first().copied().ok_or_else(|| StoreError::Unavailable("no decision for the check".into()))
    }
}
