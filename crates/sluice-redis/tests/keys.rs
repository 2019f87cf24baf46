//! What Redis holds: key names without raw identities, expiries equal to the time until a key
//! is fresh again, bounded sliding logs, and the script reloaded after `SCRIPT FLUSH`.

mod support;

use sluice_core::{
    FixedWindow, LeakMode, LeakyBucket, NANOS_PER_MILLI, NANOS_PER_SEC, Policy, SlidingLog, SlidingWindow, TokenBucket,
};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
use sluice_store::{Check, KeyHasher, NamedPolicy};
use support::RedisServer;

const T: u64 = 1_700_000_000 * NANOS_PER_SEC;

fn policies() -> Vec<NamedPolicy> {
    let named = |name: &str, policy: Policy| NamedPolicy { name: name.into(), policy };
    vec![
        named("fw", FixedWindow::new(5, 60 * NANOS_PER_SEC).unwrap().into()),
        named("log", SlidingLog::new(5, 30 * NANOS_PER_SEC).unwrap().into()),
        named("sw", SlidingWindow::new(5, 20 * NANOS_PER_SEC).unwrap().into()),
        named("tb", TokenBucket::new(5, 0.5).unwrap().into()),
        named("lb", LeakyBucket::new(2.0, 4, LeakMode::Shape { delay: 1 }).unwrap().into()),
    ]
}

fn store(server: &RedisServer, prefix: &str) -> RedisStore {
    let mut o = RedisOptions::single(server.url(), OnError::FailClosed);
    o.on_error = OnError::FailClosed;
    o.key_prefix = prefix.into();
    o.deny_cache_entries = 0;
    RedisStore::new(policies(), o).expect("valid store")
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cli(&["PTTL", key]).parse().expect("PTTL answers a number")
}

#[tokio::test]
async fn keys_hold_no_raw_identity_and_follow_the_layout() {
    let server = RedisServer::start();
    let s = store(&server, "sluice");
    let raw = "198.51.100.7";
    let key = KeyHasher::from_secret(b"secret").hash(&[b"ip", raw.as_bytes()]);
    for policy in 0..policies().len() {
        s.decide_detailed(&[Check { policy, key, cost: 1 }], None).await.unwrap();
    }
    let keys = server.cli(&["KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 5);
    for k in keys {
        assert!(!k.contains(raw));
        let parts: Vec<&str> = k.split(':').collect();
        assert_eq!(parts.len(), 4, "{k}");
        assert_eq!(parts[0], "sluice");
        assert!(policies().iter().any(|p| p.name == parts[1]), "{k}");
        assert!(parts[2].len() == 8 && parts[2].bytes().all(|b| b.is_ascii_hexdigit()), "{k}");
        assert_eq!(parts[3], format!("{{{}}}", key.to_hex()));
    }
}

#[tokio::test]
async fn every_key_expires_when_it_is_fresh_again() {
    let server = RedisServer::start();
    let s = store(&server, "ttl");
    let key = KeyHasher::from_secret(b"secret").hash(&[b"k"]);
    for policy in 0..policies().len() {
        let check = Check { policy, key, cost: 2 };
        let out = s.decide_detailed(&[check], None).await.unwrap();
        assert_eq!(out.source, Source::Redis);
        let d = out.verdict.decisions[0];
        assert!(d.allowed && d.reset_after > 0);
        let expected = d.reset_after.div_ceil(NANOS_PER_MILLI) as i64;
        let ttl = pttl(&server, &s.stored_key(&check).unwrap());
        // Set by the script from the same reading of the server's clock, read back a moment later.
        assert!(
            ttl <= expected && ttl > expected - 5_000,
            "{}: PTTL {ttl} ms, reset_after {expected} ms",
            policies()[policy].name
        );
    }
}

#[tokio::test]
async fn with_an_explicit_time_keys_expire_after_a_grace_period() {
    let server = RedisServer::start();
    let s = store(&server, "grace");
    let key = KeyHasher::from_secret(b"secret").hash(&[b"k"]);
    let check = Check { policy: 3, key, cost: 1 };
    let d = s.decide_detailed(&[check], Some(T)).await.unwrap().verdict.decisions[0];
    let grace = s.options().explicit_time_grace.as_millis() as i64;
    let expected = (d.reset_after / NANOS_PER_MILLI) as i64 + grace;
    let ttl = pttl(&server, &s.stored_key(&check).unwrap());
    assert!(ttl <= expected && ttl > expected - 5_000, "PTTL {ttl} ms, expected {expected} ms");
}

#[tokio::test]
async fn a_sliding_log_never_holds_more_than_its_limit() {
    let server = RedisServer::start();
    let s = store(&server, "log");
    let key = KeyHasher::from_secret(b"secret").hash(&[b"k"]);
    let stored = s.stored_key(&Check { policy: 1, key, cost: 1 }).unwrap();
    let (mut admitted, mut full) = (0, false);
    for i in 0..200u64 {
        let at = T + i * 700 * NANOS_PER_MILLI;
        let cost = 1 + i % 3;
        let v = s.decide_detailed(&[Check { policy: 1, key, cost }], Some(at)).await.unwrap().verdict;
        admitted += u64::from(v.allowed);
        let held: u64 = server.cli(&["ZCARD", &stored]).parse().unwrap();
        assert!(held <= 5, "{held} entries after request {i}");
        full |= held == 5;
    }
    assert!(full, "the log filled up");
    assert!(admitted > 10, "the log admitted as time passed: {admitted}");
}

#[tokio::test]
async fn the_script_is_sent_again_after_script_flush() {
    let server = RedisServer::start();
    let s = store(&server, "flush");
    let key = KeyHasher::from_secret(b"secret").hash(&[b"k"]);
    let check = [Check { policy: 0, key, cost: 1 }];
    let remaining = |o: &sluice_redis::SourcedVerdict| o.verdict.decisions[0].remaining;
    let first = s.decide_detailed(&check, Some(T)).await.unwrap();
    assert_eq!((first.source, remaining(&first)), (Source::Redis, 4));
    assert_eq!(s.stats().script_reloads, 1, "the first call loads the script");
    let again = s.decide_detailed(&check, Some(T)).await.unwrap();
    assert_eq!(remaining(&again), 3);
    assert_eq!(s.stats().script_reloads, 1);

    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    let after = s.decide_detailed(&check, Some(T)).await.unwrap();
    assert_eq!((after.source, remaining(&after)), (Source::Redis, 2), "state kept, decision made");
    assert_eq!(s.stats().script_reloads, 2);
    assert_eq!(s.stats().redis_errors, 0);
}
