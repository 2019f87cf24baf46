//! Bursts of concurrent decisions on a multi-thread runtime, whose I/O driver runs beside the
//! request reading the socket: none may wait out the timeout. A reply arriving while the reader
//! was between its read and a readiness clear used to be left unread until the timeout (found
//! in review: 5 of 6 runs stalled within about 2 s).

mod support;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::{FixedWindow, NANOS_PER_SEC, Policy};
use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::{Check, KeyHasher, NamedPolicy, StoreError};
use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_of_decisions_never_wait_out_the_timeout() {
    let server = RedisServer::start();
    let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
    o.on_error = OnError::FailClosed;
    o.timeout = Duration::from_millis(500);
    o.deny_cache_entries = 0;
    let window = FixedWindow::new(1 << 30, NANOS_PER_SEC).unwrap();
    let store =
        Arc::new(RedisStore::new(vec![NamedPolicy { name: "w".into(), policy: Policy::from(window) }], o).unwrap());
    let hasher = KeyHasher::from_secret(b"bursts");
    for burst in 0..20_000u64 {
        let tasks: Vec<_> = (0..(2 + burst % 3))
            .map(|i| {
                let (store, key) = (Arc::clone(&store), hasher.hash(&[&i.to_le_bytes()]));
                tokio::spawn(async move { store.decide_detailed(&[Check { policy: 0, key, cost: 1 }], None).await })
            })
            .collect();
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => {}
                Err(StoreError::Timeout(ms)) => panic!("burst {burst}: a decision waited out the {ms} ms timeout"),
                Err(e) => panic!("burst {burst}: {e}"),
            }
        }
    }
}
