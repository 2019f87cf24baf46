//! One shared limit under contention: 300 concurrent decisions of one key, from three stores
//! (three connections, as three gateway instances would have), admit exactly the capacity.

mod support;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::{FixedWindow, LeakMode, LeakyBucket, NANOS_PER_SEC, Policy, SlidingLog, SlidingWindow, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
use sluice_store::{Check, KeyHasher, NamedPolicy};
use support::RedisServer;

const CAPACITY: u64 = 100;
const MONTH: u64 = 30 * 86_400 * NANOS_PER_SEC;

fn policies() -> Vec<NamedPolicy> {
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    vec![
        named("token-bucket", TokenBucket::new(CAPACITY, 0.001).unwrap().into()),
        named("leaky-bucket", LeakyBucket::new(0.001, CAPACITY, LeakMode::Police).unwrap().into()),
        named("fixed-window", FixedWindow::new(CAPACITY, MONTH).unwrap().into()),
        named("sliding-window", SlidingWindow::new(CAPACITY, MONTH).unwrap().into()),
        named("sliding-log", SlidingLog::new(CAPACITY, MONTH).unwrap().into()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_concurrent_decisions_admit_exactly_the_capacity() {
    let server = RedisServer::start();
    let stores: Vec<Arc<RedisStore>> = (0..3)
        .map(|_| {
            let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
            o.on_error = OnError::FailClosed;
            o.timeout = Duration::from_secs(10);
            Arc::new(RedisStore::new(policies(), o).expect("valid store"))
        })
        .collect();
    let key = KeyHasher::from_secret(b"shared").hash(&[b"ip", b"198.51.100.20"]);
    for policy in 0..policies().len() {
        let mut tasks = Vec::new();
        for i in 0..300 {
            let store = Arc::clone(&stores[i % 3]);
            tasks.push(tokio::spawn(async move {
                let check = [Check { policy, key, cost: 1 }];
                store.decide_detailed(&check, None).await
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            let outcome = t.await.expect("the task ran").expect("Redis decided");
            assert!(matches!(outcome.source, Source::Redis | Source::DenyCache));
            admitted += u64::from(outcome.verdict.allowed);
        }
        assert_eq!(admitted, CAPACITY, "{}: 300 concurrent requests", policies()[policy].name);
    }
    // Each store connected once and kept its connection.
    for s in &stores {
        assert_eq!(s.stats().connects, 1);
        assert_eq!(s.stats().redis_errors, 0);
    }
}
