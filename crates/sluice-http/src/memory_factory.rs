//! Builds memory stores for the gateway, keeping state across reloads.

use std::sync::{Arc, Mutex};

use sluice_config::{Config, StoreConfig};
use sluice_core::Clock;
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store};

use crate::gateway::StoreFactory;

/// The policies of a configuration as a store takes them.
pub fn named_policies(config: &Config) -> Vec<NamedPolicy> {
    config.policies.iter().map(|p| NamedPolicy { name: p.name.clone(), policy: p.policy }).collect()
}

/// The memory store's options from `[store]` (defaults when the store is not `memory`).
pub fn memory_options(config: &StoreConfig) -> MemoryOptions {
    match config {
        StoreConfig::Memory { max_keys, shards, when_full } => {
            MemoryOptions { max_keys: *max_keys, shards: *shards, when_full: *when_full }
        }
        StoreConfig::Redis { .. } => MemoryOptions::default(),
    }
}

/// A [`StoreFactory`] for the in-memory store: on reload, policies equal to the old ones keep
/// their tables (and so their state).
pub struct MemoryFactory {
    clock: Arc<dyn Clock>,
    current: Mutex<Option<Arc<MemoryStore>>>,
}

impl MemoryFactory {
    /// A factory whose stores read `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, current: Mutex::new(None) }
    }
}

impl StoreFactory for MemoryFactory {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, String> {
        let mut current = self.current.lock().map_err(|_| "memory store factory poisoned".to_string())?;
        let policies = named_policies(config);
        let options = memory_options(&config.store);
        let store = match current.as_ref() {
            // Same bounds: unchanged policies keep their tables. New bounds: a new store.
            Some(old) if *old.options() == options => Arc::new(old.rebuild(policies)),
            _ => Arc::new(MemoryStore::new(policies, options, self.clock.clone())),
        };
        *current = Some(store.clone());
        Ok(store)
    }
}
