//! The load of the fault tests (`cluster_faults.rs`, `sentinel_faults.rs`): three `RedisStore`s
//! (three sluice instances) decide one hot key and many other keys concurrently, and every
//! decision is kept as its caller saw it. The hot key is a token bucket of known capacity and
//! rate, so the requests it may admit between two instants are known (capacity + rate x
//! elapsed).
//!
//! Declared by those two test files (`#[path = "support/hot_load.rs"]`) rather than from
//! `support/mod.rs`: that module is included by the tests of crates that do not depend on
//! `sluice-redis`.

#![allow(dead_code)] // each test binary uses part of this module

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_core::{Policy, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
use sluice_store::{Check, KeyHasher, NamedPolicy, StoreError};

/// The hot key's bucket: 200 at once, 20 a second after that.
pub const CAPACITY: u64 = 200;
pub const RATE: f64 = 20.0;
/// Each of the other keys: 5, refilled at a token per 1000 s.
pub const SPREAD: u64 = 5;
/// The other keys.
pub const KEYS: u64 = 1_500;
/// Concurrent request loops per store.
pub const LOOPS: u64 = 4;

/// The hot key's policy (0) and the other keys' (1).
pub fn policies() -> Vec<NamedPolicy> {
    vec![
        NamedPolicy { name: "hot".into(), policy: Policy::from(TokenBucket::new(CAPACITY, RATE).unwrap()) },
        NamedPolicy { name: "spread".into(), policy: Policy::from(TokenBucket::new(SPREAD, 0.001).unwrap()) },
    ]
}

/// Three stores on `options`' servers, as three sluice instances would have, each failing as
/// `mode` says and bounding every call to 250 ms.
pub fn stores(mut options: RedisOptions, mode: OnError) -> Vec<Arc<RedisStore>> {
    options.on_error = mode;
    options.timeout = Duration::from_millis(250);
    (0..3).map(|_| Arc::new(RedisStore::new(policies(), options.clone()).expect("valid options"))).collect()
}

/// One decision as a caller saw it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Which store decided.
    pub store: usize,
    /// `None`: the hot key; else the other key's number.
    pub key: Option<u64>,
    /// When it was asked and answered.
    pub asked: Instant,
    pub answered: Instant,
    /// Admitted, and by what; or the error.
    pub outcome: Result<(bool, Source), String>,
}

impl Sample {
    pub fn admitted(&self) -> bool {
        matches!(self.outcome, Ok((true, _)))
    }

    pub fn latency(&self) -> Duration {
        self.answered - self.asked
    }

    /// An error, or a decision of the failure mode (fail-open or local) rather than of Redis.
    pub fn failed(&self) -> bool {
        self.outcome.is_err() || matches!(self.outcome, Ok((_, Source::FailOpen | Source::Local)))
    }

    pub fn by_redis(&self) -> bool {
        matches!(self.outcome, Ok((_, Source::Redis)))
    }
}

/// The load around one change: every decision, in the order they were answered.
pub struct Change<R> {
    pub samples: Vec<Sample>,
    /// When the change began and ended.
    pub began: Instant,
    pub ended: Instant,
    /// What the change returned.
    pub result: R,
}

/// The keys of the load, hashed with a secret of the test's own (it decides, among others, the
/// Cluster slot each key lands in).
#[derive(Debug, Clone, Copy)]
pub struct HotLoad {
    secret: &'static [u8],
}

impl HotLoad {
    pub const fn new(secret: &'static [u8]) -> Self {
        Self { secret }
    }

    /// The hot key (policy 0).
    pub fn hot(self) -> Check {
        Check { policy: 0, key: KeyHasher::from_secret(self.secret).hash(&[b"hot"]), cost: 1 }
    }

    /// The other key `n` (policy 1).
    pub fn spread(self, n: u64) -> Check {
        Check { policy: 1, key: KeyHasher::from_secret(self.secret).hash(&[b"spread", &n.to_le_bytes()]), cost: 1 }
    }

    /// Runs the load on `stores` for `before`, then `change` (blocking), then the load for
    /// `after` more.
    pub async fn under_load<R>(
        self,
        stores: &[Arc<RedisStore>],
        before: Duration,
        change: impl FnOnce() -> R,
        after: Duration,
    ) -> Change<R> {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = self.drive(stores, &stop);
        tokio::time::sleep(before).await;
        let began = Instant::now();
        let result = tokio::task::block_in_place(change);
        let ended = Instant::now();
        tokio::time::sleep(after).await;
        stop.store(true, Ordering::Relaxed);
        let mut samples = Vec::new();
        for t in tasks {
            samples.extend(t.await.unwrap());
        }
        samples.sort_by_key(|s| s.answered);
        Change { samples, began, ended, result }
    }

    /// Request loops on every store, alternating the hot key and the other keys, until `stop`.
    fn drive(self, stores: &[Arc<RedisStore>], stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<Vec<Sample>>> {
        let mut tasks = Vec::new();
        for (s, store) in stores.iter().enumerate() {
            for l in 0..LOOPS {
                let (store, stop) = (store.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    let mut samples = Vec::new();
                    let mut n = (s as u64 * LOOPS + l) * 7919;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let key = (n % 2 == 1).then_some(n / 2 % KEYS);
                        let check = key.map_or_else(|| self.hot(), |k| self.spread(k));
                        let asked = Instant::now();
                        let outcome = store.decide_detailed(&[check], None).await;
                        let answered = Instant::now();
                        let outcome = outcome.map(|o| (o.verdict.allowed, o.source)).map_err(|e| match e {
                            StoreError::Unavailable(_) | StoreError::Timeout(_) => e.to_string(),
                            other => panic!("an error no fault explains: {other}"),
                        });
                        samples.push(Sample { store: s, key, asked, answered, outcome });
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    samples
                }));
            }
        }
        tasks
    }
}
