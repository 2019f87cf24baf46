//! The single-node connection: a password, an ACL user and a database from the URL; a wrong
//! password refused; and requests dropped before their reply (a caller's own timeout) leaving
//! every later request its own reply.

mod support;

use std::task::{Context, Waker};
use std::time::Duration;

use sluice_core::{FixedWindow, NANOS_PER_SEC, Policy};
use sluice_redis::{OnError, RedisOptions, RedisStore, Source};
use sluice_store::{Check, KeyHasher, NamedPolicy, Store};
use support::RedisServer;

const T: u64 = 1_700_000_000 * NANOS_PER_SEC;

fn store(url: String, limits: &[u64]) -> RedisStore {
    let policies = limits
        .iter()
        .enumerate()
        .map(|(i, &limit)| NamedPolicy {
            name: format!("p{i}"),
            policy: Policy::from(FixedWindow::new(limit, 60 * NANOS_PER_SEC).unwrap()),
        })
        .collect();
    let mut o = RedisOptions::single(url, OnError::FailClosed);
    o.on_error = OnError::FailClosed;
    o.timeout = Duration::from_secs(10);
    o.deny_cache_entries = 0;
    RedisStore::new(policies, o).expect("valid store")
}

fn check(policy: usize, name: &[u8]) -> [Check; 1] {
    [Check { policy, key: KeyHasher::from_secret(b"conn").hash(&[name]), cost: 1 }]
}

#[tokio::test]
async fn password_and_database_come_from_the_url() {
    let server = RedisServer::start_with_args(&["--requirepass", "s3cret"]);
    let s = store(format!("redis://:s3cret@127.0.0.1:{}/3", server.port), &[2]);
    for expect in [true, true, false] {
        let v = s.decide_detailed(&check(0, b"a"), Some(T)).await.expect("Redis decided");
        assert_eq!((v.verdict.allowed, v.source), (expect, Source::Redis));
    }
    s.ping().await.expect("PING on the authenticated connection");
    let dbsize = |db: &str| server.cli(&["-a", "s3cret", "--no-auth-warning", "-n", db, "DBSIZE"]);
    assert_eq!(dbsize("3"), "1", "the key is in database 3");
    assert_eq!(dbsize("0"), "0");

    let wrong = store(format!("redis://:nope@127.0.0.1:{}/3", server.port), &[2]);
    let refused = wrong.decide(&check(0, b"a"), Some(T)).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(wrong.stats().redis_calls, 0, "no script call without a session");
}

#[tokio::test]
async fn an_acl_user_authenticates_with_its_name() {
    let server = RedisServer::start();
    assert_eq!(server.cli(&["ACL", "SETUSER", "alice", "on", ">pw", "~*", "&*", "+@all"]), "OK");
    assert_eq!(server.cli(&["ACL", "SETUSER", "default", "off"]), "OK");
    let s = store(format!("redis://alice:pw@127.0.0.1:{}", server.port), &[2]);
    let v = s.decide_detailed(&check(0, b"a"), Some(T)).await.expect("Redis decided as alice");
    assert!(v.verdict.allowed);
    let clients = server.cli(&["--user", "alice", "--pass", "pw", "--no-auth-warning", "CLIENT", "LIST"]);
    assert!(clients.lines().filter(|l| l.contains("user=alice")).count() >= 2, "{clients}");
}

#[tokio::test]
async fn a_request_dropped_before_its_reply_leaves_the_next_their_own() {
    let server = RedisServer::start();
    // Policy 0 counts to 50, policy 1 to 100: a reply handed to the wrong request shows.
    let s = store(server.url(), &[50, 100]);
    s.decide(&check(0, b"warm"), Some(T)).await.expect("connected");
    for i in 0..10u64 {
        // Polled once: written, then dropped before Redis answers. Redis holds scripts for
        // 200 ms (`CLIENT PAUSE ... WRITE`), so no reply can be there when the poll reads.
        assert_eq!(server.cli(&["CLIENT", "PAUSE", "200", "WRITE"]), "OK");
        let b = check(1, b"b");
        let mut dropped = s.decide(&b, Some(T));
        let polled = dropped.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        assert!(polled.is_pending(), "answered while Redis held scripts: {polled:?}");
        drop(dropped);
        let v = s.decide(&check(0, b"a"), Some(T)).await.expect("Redis decided");
        assert_eq!((v.decisions[0].limit, v.decisions[0].remaining), (50, 49 - i));
    }
    // Every dropped request reached Redis and was charged; its reply was thrown away.
    let b = s.decide(&check(1, b"b"), Some(T)).await.expect("Redis decided");
    assert_eq!((b.decisions[0].limit, b.decisions[0].remaining), (100, 89));
    assert_eq!((s.stats().connects, s.stats().redis_errors, s.stats().timeouts), (1, 0, 0));
}
