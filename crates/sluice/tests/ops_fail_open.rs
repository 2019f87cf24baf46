//! Redis dies under `sluice serve`: whatever the failure mode, every store error is counted
//! (`sluice_store_errors_total`), and the answers the failure mode gives instead of Redis are
//! told apart from Redis's decisions — in the metrics (`allowed_degraded`,
//! `sluice_degraded_total`), in the decision lines (`"degraded"`) and on the status page. A
//! real `redis-server`, killed mid-test; the binary as an operator runs it.

mod ops_support;
#[path = "../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
mod support;

use std::net::SocketAddr;

use ops_support::{Running, Scraped, get, redis_gateway};
use redis_support::RedisServer;
use support::TempDir;

/// `sluice serve` on `redis` with `on_error`, a limit of 2 per IP; its addresses.
fn serve(dir: &TempDir, redis: &RedisServer, on_error: &str) -> (Running, SocketAddr, SocketAddr) {
    let config = redis_gateway(&redis.url(), on_error);
    let path = dir.write("sluice.toml", &config);
    let sluice = Running::start(&["serve", "--config", &path], &[]);
    let (gateway, admin) = sluice.gateway_addresses();
    (sluice, gateway, admin.expect("the admin listener"))
}

fn statuses(gateway: SocketAddr, n: usize) -> Vec<u16> {
    (0..n).map(|_| get(gateway, "/api/hello").status).collect()
}

/// `sluice_store_errors_total` of the Redis store, every kind.
fn store_errors(m: &Scraped) -> f64 {
    ["timeout", "unavailable"]
        .iter()
        .map(|kind| m.must("sluice_store_errors_total", &[("store", "redis"), ("kind", kind)]))
        .sum()
}

fn decisions(m: &Scraped, outcome: &str) -> f64 {
    m.must("sluice_decisions_total", &[("route", "hello"), ("policy", "per-ip"), ("outcome", outcome)])
}

#[test]
fn fail_open_admissions_are_counted_as_store_errors_and_marked_degraded() {
    let mut redis = RedisServer::start();
    let dir = TempDir::new("fail-open");
    let (sluice, gateway, admin) = serve(&dir, &redis, "fail-open");

    // Up to the limit only: a key Redis denied would stay denied from the local deny cache.
    assert_eq!(statuses(gateway, 2), [200, 200], "Redis decides");
    let m = Scraped::from(admin);
    assert_eq!(store_errors(&m), 0.0, "the error series exist before the first error");
    assert_eq!(m.must("sluice_degraded_total", &[("store", "redis"), ("mode", "fail-open")]), 0.0);

    redis.kill();
    assert_eq!(statuses(gateway, 4), [200; 4], "fail-open admits beyond the limit");

    let m = Scraped::from(admin);
    assert_eq!(store_errors(&m), 4.0, "every fail-open admission is a store error:\n{}", m.text);
    assert_eq!(decisions(&m, "allowed"), 2.0, "Redis's admissions only");
    assert_eq!(decisions(&m, "denied"), 0.0);
    assert_eq!(decisions(&m, "allowed_degraded"), 4.0);
    assert_eq!(m.must("sluice_requests_total", &[("route", "hello"), ("outcome", "allowed_degraded")]), 4.0);
    assert_eq!(m.must("sluice_degraded_total", &[("store", "redis"), ("mode", "fail-open")]), 4.0);
    assert_eq!(m.must("sluice_breaker_open", &[("store", "redis")]), 1.0, "three failures open the breaker");
    assert_eq!(m.must("sluice_store_ready", &[("store", "redis")]), 1.0, "fail-open still serves");

    // The decision lines: four admissions marked as fail-open's.
    let degraded = sluice.json_lines("degraded", "fail-open", 4);
    for line in &degraded {
        assert_eq!((line["decision"].as_str(), line["status"].as_u64()), (Some("allowed"), Some(200)));
        assert!(matches!(line["error"].as_str(), Some("unavailable" | "timeout")), "{line}");
        assert_eq!(line["route"], "hello");
    }

    let status: serde_json::Value = serde_json::from_str(&get(admin, "/status.json").body).unwrap();
    let store = &status["store"];
    assert_eq!((store["errors"].as_u64(), store["degraded"].as_u64()), (Some(4), Some(4)));
    assert_eq!((store["failing"].as_bool(), store["breaker"].as_str()), (Some(true), Some("open")));
    let row = &status["decisions"][0];
    assert_eq!((row["allowed"].as_u64(), row["allowed_degraded"].as_u64()), (Some(2), Some(4)));
}

#[test]
fn local_decisions_are_decisions_and_are_marked_local() {
    let mut redis = RedisServer::start();
    let dir = TempDir::new("local");
    let (sluice, gateway, admin) = serve(&dir, &redis, "local");
    assert_eq!(statuses(gateway, 1), [200]);
    redis.kill();
    // The fallback starts empty: two more admissions, then its own denial.
    assert_eq!(statuses(gateway, 3), [200, 200, 429]);

    let m = Scraped::from(admin);
    assert_eq!(store_errors(&m), 3.0);
    assert_eq!(decisions(&m, "allowed"), 3.0);
    assert_eq!(decisions(&m, "denied"), 1.0);
    assert_eq!(decisions(&m, "allowed_degraded"), 0.0, "local decides: nothing is admitted unchecked");
    assert_eq!(m.must("sluice_degraded_total", &[("store", "redis"), ("mode", "local")]), 3.0);
    assert_eq!(m.must("sluice_keys", &[("policy", "per-ip")]), 1.0, "the fallback's keys");

    let local = sluice.json_lines("degraded", "local", 3);
    let verdicts: Vec<&str> = local.iter().map(|l| l["decision"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["allowed", "allowed", "denied"]);
    assert_eq!(local[2]["status"], 429);
}
