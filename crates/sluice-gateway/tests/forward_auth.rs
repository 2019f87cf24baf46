//! Forward-auth against a real gateway on 127.0.0.1 (its store on a manual clock), asked through
//! a real HTTP client as a proxy would ask: who may ask, how the original request is read, and
//! that it is decided exactly as the gateway decides it.

mod common;

use std::sync::Arc;

use common::*;
use http::HeaderMap;
use http_body_util::BodyExt;
use sluice_config::Config;
use sluice_core::{NANOS_PER_SEC, Nanos};
use sluice_gateway::error::GatewayError;
use sluice_gateway::forward_auth;
use sluice_gateway::gateway::Gateway;
use sluice_gateway::observe::Scrape;
use sluice_gateway::stores::StoreBuilder;
use sluice_store::{Check, NamedPolicy, Store, StoreError, StoreFuture};

/// Trusts the test client's address (it plays the proxy); three requests a minute per client
/// on `items` (GET) and `search`, a body-keyed limit on `reset`.
const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1"]
headers = ["draft-6", "ietf"]

[forward_auth]
path = "/v1/authz"

[[policy]]
name = "per-client"
algorithm = "fixed-window"
limit = 3
window = "1m"

[[policy]]
name = "per-account"
algorithm = "fixed-window"
limit = 2
window = "1m"

[[route]]
name = "items"
path = "/api/items"
methods = ["GET"]
limits = [{ policy = "per-client", key = "header:x-api-key|ip" }]

[[route]]
name = "search"
path = "/api/search"
limits = [{ policy = "per-client", key = ["ip", "path"] }]

[[route]]
name = "reset"
path = "/api/password-reset"
methods = ["POST"]
limits = [{ policy = "per-client", key = "ip" }, { policy = "per-account", key = "json:/email" }]
"#;

/// Asks forward-auth about `method uri` with the proxy's `extra` headers, the subrequest itself
/// sent with `ask_method` (nginx's carries the original's method; Caddy and Traefik send GET).
async fn ask_with(c: &Client, ask_method: &str, method: &str, uri: &str, extra: &[(&str, &str)]) -> Resp {
    let mut headers = vec![("x-forwarded-method", method), ("x-forwarded-uri", uri)];
    headers.extend_from_slice(extra);
    c.send(c.request(ask_method, "/v1/authz", &headers, bytes::Bytes::new())).await
}

async fn ask(c: &Client, method: &str, uri: &str, extra: &[(&str, &str)]) -> Resp {
    ask_with(c, "GET", method, uri, extra).await
}

/// The same, with the headers exactly as given (no original named unless they name it).
async fn ask_raw(c: &Client, headers: &[(&str, &str)]) -> Resp {
    c.get("/v1/authz", headers).await
}

fn remaining(r: &Resp) -> u64 {
    r.num("ratelimit-remaining")
}

/// Asks about `GET uri` for each of `uris`, each admitted; what each left.
async fn admitted(c: &Client, uris: &[&str]) -> Vec<u64> {
    let mut left = Vec::new();
    for uri in uris {
        let r = ask(c, "GET", uri, &[]).await;
        assert_eq!(r.status, 200, "{uri}: {}", r.text());
        left.push(remaining(&r));
    }
    left
}

#[tokio::test]
async fn an_untrusted_peer_is_refused_and_spends_no_ones_quota() {
    let toml = CONFIG.replace(r#"trusted_proxies = ["127.0.0.1"]"#, r#"trusted_proxies = ["10.0.0.0/8"]"#);
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    // 127.0.0.1 is not a proxy here: naming a victim in X-Forwarded-For must not spend its quota.
    for _ in 0..5 {
        let r = ask(&c, "GET", "/api/items", &[("x-forwarded-for", "198.51.100.7")]).await;
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(r.json()["error"], "forbidden");
        assert!(r.header("ratelimit-remaining").is_none() && r.header("retry-after").is_none());
    }
    // Through a trusted proxy, the victim still has all three.
    let loaded = gw.gateway.config();
    let mut h = HeaderMap::new();
    h.insert("x-forwarded-method", "GET".parse().unwrap());
    h.insert("x-forwarded-uri", "/api/items".parse().unwrap());
    h.insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
    let res =
        forward_auth::handle(&loaded.limiter, &loaded.observed, &loaded.config, "10.1.2.3".parse().unwrap(), &h).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["ratelimit-remaining"], "2");
}

#[tokio::test]
async fn both_spellings_name_the_original_and_share_its_limit() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let forwarded = ask_raw(&c, &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "/api/items")]).await;
    let original = ask_raw(&c, &[("x-original-method", "GET"), ("x-original-uri", "/api/items")]).await;
    let both = ask_raw(
        &c,
        &[
            ("x-forwarded-method", "GET"),
            ("x-original-method", "GET"),
            ("x-forwarded-uri", "/api/items"),
            ("x-original-uri", "/api/items"),
        ],
    )
    .await;
    assert_eq!([forwarded.status, original.status, both.status], [200; 3]);
    assert_eq!([remaining(&forwarded), remaining(&original), remaining(&both)], [2, 1, 0]);
    let fourth = ask_raw(&c, &[("x-original-method", "GET"), ("x-original-uri", "/api/items")]).await;
    assert_eq!(fourth.status, 429);
}

#[tokio::test]
async fn the_original_method_chooses_the_route_whatever_the_subrequest_uses() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    // `items` limits GET only: a POST original is unlimited, and says so.
    let post = ask(&c, "POST", "/api/items", &[]).await;
    assert_eq!(post.status, 200);
    assert_eq!(post.json()["status"], "unlimited");
    assert!(post.header("ratelimit-remaining").is_none());
    // HEAD is limited by a GET route, and a method's case does not matter; the subrequest's own
    // method (nginx sends the original's) plays no part.
    let head = ask_with(&c, "HEAD", "HEAD", "/api/items", &[]).await;
    assert_eq!((head.status, remaining(&head)), (200, 2));
    assert!(head.body.is_empty(), "an answer to HEAD has no body");
    let lower = ask_with(&c, "POST", "get", "/api/items", &[]).await;
    assert_eq!((lower.status, remaining(&lower)), (200, 1));
    let delete = ask_with(&c, "DELETE", "GET", "/api/items", &[]).await;
    assert_eq!((delete.status, remaining(&delete)), (200, 0));
    assert_eq!(ask_with(&c, "PUT", "GET", "/api/items", &[]).await.status, 429);
    assert_eq!(ask(&c, "POST", "/api/items", &[]).await.status, 200, "POST stays unlimited");
}

#[tokio::test]
async fn the_query_string_never_chooses_the_route_or_the_key() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    // `search` keys on the path: every query string is the same key.
    assert_eq!(admitted(&c, &["/api/search?q=1", "/api/search?q=2&page=9", "/api/search#top"]).await, [2, 1, 0]);
    for uri in ["/api/search?", "/api/search?path=/api/other", "http://example.com/api/search?q=5"] {
        assert_eq!(ask(&c, "GET", uri, &[]).await.status, 429, "{uri} is the same original");
    }
    // A query string cannot reach another route either.
    let r = ask(&c, "GET", "/unlimited?/api/search", &[]).await;
    assert_eq!((r.status, r.json()["status"].as_str()), (200, Some("unlimited")));
}

#[tokio::test]
async fn original_paths_are_normalised_and_refused_as_the_gateway_does() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    for refused in [
        "/api%2Fitems",
        "/api%5citems",
        "/api\\items",
        "/api/items%00",
        "/api/%252e%252e/items",
        "/api/items%zz",
        "/api/items%",
        // Node's URL parser reads a leading `//` as a host: `/api/items` to the application.
        "//evil/api/items",
        "//api/items/",
        "/..//evil/api/items",
        "http://proxy.example//evil/api/items",
        "/api/items//..",
        // A trailing dot or whitespace, which Windows servers and `str.strip()` drop.
        "/api/items.",
        "/api/items%2e",
        "/api/items%20",
        "/api/items%c2%a0",
    ] {
        let r = ask(&c, "GET", refused, &[]).await;
        assert_eq!(r.status, 400, "{refused}: {}", r.text());
        assert_eq!(r.json()["error"], "bad_request", "{refused}");
    }
    // The gateway refuses the same path the same way (hyper's client sends it as written).
    assert_eq!(c.get("/api%2Fitems", &[]).await.status, 400);
    // Spellings of /api/items are /api/items; nothing above was charged.
    let spellings = ["/API/./Items;jsessionid=x", "/api//items/", "/api/x/../items?z=1"];
    assert_eq!(admitted(&c, &spellings).await, [2, 1, 0]);
    assert_eq!(ask(&c, "GET", "/api/%69tems", &[]).await.status, 429);
    // With a format suffix, it is the same route (Rails and Spring serve it the same action).
    assert_eq!(ask(&c, "GET", "/api/items.json", &[]).await.status, 429);
}

#[tokio::test]
async fn a_leading_double_slash_is_refused_in_both_spellings_of_the_original() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    for name in ["x-forwarded-uri", "x-original-uri"] {
        let r = ask_raw(&c, &[("x-forwarded-method", "GET"), (name, "//evil/api/items")]).await;
        assert_eq!(r.status, 400, "{name}: {}", r.text());
        assert!(r.text().contains("starts with `//`"), "{name}: {}", r.text());
    }
    // Nothing was charged: the client still has its three.
    assert_eq!(admitted(&c, &["/api/items", "/api/items.xml", "/api/items"]).await, [2, 1, 0]);
}

#[tokio::test]
async fn missing_repeated_or_conflicting_originals_are_refused_and_charge_nothing() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("no method", &[("x-forwarded-uri", "/api/items")]),
        ("no URI", &[("x-forwarded-method", "GET")]),
        ("nothing", &[]),
        (
            "the URI in two lines",
            &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "/api/other"), ("x-forwarded-uri", "/api/items")],
        ),
        (
            "the method in two lines",
            &[("x-original-method", "POST"), ("x-original-method", "GET"), ("x-original-uri", "/api/items")],
        ),
        (
            "the spellings disagree on the URI",
            &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "/api/other"), ("x-original-uri", "/api/items")],
        ),
        (
            "the spellings disagree on the method",
            &[("x-forwarded-method", "POST"), ("x-original-method", "GET"), ("x-forwarded-uri", "/api/items")],
        ),
        ("a method that is no token", &[("x-forwarded-method", "G T"), ("x-forwarded-uri", "/api/items")]),
        ("an empty method", &[("x-forwarded-method", ""), ("x-forwarded-uri", "/api/items")]),
        ("an asterisk", &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "*")]),
        ("a relative URI", &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "api/items")]),
        ("an empty URI", &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "")]),
        ("a space in the URI", &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "/api/it ems")]),
        ("another scheme", &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "ftp://h/api/items")]),
        (
            "a keyed header in two lines",
            &[
                ("x-forwarded-method", "GET"),
                ("x-forwarded-uri", "/api/items"),
                ("x-api-key", "mine"),
                ("x-api-key", "yours"),
            ],
        ),
    ];
    for (what, headers) in cases {
        let r = ask_raw(&c, headers).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text());
        assert_eq!(r.json()["error"], "bad_request", "{what}");
        assert!(r.header("ratelimit-remaining").is_none(), "{what}: nothing decided");
    }
    let first = ask(&c, "GET", "/api/items", &[]).await;
    assert_eq!((first.status, remaining(&first)), (200, 2), "no refusal was charged");
}

#[tokio::test]
async fn routes_keyed_on_the_body_are_not_decidable_and_the_gateway_still_decides_them() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    assert_eq!(forward_auth::undecidable(&gw.gateway.config().config), ["reset"]);
    for _ in 0..5 {
        let r = ask(&c, "POST", "/api/password-reset", &[]).await;
        assert_eq!(r.status, 500, "{}", r.text());
        assert_eq!(r.json()["error"], "not_decidable");
        assert!(r.header("ratelimit-remaining").is_none());
    }
    // Nothing was charged, to the body-less limit either: the gateway admits three of its own.
    for i in 0..3 {
        let body = format!(r#"{{"email":"user{i}@example.com"}}"#);
        let r = c.post("/api/password-reset", &[("content-type", "application/json")], body).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
    }
    // Other routes of the same configuration are decided (this client's address is spent: the
    // policy's key is the same on both routes, so another key is asked for).
    let other = ask(&c, "GET", "/api/items", &[("x-api-key", "k1")]).await;
    assert_eq!((other.status, remaining(&other)), (200, 2));
    // Without [forward_auth], there is nothing to warn about.
    let without = CONFIG.replace("[forward_auth]\npath = \"/v1/authz\"\n", "");
    assert!(forward_auth::undecidable(&config(&without)).is_empty());
}

#[tokio::test]
async fn an_admitted_original_gets_200_and_the_rate_limit_headers() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let r = ask(&c, "GET", "/api/items", &[("x-api-key", "k1")]).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({"status": "allowed", "route": "items"}));
    assert_eq!((r.num("ratelimit-limit"), remaining(&r)), (3, 2));
    assert!(r.header("ratelimit-reset").is_some() && r.header("ratelimit-policy").is_some());
    let ietf = r.header("ratelimit").expect("the draft-10 field");
    assert!(ietf.contains("r=2"), "{ietf}");
    assert!(r.header("retry-after").is_none());
    assert!(r.header("cache-control").is_none());
}

#[tokio::test]
async fn a_denied_original_gets_the_denial_and_is_admitted_again_in_the_next_window() {
    let (gw, clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    for _ in 0..3 {
        assert_eq!(ask(&c, "GET", "/api/items", &[]).await.status, 200);
    }
    let r = ask(&c, "GET", "/api/items", &[]).await;
    assert_eq!(r.status, 429);
    let retry = r.num("retry-after");
    // The window is aligned to minutes since the epoch: it resets in what is left of this one.
    let left_ns = 60 * NANOS_PER_SEC - T0 % (60 * NANOS_PER_SEC);
    assert_eq!(retry, left_ns.div_ceil(NANOS_PER_SEC));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(remaining(&r), 0);
    let body = r.json();
    assert_eq!(body["error"], "rate_limit_exceeded");
    assert_eq!(body["retry_after_seconds"], retry);
    assert!(!r.text().contains("127.0.0.1"), "no identity in the body: {}", r.text());
    clock.advance(retry * NANOS_PER_SEC);
    assert_eq!(ask(&c, "GET", "/api/items", &[]).await.status, 200);
}

#[tokio::test]
async fn forward_auth_can_deny_with_its_own_status_for_nginx() {
    let toml = CONFIG.replace(r#"path = "/v1/authz""#, "path = \"/v1/authz\"\ndeny_status = 403");
    let (gw, _clock) = start(&toml).await;
    let c = Client::new(gw.addr);
    for _ in 0..3 {
        assert_eq!(ask(&c, "GET", "/api/items", &[]).await.status, 200);
    }
    let r = ask(&c, "GET", "/api/items", &[]).await;
    assert_eq!(r.status, 403);
    assert!(r.num("retry-after") >= 1);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.json()["error"], "rate_limit_exceeded");
    // The gateway's own denial of the same client keeps the server's status.
    assert_eq!(c.get("/api/items", &[]).await.status, 429);
}

#[tokio::test]
async fn the_gateway_and_forward_auth_spend_one_limit() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let who = [("x-forwarded-for", "198.51.100.7")];
    assert_eq!(c.get("/api/items", &who).await.num("ratelimit-remaining"), 2);
    assert_eq!(remaining(&ask(&c, "GET", "/api/items", &who).await), 1);
    assert_eq!(c.get("/api/items", &who).await.num("ratelimit-remaining"), 0);
    assert_eq!(ask(&c, "HEAD", "/api/items", &who).await.status, 429);
    assert_eq!(c.get("/api/items", &who).await.status, 429);
}

#[tokio::test]
async fn clients_come_from_the_chain_and_keys_from_the_headers_the_proxy_sent() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    let spend = |xff: &'static str, key: Option<&'static str>| {
        let c = c.clone();
        async move {
            let mut extra = vec![("x-forwarded-for", xff)];
            extra.extend(key.map(|k| ("x-api-key", k)));
            ask(&c, "GET", "/api/items", &extra).await.status
        }
    };
    for _ in 0..3 {
        assert_eq!(spend("198.51.100.7", None).await, 200);
    }
    assert_eq!(spend("198.51.100.7", None).await, 429);
    // What a client writes left of the address its proxy appended is never read.
    assert_eq!(spend("203.0.113.1, 198.51.100.7", None).await, 429);
    // Another client address, and API keys (from the same address), are keys of their own.
    assert_eq!(spend("198.51.100.8", None).await, 200);
    assert_eq!(spend("198.51.100.7", Some("k1")).await, 200);
    assert_eq!(spend("198.51.100.7", Some("k2")).await, 200);
    for _ in 0..2 {
        assert_eq!(spend("198.51.100.9", Some("k1")).await, 200, "k1 is one key wherever it comes from");
    }
    assert_eq!(spend("198.51.100.9", Some("k1")).await, 429);
}

#[tokio::test]
async fn decisions_are_counted_under_the_route_and_unmatched_originals_as_unmatched() {
    let (gw, _clock) = start(CONFIG).await;
    let c = Client::new(gw.addr);
    for _ in 0..4 {
        ask(&c, "GET", "/api/items", &[]).await;
    }
    ask(&c, "GET", "/nowhere", &[]).await;
    ask(&c, "POST", "/api/items", &[]).await;
    let loaded = gw.gateway.config();
    let text = gw.gateway.observer().metrics().render(Scrape::of(&**loaded.store(), 0));
    let sample = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    assert_eq!(sample(r#"sluice_requests_total{route="items",outcome="allowed"}"#), 3.0);
    assert_eq!(sample(r#"sluice_requests_total{route="items",outcome="denied"}"#), 1.0);
    assert_eq!(sample(r#"sluice_requests_total{route="unmatched",outcome="unlimited"}"#), 2.0);
}

/// A store that cannot decide anything.
struct Down(Vec<NamedPolicy>);

impl Store for Down {
    fn decide<'a>(&'a self, _checks: &'a [Check], _at: Option<Nanos>) -> StoreFuture<'a> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("down for the test".into()))))
    }

    fn policies(&self) -> &[NamedPolicy] {
        &self.0
    }

    fn kind(&self) -> &'static str {
        "down"
    }
}

struct DownStores;

impl StoreBuilder for DownStores {
    fn build(&self, config: &Config, _previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, GatewayError> {
        Ok(Arc::new(Down(sluice_gateway::stores::named_policies(config))))
    }
}

#[tokio::test]
async fn a_store_that_cannot_decide_answers_503() {
    let gateway = Gateway::new(config(CONFIG), Box::new(DownStores)).unwrap();
    let loaded = gateway.config();
    let mut h = HeaderMap::new();
    h.insert("x-original-method", "GET".parse().unwrap());
    h.insert("x-original-uri", "/api/items".parse().unwrap());
    let res =
        forward_auth::handle(&loaded.limiter, &loaded.observed, &loaded.config, "127.0.0.1".parse().unwrap(), &h).await;
    assert_eq!(res.status(), 503);
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"], "limiter_unavailable");
}

#[tokio::test]
async fn a_reload_turns_forward_auth_on_and_off() {
    let without = CONFIG.replace("[forward_auth]\npath = \"/v1/authz\"\n", "");
    let (gw, _clock) = start(&without).await;
    let c = Client::new(gw.addr);
    let r = ask(&c, "GET", "/api/items", &[]).await;
    assert_eq!(r.status, 404, "no forward-auth: /v1/authz is an unrouted path");
    gw.gateway.reload(config(CONFIG)).unwrap();
    assert_eq!(remaining(&ask(&c, "GET", "/api/items", &[]).await), 2);
    let moved = CONFIG.replace(r#"path = "/v1/authz""#, r#"path = "/auth/ask""#);
    gw.gateway.reload(config(&moved)).unwrap();
    assert_eq!(ask(&c, "GET", "/api/items", &[]).await.status, 404);
    let r = c.get("/auth/ask", &[("x-forwarded-method", "GET"), ("x-forwarded-uri", "/api/items")]).await;
    assert_eq!((r.status, remaining(&r)), (200, 1), "the policy kept its state across reloads");
}
