//! The `ietf` rate-limit fields (draft-ietf-httpapi-ratelimit-headers-10) as the gateway sends
//! them: every enforced limit of the route listed in `RateLimit-Policy` and `RateLimit`, shadow
//! limits left out, a denial's `Retry-After` equal to the denying limit's `t`, the decision API
//! alike, and partition keys only when asked for. The fields are parsed with `sfv` as a client
//! would; the store reads a manual clock, so every value is exact.

mod common;
mod fields;

use std::sync::Arc;

use common::{Client, Resp, T0, config, start};
use fields::{members, names, quota_policies, service_limits};
use serde_json::json;
use sluice_config::Config;
use sluice_core::{ManualClock, NANOS_PER_SEC};
use sluice_gateway::stores::{memory_options, named_policies};
use sluice_http::keys::RequestFacts;
use sluice_http::pipeline::Limiter;
use sluice_store::{KeyHasher, MemoryStore};

/// A sliding window of 3 a minute and a token bucket of 5 (one token every 2 s) on one route,
/// all three header styles. The manual clock starts 20 s into a minute (T0 is 1_700_000_000 s).
const TWO_LIMITS: &str = r#"
[server]
headers = ["ietf", "draft-6", "x-ratelimit"]

[[policy]]
name = "per-ip"
algorithm = "sliding-window"
limit = 3
window = "1m"

[[policy]]
name = "burst"
algorithm = "token-bucket"
capacity = 5
refill_per_second = 0.5

[[route]]
path = "/api"
limits = [{ policy = "per-ip", key = "ip" }, { policy = "burst", key = "ip" }]
"#;

fn limits(list: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
    list.iter().map(|(n, a, b)| (n.to_string(), *a, *b)).collect()
}

fn draft6(res: &Resp) -> (u64, u64, u64) {
    (res.num("ratelimit-limit"), res.num("ratelimit-remaining"), res.num("ratelimit-reset"))
}

#[tokio::test]
async fn both_limits_are_listed_on_every_response_and_retry_after_is_the_denying_limits_t() {
    let (gw, clock) = start(TWO_LIMITS).await;
    let c = Client::new(gw.addr);
    let policies = limits(&[("per-ip", 3, 60), ("burst", 5, 10)]);

    // The window resets 100 s from now (its end, 40 s away, plus a window in which its count
    // still weighs); the bucket is whole again 2 s per token spent.
    for (i, expected) in [
        [("per-ip", 2, 100), ("burst", 4, 2)],
        [("per-ip", 1, 100), ("burst", 3, 4)],
        [("per-ip", 0, 100), ("burst", 2, 6)],
    ]
    .iter()
    .enumerate()
    {
        let res = c.get("/api", &[]).await;
        assert_eq!(res.status, 200, "request {i}");
        assert_eq!(quota_policies(&res.headers), policies, "request {i}");
        assert_eq!(service_limits(&res.headers), limits(expected), "request {i}");
        // draft-6 describes the limit closest to denying alone.
        assert_eq!(draft6(&res), (3, expected[0].1, 100), "request {i}");
        assert_eq!(res.header_all("ratelimit-policy").len(), 1, "one RateLimit-Policy: the ietf form");
    }

    // The window denies: its quota is back 40 s (and 1 ns) from now, which is both its `t` and
    // Retry-After. The bucket, which would have admitted, is shown as the store peeked it.
    let denied = c.get("/api", &[]).await;
    assert_eq!(denied.status, 429);
    assert_eq!(quota_policies(&denied.headers), policies);
    assert_eq!(service_limits(&denied.headers), limits(&[("per-ip", 0, 41), ("burst", 1, 8)]));
    assert_eq!(denied.num("retry-after"), 41);
    assert_eq!(denied.json()["retry_after_seconds"], 41);
    assert_eq!(draft6(&denied), (3, 0, 100));
    assert_eq!((denied.num("x-ratelimit-limit"), denied.num("x-ratelimit-remaining")), (3, 0));

    // A second into the next window the old count still weighs 2.95: one request passes, and
    // the next is denied until the weight falls to 1 (20 s on), the bucket long since whole.
    clock.advance(41 * NANOS_PER_SEC);
    let res = c.get("/api", &[]).await;
    assert_eq!(res.status, 200);
    assert_eq!(service_limits(&res.headers), limits(&[("per-ip", 0, 119), ("burst", 4, 2)]));
    let denied = c.get("/api", &[]).await;
    assert_eq!(denied.status, 429);
    assert_eq!(service_limits(&denied.headers), limits(&[("per-ip", 0, 20), ("burst", 3, 4)]));
    assert_eq!(denied.num("retry-after"), 20);
    assert_eq!(T0 % (60 * NANOS_PER_SEC), 20 * NANOS_PER_SEC, "the clock starts 20 s into a minute");
}

/// README's password-reset route: the account first, then the address. The account's limit
/// reads the body, so it is decided after the address's.
const PASSWORD_RESET: &str = r#"
[server]
headers = ["ietf", "draft-6"]

[[policy]]
name = "per-account"
algorithm = "sliding-log"
limit = 3
window = "15m"

[[policy]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 10
refill_per_second = 0.05

[[route]]
path = "/api/password-reset"
methods = ["POST"]
limits = [
  { policy = "per-account", key = "json:/email" },
  { policy = "per-ip", key = "ip" },
]
"#;

#[tokio::test]
async fn the_fields_list_the_limits_in_the_routes_order_when_one_waits_for_the_body() {
    let (gw, _clock) = start(PASSWORD_RESET).await;
    let c = Client::new(gw.addr);
    let reset = || {
        let body = r#"{"email":"victim@example.com"}"#;
        c.post("/api/password-reset", &[("content-type", "application/json")], body)
    };
    let policies = limits(&[("per-account", 3, 900), ("per-ip", 10, 200)]);
    // The sliding log frees its oldest request 15 min on; each token spent takes 20 s to refill.
    for (i, expected) in
        [[("per-account", 2, 900), ("per-ip", 9, 20)], [("per-account", 1, 900), ("per-ip", 8, 40)]].iter().enumerate()
    {
        let res = reset().await;
        assert_eq!(res.status, 200, "request {i}");
        assert_eq!(quota_policies(&res.headers), policies, "request {i}");
        assert_eq!(service_limits(&res.headers), limits(expected), "request {i}");
    }
    let last = reset().await;
    assert_eq!(service_limits(&last.headers), limits(&[("per-account", 0, 900), ("per-ip", 7, 60)]));
    // draft-6 describes the limit closest to denying: the account's.
    assert_eq!((last.num("ratelimit-limit"), last.num("ratelimit-remaining")), (3, 0));

    // The account's limit denies: still listed first, its `t` the Retry-After; the address's
    // bucket was charged (its phase admitted before the body was read).
    let denied = reset().await;
    assert_eq!(denied.status, 429);
    assert_eq!(quota_policies(&denied.headers), policies);
    assert_eq!(service_limits(&denied.headers), limits(&[("per-account", 0, 900), ("per-ip", 6, 80)]));
    assert_eq!(denied.num("retry-after"), 900);
    assert_eq!(denied.num("ratelimit-limit"), 3, "draft-6 describes the limit that denied");
}

/// A shadow policy that would deny from the third request on: first on a route with the bucket,
/// alone on another.
const SHADOW: &str = r#"
[[policy]]
name = "trial"
shadow = true
algorithm = "sliding-window"
window = "1h"
limit = 2

[[route]]
path = "/shadowed"
limits = [{ policy = "trial", key = "ip" }, { policy = "burst", key = "ip" }]

[[route]]
path = "/trial-only"
limits = [{ policy = "trial", key = "ip" }]
"#;

#[tokio::test]
async fn shadow_limits_are_left_out_and_draft6_still_describes_the_enforced_one() {
    let (gw, _clock) = start(&format!("{TWO_LIMITS}{SHADOW}")).await;
    let c = Client::new(gw.addr);
    for (remaining, status) in [(4, 200), (3, 200), (2, 200), (1, 200), (0, 200), (0, 429)] {
        let res = c.get("/shadowed", &[]).await;
        assert_eq!(res.status, status);
        assert_eq!(quota_policies(&res.headers), limits(&[("burst", 5, 10)]));
        assert_eq!(names(&res.headers, "ratelimit"), ["burst"]);
        assert_eq!(members(&res.headers, "ratelimit")[0].int("r"), remaining);
        assert_eq!((res.num("ratelimit-limit"), res.num("ratelimit-remaining")), (5, remaining));
    }
    // A route limited by shadow policies only has no limit to describe.
    let res = c.get("/trial-only", &[]).await;
    assert_eq!(res.status, 200);
    for absent in ["ratelimit-policy", "ratelimit", "ratelimit-limit", "x-ratelimit-limit"] {
        assert!(res.header(absent).is_none(), "{absent}: {:?}", res.headers);
    }
}

#[tokio::test]
async fn the_decision_api_lists_every_check_it_decided() {
    let (gw, _clock) = start(TWO_LIMITS).await;
    let c = Client::new(gw.addr);
    let body = json!({"checks": [{"policy": "per-ip", "key": "alice"}, {"policy": "burst", "key": "alice"}]});
    let check = || c.post("/v1/check", &[("content-type", "application/json")], body.to_string());
    for (i, remaining) in [2u64, 1, 0].into_iter().enumerate() {
        let res = check().await;
        assert_eq!(res.status, 200);
        assert_eq!(quota_policies(&res.headers), limits(&[("per-ip", 3, 60), ("burst", 5, 10)]));
        let bucket = 4 - i as u64;
        assert_eq!(
            service_limits(&res.headers),
            limits(&[("per-ip", remaining, 100), ("burst", bucket, 2 * (i as u64 + 1))])
        );
        // The same numbers as the body's checks.
        let checks = res.json()["checks"].clone();
        assert_eq!((checks[0]["remaining"].as_u64(), checks[1]["remaining"].as_u64()), (Some(remaining), Some(bucket)));
    }
    // `per-ip` denies: Retry-After is its `t`.
    let denied = check().await;
    assert_eq!(denied.status, 429);
    assert_eq!(service_limits(&denied.headers), limits(&[("per-ip", 0, 41), ("burst", 1, 8)]));
    assert_eq!(denied.num("retry-after"), 41);
}

#[tokio::test]
async fn partition_keys_are_the_key_hashes_and_only_when_asked_for() {
    let cfg = config(TWO_LIMITS);
    let clock = Arc::new(ManualClock::new(T0));
    let limiter = |pk: bool| {
        let store = MemoryStore::new(named_policies(&cfg), memory_options(&cfg.store), clock.clone());
        Limiter::of_config(&cfg, Arc::new(store), KeyHasher::from_secret(b"a test secret")).with_partition_keys(pk)
    };
    let with = limiter(true);
    let (a, a_keys) = headers_for(&with, &cfg, "198.51.100.1").await;
    let (b, _) = headers_for(&with, &cfg, "198.51.100.2").await;
    for field in ["ratelimit-policy", "ratelimit"] {
        let pks: Vec<_> = members(&a, field).into_iter().map(|m| m.pk.expect("a pk")).collect();
        assert_eq!(pks, a_keys, "{field}: each limit's own 16-byte key hash");
        assert!(pks.iter().all(|k| k.len() == 16));
        assert_ne!(pks[0], pks[1], "{field}: the two policies' keys differ");
        let other: Vec<_> = members(&b, field).into_iter().map(|m| m.pk.unwrap()).collect();
        assert!(other.iter().all(|k| !pks.contains(k)), "{field}: another client, other partitions");
    }
    assert_eq!(service_limits(&a), limits(&[("per-ip", 2, 100), ("burst", 4, 2)]));

    // Off (the default): no pk anywhere.
    let (none, _) = headers_for(&limiter(false), &cfg, "198.51.100.1").await;
    assert!(members(&none, "ratelimit").iter().chain(&members(&none, "ratelimit-policy")).all(|m| m.pk.is_none()));
    assert_eq!(names(&none, "ratelimit"), ["per-ip", "burst"]);
}

/// The rate-limit headers `limiter` writes for a request to the first route from `ip`, and the
/// key hash of each of its checks.
async fn headers_for(limiter: &Limiter, cfg: &Config, ip: &str) -> (http::HeaderMap, Vec<Vec<u8>>) {
    let headers = http::HeaderMap::new();
    let client = limiter.client(ip.parse().unwrap(), &headers);
    let facts = RequestFacts {
        method: "GET",
        path: "/api",
        route: "/api",
        client: &client,
        headers: &headers,
        tls: None,
        body: None,
    };
    let ruling = limiter.decide(limiter.checks(&cfg.routes[0].limits, &facts).expect("keys")).await;
    let mut out = http::HeaderMap::new();
    ruling.write_headers(&mut out);
    (out, ruling.checks.iter().map(|c| c.key.0.to_vec()).collect())
}
