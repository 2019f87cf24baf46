//! The admin listener's status page and `status.json`, for the gateway and the seed service;
//! a failure mode's answers counted and shown; the listener's answers to anything else. Real
//! listeners on port 0, a real HTTP client, stores on a manual clock.

mod common;
mod ops_support;

use std::net::SocketAddr;
use std::sync::Arc;

use common::{Client, T0};
use ops_support::{Logs, Mode, OPENMETRICS, STATUS_CONFIG, Samples, Shared, admin, gateway_on, memory_store, serve_on};
use proptest::prelude::*;
use sluice_core::{Clock, ManualClock, Policy, TokenBucket};
use sluice_gateway::admin::CONTENT_SECURITY_POLICY;
use sluice_gateway::observe::{Observer, ThreadRandom};
use sluice_gateway::seed::{SEED_ROUTE, SeedService};
use sluice_store::{MemoryStore, NamedPolicy};

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

fn observer(clock: &Arc<ManualClock>) -> Arc<Observer> {
    Arc::new(Observer::with_sources(clock.clone(), Arc::new(ThreadRandom)))
}

async fn statuses(client: &Client, path: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(client.get(path, &[]).await.status);
    }
    out
}

/// The row of `status.json`'s `decisions` for `route` and `policy`.
fn row<'a>(status: &'a serde_json::Value, route: &str, policy: &str) -> &'a serde_json::Value {
    status["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["route"] == route && d["policy"] == policy)
        .unwrap_or_else(|| panic!("no row {route}/{policy} in {status}"))
}

#[tokio::test(flavor = "current_thread")]
async fn status_json_shows_the_counts_the_denied_keys_the_store_and_the_configuration() {
    let (logs, _guard) = Logs::capture();
    let clock = clock();
    let (_gw, addr, admin) =
        gateway_on(STATUS_CONFIG, Arc::new(memory_store(STATUS_CONFIG, &clock)), observer(&clock)).await;
    let (client, admin) = (Client::new(addr), Client::new(admin));

    assert_eq!(statuses(&client, "/api/hello", 5).await, [200, 200, 200, 429, 429]);
    assert_eq!(statuses(&client, "/api/search", 3).await, [200, 200, 200], "a shadow policy never denies");

    let r = admin.get("/status.json", &[]).await;
    assert_eq!((r.status, r.header("cache-control")), (200, Some("no-store")));
    let s = r.json();
    assert_eq!(
        (s["service"].as_str(), s["in_flight"].as_u64(), s["max_in_flight"].as_u64()),
        (Some("gateway"), Some(0), Some(500))
    );
    let store = &s["store"];
    assert_eq!(
        (store["kind"].as_str(), store["ready"].as_bool(), store["failing"].as_bool()),
        (Some("memory"), Some(true), Some(false))
    );
    assert!(store.get("breaker").is_none(), "the memory store has no breaker");
    assert_eq!((store["errors"].as_u64(), store["degraded"].as_u64()), (Some(0), Some(0)));

    let hello = row(&s, "hello", "per-ip");
    assert_eq!(
        (hello["allowed"].as_u64(), hello["denied"].as_u64(), hello["shadow_denied"].as_u64()),
        (Some(3), Some(2), Some(0))
    );
    assert_eq!(hello["algorithm"], "fixed-window");
    let search = row(&s, "search", "watch");
    assert_eq!(
        (search["allowed"].as_u64(), search["shadow_denied"].as_u64(), search["denied"].as_u64()),
        (Some(1), Some(2), Some(0))
    );
    assert_eq!(row(&s, "search", "per-account")["allowed"], 3);
    assert_eq!(s["decisions"].as_array().unwrap().len(), 3, "the decision API decided nothing: no row for it");

    // The one denied key: the hash decision lines show, the policy that denied, two denials.
    let top = s["top_denied"].as_array().unwrap();
    assert_eq!(top.len(), 1, "{s}");
    let denial = logs.decisions().into_iter().find(|l| l["decision"] == "denied").expect("a denial line");
    assert_eq!(top[0]["key_hash"], denial["key_hash"]);
    assert_eq!(
        (top[0]["policy"].as_str(), top[0]["denials"].as_u64(), top[0]["overcount"].as_u64()),
        (Some("per-ip"), Some(2), Some(0))
    );

    // The configuration: routes and policies, and no secret.
    assert_eq!(s["routes"][0]["name"], "hello");
    assert_eq!(s["routes"][1]["methods"][0], "GET");
    assert_eq!(s["routes"][0]["limits"][0]["key"], "ip");
    assert_eq!(s["policies"][2]["shadow"], true);
    assert_eq!(s["policies"][2]["capacity"], 1);
    assert!(!r.text().contains("never shows this secret") && !r.text().contains("127.0.0.1"), "{}", r.text());

    // A minute later the denied key is forgotten; the totals stay.
    clock.advance(61 * sluice_core::NANOS_PER_SEC);
    let later = admin.get("/status.json", &[]).await.json();
    assert!(later["top_denied"].as_array().unwrap().is_empty());
    assert_eq!(row(&later, "hello", "per-ip")["denied"], 2);
}

#[tokio::test(flavor = "current_thread")]
async fn the_page_its_script_and_style_are_served_under_a_strict_policy() {
    let (_logs, _guard) = Logs::capture();
    let clock = clock();
    let (_gw, _addr, admin) =
        gateway_on(STATUS_CONFIG, Arc::new(memory_store(STATUS_CONFIG, &clock)), observer(&clock)).await;
    let admin = Client::new(admin);
    for (path, content_type, needle) in [
        ("/", "text/html; charset=utf-8", "<script src=\"status.js\" defer></script>"),
        ("/status.js", "text/javascript; charset=utf-8", "fetch('status.json'"),
        ("/status.css", "text/css; charset=utf-8", "font-variant-numeric"),
    ] {
        let r = admin.get(path, &[]).await;
        assert_eq!((r.status, r.header("content-type")), (200, Some(content_type)), "{path}");
        assert!(r.text().contains(needle), "{path}");
        assert_eq!(r.header("content-security-policy"), Some(CONTENT_SECURITY_POLICY), "{path}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
    }
    for directive in ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"] {
        assert!(CONTENT_SECURITY_POLICY.contains(directive), "{directive}");
    }
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"), "no unsafe-inline, no unsafe-eval");
    let head = admin.send(admin.request("HEAD", "/", &[], bytes::Bytes::new())).await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    // The JSON answers carry the policy too.
    assert_eq!(admin.get("/status.json", &[]).await.header("content-security-policy"), Some(CONTENT_SECURITY_POLICY));
}

const SHARED: &str = r#"
[server]
key_secret = "shared by the instances of this test"

[store]
kind = "redis"
url = "redis://127.0.0.1:1"
on_error = "local"

[[policy]]
name = "per-ip"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
name = "hello"
path = "/api/hello"
limits = [{ policy = "per-ip", key = "ip" }]

[decision_log]
sample = 0.0
"#;

#[tokio::test(flavor = "current_thread")]
async fn a_failure_modes_answers_are_counted_logged_and_shown_until_the_store_decides_again() {
    let (logs, _guard) = Logs::capture();
    let clock = clock();
    let store = Arc::new(Shared::new(memory_store(SHARED, &clock), memory_store(SHARED, &clock)));
    let (_gw, addr, admin) = gateway_on(SHARED, store.clone(), observer(&clock)).await;
    let (client, admin) = (Client::new(addr), Client::new(admin));

    assert_eq!(statuses(&client, "/api/hello", 1).await, [200]);
    // The shared store fails; the local fallback decides, from its own (empty) state.
    store.set(Mode::Local);
    assert_eq!(statuses(&client, "/api/hello", 3).await, [200, 200, 429]);
    let s = admin.get("/status.json", &[]).await.json();
    assert_eq!((s["store"]["failing"].as_bool(), s["store"]["breaker"].as_str()), (Some(true), Some("open")));
    assert_eq!((s["store"]["errors"].as_u64(), s["store"]["degraded"].as_u64()), (Some(3), Some(3)));
    // fail-open: admitted unchecked.
    store.set(Mode::FailOpen);
    assert_eq!(statuses(&client, "/api/hello", 2).await, [200, 200]);
    store.set(Mode::Up);
    assert_eq!(statuses(&client, "/api/hello", 2).await, [200, 429]);

    let m = Samples::parse(&admin.get("/metrics", OPENMETRICS).await.text());
    // Local decisions are decisions (allowed, denied); fail-open's are not.
    assert_eq!(m.decisions("hello", "per-ip", "fixed-window", "allowed"), 4.0);
    assert_eq!(m.decisions("hello", "per-ip", "fixed-window", "denied"), 2.0);
    assert_eq!(m.decisions("hello", "per-ip", "fixed-window", "allowed_degraded"), 2.0);
    assert_eq!(m.requests("hello", "allowed_degraded"), 2.0);
    assert_eq!(m.value("sluice_store_errors_total", &[("store", "redis"), ("kind", "timeout")]), 5.0);
    assert_eq!(m.value("sluice_store_errors_total", &[("store", "redis"), ("kind", "unavailable")]), 0.0);
    assert_eq!(m.value("sluice_degraded_total", &[("store", "redis"), ("mode", "local")]), 3.0);
    assert_eq!(m.value("sluice_degraded_total", &[("store", "redis"), ("mode", "fail-open")]), 2.0);
    assert_eq!(m.value("sluice_keys", &[("policy", "per-ip")]), 1.0, "the fallback's keys");
    let s = admin.get("/status.json", &[]).await.json();
    assert_eq!(s["store"]["failing"], false);

    // Decision lines: the local denial and every failure-mode admission, marked; one event
    // when the failures start, one when they end.
    let lines = logs.decisions();
    let marked: Vec<(&str, &str)> =
        lines.iter().filter_map(|l| Some((l["degraded"].as_str()?, l["decision"].as_str()?))).collect();
    assert_eq!(
        marked,
        [
            ("local", "allowed"),
            ("local", "allowed"),
            ("local", "denied"),
            ("fail-open", "allowed"),
            ("fail-open", "allowed")
        ]
    );
    assert!(lines.iter().filter(|l| l.get("degraded").is_some()).all(|l| l["error"] == "timeout"));
    let events: Vec<String> = logs
        .text()
        .lines()
        .filter(|l| l.contains("\"target\":\"sluice::event\""))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(events, ["store_failure", "store_recovered"]);
}

/// The seed service on a manual clock (capacity 2, no refill to speak of), its admin listener.
async fn seed(clock: &Arc<ManualClock>) -> (Arc<SeedService>, SocketAddr, SocketAddr) {
    let policy = NamedPolicy { name: "per-ip".into(), policy: Policy::from(TokenBucket::new(2, 0.001).unwrap()) };
    let store = MemoryStore::new(vec![policy], Default::default(), clock.clone() as Arc<dyn Clock>);
    let log = sluice_config::DecisionLog { sample: 0.0, denials_per_second: 100.0 };
    let service = Arc::new(SeedService::with_observer(Arc::new(store), 2, observer(clock), &log));
    let addr = serve_on(service.clone()).await;
    let admin = admin(service.clone()).await;
    (service, addr, admin)
}

#[tokio::test(flavor = "current_thread")]
async fn the_seed_service_is_counted_logged_and_inspected_like_the_gateway() {
    let (logs, _guard) = Logs::capture();
    let clock = clock();
    let (_seed, addr, admin) = seed(&clock).await;
    let (client, admin) = (Client::new(addr), Client::new(admin));

    let before = Samples::parse(&admin.get("/metrics", OPENMETRICS).await.text());
    assert_eq!(before.decisions(SEED_ROUTE, "per-ip", "token-bucket", "allowed"), 0.0, "the route exists at zero");
    assert_eq!(statuses(&client, "/api/hello", 4).await, [200, 200, 429, 429]);
    assert_eq!(statuses(&client, "/health", 1).await, [200]);

    let m = Samples::parse(&admin.get("/metrics", OPENMETRICS).await.text());
    assert_eq!(m.decisions(SEED_ROUTE, "per-ip", "token-bucket", "allowed"), 2.0);
    assert_eq!(m.decisions(SEED_ROUTE, "per-ip", "token-bucket", "denied"), 2.0);
    assert_eq!(m.requests(SEED_ROUTE, "denied"), 2.0);
    assert_eq!(m.requests("unmatched", "unlimited"), 1.0);
    assert_eq!(m.value("sluice_store_latency_seconds_count", &[("store", "memory")]), 4.0);
    assert_eq!(m.value("sluice_keys", &[("policy", "per-ip")]), 1.0);
    assert_eq!(m.value("sluice_in_flight", &[]), 0.0);
    assert!(m.get("sluice_max_in_flight", &[]).is_none(), "the seed service sheds nothing");

    let lines = logs.decisions();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[0]["route"].as_str(), lines[0]["status"].as_u64(), lines[0]["limit"].as_u64()),
        (Some(SEED_ROUTE), Some(429), Some(2))
    );

    let s = admin.get("/status.json", &[]).await.json();
    assert_eq!(s["service"], "seed");
    assert_eq!(row(&s, SEED_ROUTE, "per-ip")["denied"], 2);
    assert_eq!(s["top_denied"][0]["key_hash"], lines[0]["key_hash"]);
    assert_eq!(s["routes"][0]["path"], SEED_ROUTE);
    assert_eq!(s["policies"][0]["capacity"], 2);
    let config = admin.get("/config", &[]).await.json();
    assert_eq!((config["service"].as_str(), config["store"]["kind"].as_str()), (Some("seed"), Some("memory")));
    assert_eq!(admin.get("/readyz", &[]).await.json()["store"], "memory");
}

/// Known admin paths; anything else is a 404.
const KNOWN: [&str; 8] =
    ["/", "/status.js", "/status.css", "/status.json", "/metrics", "/healthz", "/readyz", "/config"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever a client sends to the admin listener: known paths answer GET and HEAD, other
    /// paths 404, other methods 405 with `Allow`; no answer repeats what was sent (nothing to
    /// reflect into a page), and every answer carries the security headers.
    #[test]
    fn the_admin_listener_answers_anything_without_reflecting_it(
        path in "/[a-zA-Z0-9%./_~-]{0,30}(%3Cscript%3E)?",
        method in prop_oneof![Just("GET"), Just("HEAD"), Just("POST"), Just("DELETE"), Just("PUT"), Just("OPTIONS")],
    ) {
        // Every test of this file writes through its own subscriber: a callsite first reached on
        // a thread without one could be cached as uninteresting for the others.
        let (_logs, _guard) = Logs::capture();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let clock = clock();
            let (_seed, _addr, admin) = seed(&clock).await;
            let admin = Client::new(admin);
            let uri: http::Uri = format!("http://127.0.0.1{path}").parse().expect("the strategy makes valid paths");
            let uri_path = uri.path().to_owned();
            let r = admin.send(admin.request(method, &uri_path, &[], bytes::Bytes::new())).await;
            let expected = match (method, KNOWN.contains(&uri_path.as_str())) {
                ("GET" | "HEAD", true) => 200,
                ("GET" | "HEAD", false) => 404,
                _ => 405,
            };
            prop_assert_eq!(r.status, expected, "{} {}", method, uri_path);
            if expected == 405 {
                prop_assert_eq!(r.header("allow"), Some("GET, HEAD"));
            }
            if expected != 200 && uri_path.len() > 4 {
                prop_assert!(!r.text().contains(uri_path.as_str()), "reflected: {}", r.text());
            }
            prop_assert_eq!(r.header("content-security-policy"), Some(CONTENT_SECURITY_POLICY));
            prop_assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
            Ok(())
        })?;
    }
}
