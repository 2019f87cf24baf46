//! Reading Redis's `maxmemory-policy`, for the start-up warning: only `noeviction` never drops a
//! key that is still limited.

#[cfg(feature = "external-programs")]
mod support;

use std::time::Duration;

use sluice_core::{Policy, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::NamedPolicy;
#[cfg(feature = "external-programs")]
use support::RedisServer;

fn store(url: String) -> RedisStore {
    let policies = vec![NamedPolicy { name: "tb".into(), policy: Policy::from(TokenBucket::new(5, 1.0).unwrap()) }];
    let mut options = RedisOptions::single(url, OnError::FailClosed);
    options.timeout = Duration::from_millis(500);
    RedisStore::new(policies, options).unwrap()
}

#[cfg(feature = "external-programs")]
#[tokio::test]
async fn only_noeviction_goes_without_a_warning() {
    let server = RedisServer::start();
    let s = store(server.url());
    assert_eq!(s.maxmemory_policy().await.unwrap(), "noeviction", "the Redis default");
    assert_eq!(s.eviction_warning().await, None);
    for evicting in ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-ttl", "volatile-lru"] {
        assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory-policy", evicting]), "OK");
        assert_eq!(s.maxmemory_policy().await.unwrap(), evicting);
        let warning = s.eviction_warning().await.expect("a warning");
        assert!(warning.contains(evicting) && warning.contains("noeviction"), "{warning}");
    }
}

#[tokio::test]
async fn an_unreadable_policy_is_an_error_and_no_warning() {
    // Nothing listens on port 1.
    let s = store("redis://127.0.0.1:1".into());
    assert!(s.maxmemory_policy().await.is_err());
    assert_eq!(s.eviction_warning().await, None);
}
