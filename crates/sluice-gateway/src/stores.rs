//! The store a configuration asks for (`[store]`), built again on every reload so that
//! policies that did not change keep their state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_config::{Config, OnError, StoreConfig};
use sluice_core::{Clock, SystemClock};
use sluice_redis::{RedisOptions, RedisStore};
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store};

use crate::error::GatewayError;

/// Builds the store of a configuration; on reload it is given the store in use.
pub trait StoreBuilder: Send + Sync + 'static {
    /// The store for `config` (its policies in config order).
    fn build(&self, config: &Config, previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError>;
}

/// The builder for `config.store`: memory (reading the system clock) or Redis.
pub fn for_config(config: &Config) -> Box<dyn StoreBuilder> {
    match &config.store {
        StoreConfig::Memory { .. } => Box::new(MemoryStores::new(Arc::new(SystemClock::new()))),
        StoreConfig::Redis { .. } => Box::new(RedisStores),
    }
}

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

/// Builds in-memory stores: on reload, policies equal to the old ones keep their tables (and
/// so their state).
pub struct MemoryStores {
    /// The clock every store it builds reads (a manual one in tests).
    clock: Arc<dyn Clock>,
    /// The store last built, whose tables a reload takes over.
    current: Mutex<Option<Arc<MemoryStore>>>,
}

impl MemoryStores {
    /// A builder whose stores read `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, current: Mutex::new(None) }
    }
}

impl StoreBuilder for MemoryStores {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError> {
        // A poisoned lock only means a panic elsewhere mid-build; the store it guards is whole.
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
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

/// Builds a Redis store per configuration. State lives in Redis under keys that carry a
/// fingerprint of each policy's parameters, so a reload keeps the state of unchanged policies.
pub struct RedisStores;

impl StoreBuilder for RedisStores {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError> {
        let StoreConfig::Redis { urls, cluster, on_error, timeout_ms, key_prefix } = &config.store else {
            return Err(GatewayError::NeedsRestart("store.kind"));
        };
        let exposed: Vec<String> = urls.iter().map(|u| u.expose().to_owned()).collect();
        let mut options =
            if *cluster { RedisOptions::cluster(exposed) } else { RedisOptions::single(exposed[0].clone()) };
        options.on_error = match on_error {
            OnError::FailOpen => sluice_redis::OnError::FailOpen,
            OnError::FailClosed => sluice_redis::OnError::FailClosed,
            OnError::Local => sluice_redis::OnError::Local,
        };
        options.timeout = Duration::from_millis(*timeout_ms);
        options.key_prefix = key_prefix.clone();
        let store =
            Arc::new(RedisStore::new(named_policies(config), options).map_err(|e| GatewayError::Store(e.to_string()))?);
        // Redis evicting sluice's keys under memory pressure would reset limits: say so at start
        // (asked in the background, so a slow Redis does not hold start-up).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let asked = store.clone();
            runtime.spawn(async move {
                if let Some(warning) = asked.eviction_warning().await {
                    tracing::warn!(target: "sluice::event", event = "redis_may_evict", "{warning}");
                }
            });
        }
        Ok(store)
    }
}
