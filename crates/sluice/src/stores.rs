//! Which store a configuration asks for.

use std::sync::Arc;

use sluice_config::{Config, StoreConfig};
use sluice_core::SystemClock;
use sluice_http::gateway::StoreFactory;
use sluice_http::memory_factory::MemoryFactory;

/// The store factory for `config.store`.
pub fn factory(config: &Config) -> anyhow::Result<Box<dyn StoreFactory>> {
    match &config.store {
        StoreConfig::Memory { .. } => Ok(Box::new(MemoryFactory::new(Arc::new(SystemClock::new())))),
        StoreConfig::Redis { .. } => anyhow::bail!("store kind \"redis\" is not available in this build yet"),
    }
}
