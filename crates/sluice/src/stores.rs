//! Which store a configuration asks for.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Config, OnError, StoreConfig};
use sluice_core::SystemClock;
use sluice_http::gateway::StoreFactory;
use sluice_http::memory_factory::{MemoryFactory, named_policies};
use sluice_redis::{RedisOptions, RedisStore};
use sluice_store::Store;

/// The store factory for `config.store`.
pub fn factory(config: &Config) -> anyhow::Result<Box<dyn StoreFactory>> {
    match &config.store {
        StoreConfig::Memory { .. } => Ok(Box::new(MemoryFactory::new(Arc::new(SystemClock::new())))),
        StoreConfig::Redis { .. } => Ok(Box::new(RedisFactory)),
    }
}

/// Builds a Redis store per configuration. State lives in Redis under keys that carry a
/// fingerprint of each policy's parameters, so a reload keeps the state of unchanged policies.
struct RedisFactory;

impl StoreFactory for RedisFactory {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, String> {
        let StoreConfig::Redis { urls, cluster, on_error, timeout_ms, key_prefix } = &config.store else {
            return Err("store kind changed on reload: restart to change it".into());
        };
        let mut options =
            if *cluster { RedisOptions::cluster(urls.clone()) } else { RedisOptions::single(urls[0].clone()) };
        options.on_error = match on_error {
            OnError::FailOpen => sluice_redis::OnError::FailOpen,
            OnError::FailClosed => sluice_redis::OnError::FailClosed,
            OnError::Local => sluice_redis::OnError::Local,
        };
        options.timeout = Duration::from_millis(*timeout_ms);
        options.key_prefix = key_prefix.clone();
        let store = RedisStore::new(named_policies(config), options).map_err(|e| e.to_string())?;
        Ok(Arc::new(store))
    }
}
