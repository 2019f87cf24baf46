//! The store conformance suite against a real Redis: the same decisions as the core, decision
//! for decision, for all five algorithms and for requests of several checks.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};

use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::conformance;
use support::RedisServer;

fn exact_options(url: String, prefix: String) -> RedisOptions {
    let mut o = RedisOptions::single(url, OnError::FailClosed);
    o.key_prefix = prefix;
    // Cached denials repeat Redis's earlier numbers (remaining, reset) instead of today's: exact
    // conformance is about what Redis decides, so the cache is off here and tested on its own.
    o.deny_cache_entries = 0;
    o.timeout = std::time::Duration::from_secs(5);
    // An error must fail the suite, not be answered by a fallback.
    o.on_error = OnError::FailClosed;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_exactly_as_the_core() {
    let server = RedisServer::start();
    let n = AtomicU32::new(0);
    conformance::run_all(|policies| {
        let prefix = format!("conformance{}", n.fetch_add(1, Ordering::Relaxed));
        let store = RedisStore::new(policies, exact_options(server.url(), prefix)).expect("valid store");
        std::future::ready(store)
    })
    .await;
    // Every scenario was decided by Redis, not by a failure path.
    assert!(n.load(Ordering::Relaxed) >= 10);
}
