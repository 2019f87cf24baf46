//! What a Redis outage does to `sluice serve`, as an operator sees it: the store's events fire
//! once each (`store_failure` when Redis stops answering, with the cause; `store_recovered` when
//! it answers again), however many requests the local deny cache answers in between; and a key
//! Redis denied before the outage stays denied after a reload during it, under `fail-open` and
//! under `local`. A real `redis-server`, killed mid-test; the binary as an operator runs it.

mod ops_support;
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ops_support::{Running, Scraped, WAIT, http, redis_gateway_keyed};
use redis_support::RedisServer;
use support::TempDir;

/// A gateway on the Redis at `url` with `on_error`: `/api/hello` limited to 2 an hour per
/// `X-User` (policy `per-ip`, whatever its name says). `first` is written before that policy
/// (another policy, on reload), so its position in the configuration can change while it stays
/// the same policy.
fn config(url: &str, on_error: &str, first: &str) -> String {
    redis_gateway_keyed(url, on_error, "header:x-user", first)
}

/// A policy listed before the limited one on reload.
const ANOTHER: &str = r#"
[[policy]]
name = "per-route"
algorithm = "fixed-window"
limit = 1000
window = "1m"
"#;

/// `GET /api/hello` as `user`: the status.
fn hello(gateway: SocketAddr, user: &str) -> u16 {
    http(gateway, "GET", "/api/hello", &format!("X-User: {user}\r\n"), "").status
}

/// `sluice serve` on `redis` with `on_error`; its addresses.
fn serve(dir: &TempDir, redis: &RedisServer, on_error: &str) -> (Running, String, SocketAddr, SocketAddr) {
    let path = dir.write("sluice.toml", &config(&redis.url(), on_error, ""));
    let sluice = Running::start(&["serve", "--config", &path], &[]);
    let (gateway, admin) = sluice.gateway_addresses();
    (sluice, path, gateway, admin.expect("the admin listener"))
}

/// Every JSON line among `lines` whose `event` starts with `store_`.
fn store_events(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"].as_str().is_some_and(|e| e.starts_with("store_")))
        .collect()
}

#[test]
fn store_events_fire_once_each_while_the_deny_cache_answers_during_an_outage() {
    let mut redis = RedisServer::start();
    let dir = TempDir::new("outage-events");
    let (sluice, _path, gateway, _admin) = serve(&dir, &redis, "fail-open");
    let spent: Vec<u16> = (0..3).map(|_| hello(gateway, "spent")).collect();
    assert_eq!(spent, [200, 200, 429], "Redis decides, and its denial is cached");

    redis.kill();
    // Failures and deny-cache hits, interleaved: the hits are not Redis answering again.
    for i in 0..4 {
        assert_eq!(hello(gateway, &format!("other-{i}")), 200, "fail-open admits");
        assert_eq!(hello(gateway, "spent"), 429, "the deny cache still denies");
    }

    // Redis comes back (empty). Once the breaker lets a call through, Redis decides again: a
    // new user's third request is Redis's denial, where fail-open would admit it.
    redis.restart();
    let deadline = Instant::now() + WAIT;
    while hello(gateway, "after") != 429 {
        assert!(Instant::now() < deadline, "Redis did not decide again within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(hello(gateway, "spent"), 429, "a hit after the recovery");

    // A reload marks the end of what to read: every line before it was written.
    sluice.signal("HUP");
    let events = store_events(&sluice.lines_until("\"event\":\"reload\""));
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["store_failure", "store_recovered"], "{events:?}");
    let failure = &events[0];
    assert_eq!(failure["store"], "redis");
    assert!(matches!(failure["kind"].as_str(), Some("unavailable" | "timeout")), "{failure}");
    assert!(failure["error"].as_str().is_some_and(|e| e.contains("redis") || e.contains("timed out")), "{failure}");
}

#[test]
fn a_key_denied_before_an_outage_stays_denied_after_a_reload_during_it() {
    for on_error in ["fail-open", "local"] {
        let mut redis = RedisServer::start();
        let dir = TempDir::new("outage-reload");
        let (sluice, path, gateway, admin) = serve(&dir, &redis, on_error);
        let spent: Vec<u16> = (0..3).map(|_| hello(gateway, "spent")).collect();
        assert_eq!(spent, [200, 200, 429], "{on_error}: Redis decides");

        redis.kill();
        assert_eq!(hello(gateway, "spent"), 429, "{on_error}: denied from the deny cache");
        // The breaker opens after three failed calls.
        for i in 0..3 {
            assert_eq!(hello(gateway, &format!("other-{i}")), 200, "{on_error}: served without Redis");
        }
        assert_eq!(Scraped::from(admin).must("sluice_breaker_open", &[("store", "redis")]), 1.0, "{on_error}");

        // Reloaded with another policy listed first: the limited one is the same policy, now second.
        std::fs::write(&path, config(&redis.url(), on_error, ANOTHER)).expect("rewrite the configuration");
        sluice.signal("HUP");
        let reload = sluice.line_with("\"event\":\"reload\"");
        assert!(reload.contains("\"result\":\"ok\""), "{on_error}: {reload}");

        assert_eq!(hello(gateway, "spent"), 429, "{on_error}: still denied after the reload");
        let m = Scraped::from(admin);
        assert_eq!(m.must("sluice_breaker_open", &[("store", "redis")]), 1.0, "{on_error}: the outage goes on");
        let hits = m.must("sluice_deny_cache_hits_total", &[("store", "redis")]);
        assert_eq!(hits, 2.0, "{on_error}: the counter goes on across the reload");
    }
}
