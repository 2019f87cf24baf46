//! The tower layer over a store shared between processes: two instances that hash keys with
//! their own random secrets keep their own buckets on one Redis, and a limit of 5 admits 10.
//! The layer refuses to build without a key secret (the gateway's configuration refuses the
//! same). Nothing connects to Redis here: the store connects on its first decision. Written as a
//! user writes it: `sluice-tower` with its `redis` feature.

use std::sync::Arc;

use sluice_tower::{
    LayerError, MemoryOptions, MemoryStore, NamedPolicy, OnError, Policy, RateLimitLayer, RedisOptions, RedisStore,
    Store, SystemClock, TokenBucket,
};

fn policies() -> Vec<NamedPolicy> {
    vec![NamedPolicy { name: "per-ip".into(), policy: Policy::from(TokenBucket::new(5, 1.0).unwrap()) }]
}

#[test]
fn a_shared_store_without_a_key_secret_is_refused_and_with_one_builds() {
    let redis: Arc<dyn Store> = Arc::new(
        RedisStore::new(policies(), RedisOptions::single("redis://127.0.0.1:1", OnError::FailClosed)).unwrap(),
    );
    let refused = RateLimitLayer::builder(redis.clone()).limit("per-ip", "ip").build().err();
    assert_eq!(refused, Some(LayerError::SharedStoreNeedsSecret("redis")));
    assert!(refused.unwrap().to_string().contains(".key_secret("));
    let built = RateLimitLayer::builder(redis).limit("per-ip", "ip").key_secret(b"the same in every process").build();
    assert!(built.is_ok(), "{built:?}");
    // A store of this process alone needs no secret: its random one is never seen elsewhere.
    let memory: Arc<dyn Store> =
        Arc::new(MemoryStore::new(policies(), MemoryOptions::default(), Arc::new(SystemClock::new())));
    assert!(RateLimitLayer::builder(memory).limit("per-ip", "ip").build().is_ok());
}
