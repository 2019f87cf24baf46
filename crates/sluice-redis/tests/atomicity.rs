//! Several limits on one request, on one node: one script call decides them all, and a denial
//! by any charges none.

mod support;

use sluice_core::{FixedWindow, NANOS_PER_SEC, Policy, SlidingLog, TokenBucket};
use sluice_redis::{OnError, RedisOptions, RedisStore};
use sluice_store::{Check, KeyHasher, NamedPolicy, Store};
use support::RedisServer;

const T: u64 = 1_700_000_000 * NANOS_PER_SEC;

fn store(server: &RedisServer) -> RedisStore {
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    let policies = vec![
        named("per-ip", FixedWindow::new(3, 60 * NANOS_PER_SEC).unwrap().into()),
        named("per-account", TokenBucket::new(1, 1.0).unwrap().into()),
        named("per-route", SlidingLog::new(10, 60 * NANOS_PER_SEC).unwrap().into()),
    ];
    let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
    o.on_error = OnError::FailClosed;
    o.deny_cache_entries = 0;
    RedisStore::new(policies, o).expect("valid store")
}

#[tokio::test]
async fn one_call_decides_every_limit_and_a_denial_charges_none() {
    let server = RedisServer::start();
    let s = store(&server);
    let h = KeyHasher::from_secret(b"t");
    let (ip, account, route) = (h.hash(&[b"203.0.113.9"]), h.hash(&[b"alice"]), h.hash(&[b"/login"]));
    let request = [
        Check { policy: 0, key: ip, cost: 1 },
        Check { policy: 1, key: account, cost: 1 },
        Check { policy: 2, key: route, cost: 1 },
    ];
    let v = s.decide(&request, Some(T)).await.unwrap();
    assert!(v.allowed);
    assert_eq!(s.stats().redis_calls, 2, "one EVALSHA answered NOSCRIPT, one EVAL ran the three checks");

    let ip_key = s.stored_key(&request[0]).unwrap();
    let route_key = s.stored_key(&request[2]).unwrap();
    let ip_state = server.cli(&["GET", &ip_key]);
    assert!(ip_state.ends_with(":1"), "the IP window counts one request: {ip_state}");

    // The account bucket is empty: denied as a whole, in one more call.
    for _ in 0..3 {
        let v = s.decide(&request, Some(T + 1_000)).await.unwrap();
        assert!(!v.allowed);
        assert!(v.decisions[0].allowed && !v.decisions[1].allowed && v.decisions[2].allowed);
    }
    assert_eq!(s.stats().redis_calls, 5, "one call per request");
    assert_eq!(server.cli(&["GET", &ip_key]), ip_state, "the denied requests did not charge the IP");
    assert_eq!(server.cli(&["ZCARD", &route_key]), "1", "nor the route");

    // A second later the account has a token again: all three are charged.
    let v = s.decide(&request, Some(T + NANOS_PER_SEC)).await.unwrap();
    assert!(v.allowed);
    assert!(server.cli(&["GET", &ip_key]).ends_with(":2"));
    assert_eq!(server.cli(&["ZCARD", &route_key]), "2");
}
