//! The tower layer in an axum app: a per-IP and a per-API-key limit, denials answered by the
//! layer (the handler never runs), admitted responses with headers. Requests go through the
//! router as a tower service, the peer in `ConnectInfo` as axum's server puts it; the gateway's
//! tests run the layer on a real socket beside the gateway.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http_body_util::BodyExt;
use sluice_config::{HeaderStyle, KeySource, KeySpec};
use sluice_core::{ManualClock, NANOS_PER_SEC, TokenBucket};
use sluice_http::layer::{IntoKey, LayerError, RateLimitLayer, RateLimitLayerBuilder};
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
use tower::ServiceExt;

/// Where the manual clock starts: a plausible Unix time.
const T0: u64 = 1_700_000_000 * NANOS_PER_SEC;

/// A response, read whole.
struct Resp {
    status: u16,
    headers: http::HeaderMap,
    body: bytes::Bytes,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn num(&self, name: &str) -> u64 {
        self.header(name).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no numeric {name} header"))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// Sends a GET from 127.0.0.1 (a trusted proxy here) through `app`.
struct Client {
    app: Router,
}

impl Client {
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut req = http::Request::get(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut req = req.body(Body::empty()).unwrap();
        req.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
        let res = self.app.clone().oneshot(req).await.expect("the router answers");
        let (parts, body) = res.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Resp { status: parts.status.as_u16(), headers: parts.headers, body }
    }
}

fn store() -> Arc<MemoryStore> {
    let policies = vec![
        NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(3, 0.001).unwrap().into() },
        NamedPolicy { name: "per-key".into(), policy: TokenBucket::new(2, 0.001).unwrap().into() },
    ];
    Arc::new(MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(T0))))
}

/// A layer's builder for an axum app: the peer read from `ConnectInfo`, where axum's server
/// puts it (and where these tests' requests carry it).
fn axum_layer(store: Arc<dyn sluice_store::Store>) -> RateLimitLayerBuilder {
    RateLimitLayer::builder(store).peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
}

/// A handler answering `answer` that counts its calls, and the count.
fn counting(
    answer: &'static str,
) -> (impl Fn() -> std::future::Ready<&'static str> + Clone + Send + 'static, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let handler = move || {
        counted.fetch_add(1, Ordering::SeqCst);
        std::future::ready(answer)
    };
    (handler, hits)
}

fn ip() -> KeySpec {
    KeySpec { parts: vec![vec![KeySource::Ip]] }
}

fn api_key_or_ip() -> KeySpec {
    KeySpec { parts: vec![vec![KeySource::Header("x-api-key".into()), KeySource::Ip]] }
}

/// An axum app behind the layer, and how often the handler ran.
fn app() -> (Client, Arc<AtomicUsize>) {
    // Keys written as a route's limits write them in the configuration file.
    let layer = axum_layer(store())
        .limit("per-ip", "ip")
        .limit("per-key", "header:x-api-key|ip")
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .headers(vec![HeaderStyle::Draft6, HeaderStyle::Ietf])
        .peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
        .build()
        .expect("layer builds");
    let (handler, hits) = counting("hello");
    let app = Router::new().route("/hello", get(handler)).layer(layer);
    (Client { app }, hits)
}

#[tokio::test]
async fn the_per_key_and_per_ip_limits_deny_with_429_and_headers_and_pass_otherwise() {
    let (c, hits) = app();
    let from = |key: &'static str| [("x-forwarded-for", "198.51.100.1"), ("x-api-key", key)];

    let ok = c.get("/hello", &from("key-1")).await;
    assert_eq!((ok.status, ok.text().as_str()), (200, "hello"));
    // draft-6 describes the limit closest to denying: per-key (2), one left; ietf lists both.
    assert_eq!((ok.num("ratelimit-limit"), ok.num("ratelimit-remaining")), (2, 1));
    assert_eq!(ok.header("ratelimit"), Some("\"per-ip\";r=2;t=1000, \"per-key\";r=1;t=1000"));
    assert_eq!(c.get("/hello", &from("key-1")).await.status, 200);

    // key-1 is spent: the layer answers, the handler does not run.
    let denied = c.get("/hello", &from("key-1")).await;
    assert_eq!(denied.status, 429);
    assert_eq!(denied.header("cache-control"), Some("no-store"));
    assert_eq!(denied.num("retry-after"), 1000);
    assert_eq!((denied.num("ratelimit-limit"), denied.num("ratelimit-remaining")), (2, 0));
    assert_eq!(denied.json()["error"], "rate_limit_exceeded");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // Another key from the same address passes per-key, and takes the address's last token.
    let ok = c.get("/hello", &from("key-2")).await;
    assert_eq!((ok.status, ok.num("ratelimit-limit"), ok.num("ratelimit-remaining")), (200, 3, 0));
    // The address is spent: a fresh key cannot get past the per-IP limit.
    let denied = c.get("/hello", &from("key-3")).await;
    assert_eq!((denied.status, denied.num("ratelimit-limit")), (429, 3));
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // Other clients are untouched; without a key, the address stands in for it.
    let other = [("x-forwarded-for", "198.51.100.2")];
    let statuses = [
        c.get("/hello", &other).await.status,
        c.get("/hello", &other).await.status,
        c.get("/hello", &other).await.status,
    ];
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(hits.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn limits_that_cannot_be_built_are_refused() {
    let unknown = axum_layer(store()).limit("nope", ip()).build().err();
    assert_eq!(unknown, Some(LayerError::UnknownPolicy("nope".into())));
    let body = KeySpec { parts: vec![vec![KeySource::Json("/email".into())]] };
    let body_key = axum_layer(store()).limit("per-ip", body).build().err();
    assert!(matches!(body_key, Some(LayerError::BodyKey(_))), "{body_key:?}");
    for cost in [0, 4] {
        let refused = axum_layer(store()).limit_with_cost("per-ip", ip(), cost).build().err();
        assert_eq!(refused, Some(LayerError::Cost { policy: "per-ip".into(), cost, limit: 3 }));
    }
    assert!(axum_layer(store()).limit_with_cost("per-ip", ip(), 3).build().is_ok());
    // A claim with nothing to verify tokens would always be absent: every client on `ip`.
    let unverified = axum_layer(store()).limit("per-ip", "jwt:sub|ip").build().err();
    assert_eq!(unverified, Some(LayerError::JwtWithoutVerifier("jwt:sub|ip".into())));
}

/// An attacker over its limit who says its request is a gRPC call (any spelling of the type)
/// changes only the form of its denial: the handler is never called. A type that merely starts
/// alike keeps the HTTP 429.
#[tokio::test]
async fn a_grpc_content_type_changes_how_a_denial_reads_never_whether_it_is_denied() {
    let (handler, hits) = counting("ok");
    let layer = axum_layer(store()).limit("per-ip", ip()).build().unwrap();
    let c = Client { app: Router::new().route("/x", get(handler)).layer(layer) };
    for _ in 0..3 {
        assert_eq!(c.get("/x", &[]).await.status, 200);
    }
    for grpc in ["application/grpc", "Application/GRPC+proto", "application/grpc;a=b", "application/grpc-web"] {
        let denied = c.get("/x", &[("content-type", grpc)]).await;
        assert_eq!((denied.status, denied.headers["grpc-status"].to_str().unwrap()), (200, "8"), "{grpc}");
        assert!(denied.body.is_empty() && denied.headers.get("retry-after").is_some(), "{grpc}");
    }
    let http = c.get("/x", &[("content-type", "application/grpcx")]).await;
    assert_eq!(http.status, 429);
    assert!(http.headers.get("grpc-status").is_none());
    assert_eq!(hits.load(Ordering::SeqCst), 3, "no denied request reached the handler");
}

#[test]
fn keys_read_as_the_configuration_file_reads_them() {
    assert_eq!("header:X-Api-Key|ip".into_key(), Ok(api_key_or_ip()));
    assert_eq!(["ip"].into_key(), Ok(ip()));
    let two = ["header:x-api-key", "path"].into_key().unwrap();
    assert_eq!(two.parts, [vec![KeySource::Header("x-api-key".into())], vec![KeySource::Path]]);
    // What the file refuses, the builder refuses, with the file's words; and a key built by
    // hand must name something (no key would put every client in one bucket).
    let refused = |key: Result<KeySpec, String>| {
        let built = axum_layer(store()).limit("per-ip", key_or(key)).build();
        match built.err() {
            Some(LayerError::Key { policy, error }) => {
                assert_eq!(policy, "per-ip");
                error
            }
            other => panic!("not refused as a key: {other:?}"),
        }
    };
    assert!(refused("cookie:sid".into_key()).contains("unknown key part `cookie`"));
    assert!(refused("json:email".into_key()).contains("is not a JSON pointer"));
    assert!(refused("header:".into_key()).contains("needs a header name"));
    assert!(refused(Vec::<&str>::new().as_slice().into_key()).contains("at least one part"));
    assert!(refused(KeySpec { parts: Vec::new() }.into_key()).contains("at least one part"));
    assert!(refused(KeySpec { parts: vec![Vec::new()] }.into_key()).contains("at least one source"));
}

/// A key given as it came, right or wrong (the test feeds the builder's errors through).
fn key_or(key: Result<KeySpec, String>) -> impl IntoKey {
    struct Given(Result<KeySpec, String>);
    impl IntoKey for Given {
        fn into_key(self) -> Result<KeySpec, String> {
            self.0
        }
    }
    Given(key)
}

#[test]
fn a_deny_status_that_is_not_a_4xx_or_5xx_is_refused() {
    for status in [200, 302, 399, 600, 1000] {
        let built = axum_layer(store()).limit("per-ip", "ip").deny_status(status).build();
        assert_eq!(built.err(), Some(LayerError::DenyStatus(format!("{status} is not a 4xx or 5xx status"))));
    }
    for status in [400, 429, 503, 599] {
        assert!(axum_layer(store()).limit("per-ip", "ip").deny_status(status).build().is_ok());
    }
}

#[tokio::test]
async fn a_503_deny_status_is_what_a_denied_client_gets() {
    let layer = axum_layer(store()).limit("per-ip", "ip").deny_status(503).build().unwrap();
    let c = Client { app: Router::new().route("/", get(|| async { "ok" })).layer(layer) };
    let statuses = [
        c.get("/", &[]).await.status,
        c.get("/", &[]).await.status,
        c.get("/", &[]).await.status,
        c.get("/", &[]).await.status,
    ];
    assert_eq!(statuses, [200, 200, 200, 503]);
}

#[test]
fn the_layer_and_its_builder_say_what_they_limit_and_never_their_secret() {
    let builder = axum_layer(store()).limit("per-key", "header:x-api-key|ip").key_secret(b"s3cret-value");
    let shown = format!("{builder:?}");
    assert!(shown.contains("per-key") && shown.contains("memory"), "{shown}");
    let layer = builder.build().unwrap();
    let shown = format!("{layer:?}");
    assert!(shown.contains("per-key by header:x-api-key|ip (cost 1)"), "{shown}");
    assert!(!shown.contains("s3cret") && !format!("{layer:#?}").contains("s3cret"), "{shown}");
    // The service it makes says the same, and what it wraps.
    let service = tower::Layer::layer(&layer, "the inner service");
    let shown = format!("{service:?}");
    assert!(shown.contains("the inner service") && shown.contains("per-key by header:x-api-key|ip"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[tokio::test]
async fn without_a_peer_a_limit_on_the_client_refuses_the_request_instead_of_one_bucket_for_all() {
    // An axum app served without `into_make_service_with_connect_info` and a layer without
    // `.peer(...)`: the layer cannot tell clients apart.
    let (handler, hits) = counting("hello");
    let send = |app: Router| async move {
        let res = app.oneshot(http::Request::get("/").body(Body::empty()).unwrap()).await.unwrap();
        let (parts, body) = res.into_parts();
        (parts.status.as_u16(), body.collect().await.unwrap().to_bytes())
    };
    let per_ip = RateLimitLayer::builder(store()).limit("per-ip", "ip").build().unwrap();
    let app = Router::new().route("/", get(handler.clone())).layer(per_ip);
    for _ in 0..5 {
        let (status, body) = send(app.clone()).await;
        assert_eq!(status, 500);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"], "no_client_address");
        assert!(json["message"].as_str().unwrap().contains("into_make_service_with_connect_info"));
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing passed on unlimited");
    // A key that falls back to the address needs it too; one that never reads the client does not.
    let fallback = RateLimitLayer::builder(store()).limit("per-key", "header:x-api-key|ip").build().unwrap();
    assert_eq!(send(Router::new().route("/", get(handler.clone())).layer(fallback)).await.0, 500);
    let by_key = RateLimitLayer::builder(store()).limit("per-key", "header:x-api-key").build().unwrap();
    assert_eq!(send(Router::new().route("/", get(handler)).layer(by_key)).await.0, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_costly_limit_spends_its_cost_per_request() {
    let layer = axum_layer(store()).limit_with_cost("per-ip", ip(), 2).build().unwrap();
    let app = Router::new().route("/report", get(|| async { "report" })).layer(layer);
    let c = Client { app };
    let first = c.get("/report", &[]).await;
    assert_eq!((first.status, first.num("ratelimit-remaining")), (200, 1));
    // One token left, the request costs two: denied, and nothing is charged.
    let denied = c.get("/report", &[]).await;
    assert_eq!((denied.status, denied.num("ratelimit-remaining")), (429, 1));
}

#[tokio::test]
async fn a_store_that_cannot_decide_answers_503_without_calling_the_service() {
    // A store full of live keys that refuses new ones cannot decide for a newcomer.
    let options = MemoryOptions { max_keys: 1, when_full: sluice_store::WhenFull::Refuse, ..MemoryOptions::default() };
    let policies = vec![NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(3, 0.001).unwrap().into() }];
    let store = Arc::new(MemoryStore::new(policies, options, Arc::new(ManualClock::new(T0))));
    let layer = axum_layer(store).limit("per-ip", api_key_or_ip()).build().unwrap();
    let (handler, hits) = counting("ok");
    let c = Client { app: Router::new().route("/x", get(handler)).layer(layer) };
    assert_eq!(c.get("/x", &[("x-api-key", "first")]).await.status, 200);
    let refused = c.get("/x", &[("x-api-key", "second")]).await;
    assert_eq!((refused.status, refused.num("retry-after")), (503, 1));
    assert_eq!(refused.json()["error"], "limiter_unavailable");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[path = "logs/mod.rs"]
mod logs;
use logs::Logs;

#[tokio::test]
async fn without_an_observer_a_store_failure_is_logged_when_it_starts_and_ends_and_counted() {
    let logs = Logs::capture();
    let options = MemoryOptions { max_keys: 1, when_full: sluice_store::WhenFull::Refuse, ..MemoryOptions::default() };
    let policies = vec![NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(3, 0.001).unwrap().into() }];
    let store = Arc::new(MemoryStore::new(policies, options, Arc::new(ManualClock::new(T0))));
    let layer = axum_layer(store).limit("per-ip", api_key_or_ip()).build().unwrap();
    let c = Client { app: Router::new().route("/x", get(|| async { "ok" })).layer(layer.clone()) };
    assert_eq!(c.get("/x", &[("x-api-key", "first")]).await.status, 200);
    for _ in 0..3 {
        assert_eq!(c.get("/x", &[("x-api-key", "newcomer")]).await.status, 503);
    }
    assert_eq!((layer.store_failures(), layer.store_failing()), (3, true));
    assert_eq!(logs.count("the store cannot decide"), 1, "one line for the run, not one a request");
    assert_eq!(logs.count("refuses new keys"), 1, "with its cause");
    // The store decides again (a key it holds): the end of the run, logged once.
    assert_eq!(c.get("/x", &[("x-api-key", "first")]).await.status, 200);
    assert_eq!(c.get("/x", &[("x-api-key", "first")]).await.status, 200);
    assert_eq!((layer.store_failures(), layer.store_failing()), (3, false));
    assert_eq!(logs.count("the store decides again"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_shaping_limit_holds_each_request_for_its_delay_before_the_service_runs() {
    use sluice_core::{LeakMode, LeakyBucket};
    // Three at a time, paced at one per second (nginx `limit_req rate=1r/s burst=2` without
    // `nodelay`). The store's clock stands still, tokio's clock is virtual: the delays measured
    // are the decisions' exactly, with no real waiting.
    let policy = LeakyBucket::new(1.0, 3, LeakMode::Shape { delay: 0 }).unwrap();
    let policies = vec![NamedPolicy { name: "paced".into(), policy: policy.into() }];
    let store = Arc::new(MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(T0))));
    let layer = axum_layer(store).limit("paced", ip()).build().unwrap();
    let c = Client { app: Router::new().route("/q", get(|| async { "done" })).layer(layer) };
    let mut held = Vec::new();
    for _ in 0..3 {
        let start = tokio::time::Instant::now();
        let res = c.get("/q", &[]).await;
        assert_eq!((res.status, res.text().as_str()), (200, "done"));
        held.push(start.elapsed());
    }
    let ms = std::time::Duration::from_millis;
    for (got, want) in held.iter().zip([ms(0), ms(1000), ms(2000)]) {
        assert!(*got >= want && *got <= want + ms(1), "held {got:?}, the decision said {want:?}");
    }
    // A fourth would exceed the capacity: denied at once, never held.
    let start = tokio::time::Instant::now();
    assert_eq!(c.get("/q", &[]).await.status, 429);
    assert!(start.elapsed() < ms(1));
}

#[path = "jwt_keys/mod.rs"]
mod jwt_keys;

/// An app behind a layer limiting `/me` per `jwt:sub|ip` (2 per key), its `[identity.jwt]`
/// table extended by `extra`.
fn jwt_app(extra: &str) -> Client {
    let table = format!("[identity.jwt]\nhs256_secret = {:?}\n{extra}\n", jwt_keys::HS_SECRET);
    let cfg = sluice_config::parse("l.toml", &table).unwrap();
    let by_sub = KeySpec { parts: vec![vec![KeySource::Jwt("/sub".into()), KeySource::Ip]] };
    let layer = axum_layer(store())
        .limit("per-key", by_sub)
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .jwt(cfg.identity.jwt.clone().unwrap())
        .build()
        .unwrap();
    Client { app: Router::new().route("/me", get(|| async { "me" })).layer(layer) }
}

#[tokio::test]
async fn the_layer_keys_on_verified_token_claims_and_ignores_forged_ones() {
    use jwt_keys::{claims, forged, hs256};
    let c = jwt_app("");
    let token = hs256().sign(&claims("alice", serde_json::json!({})));
    let bearer = format!("Bearer {token}");
    // alice from two addresses: one limit (per-key holds 2).
    let from = |ip: &'static str| [("x-forwarded-for", ip), ("authorization", bearer.as_str())];
    assert_eq!(c.get("/me", &from("198.51.100.1")).await.status, 200);
    assert_eq!(c.get("/me", &from("198.51.100.2")).await.status, 200);
    assert_eq!(c.get("/me", &from("198.51.100.3")).await.status, 429);
    // A forged token claiming alice is refused (401, the default), never keyed by alice nor
    // traded for its address's allowance.
    let fake = format!("Bearer {}", forged(&token));
    let res = c.get("/me", &[("x-forwarded-for", "198.51.100.9"), ("authorization", fake.as_str())]).await;
    assert_eq!(res.status, 401);
    // With `on_invalid_token = "fallback"`, it is keyed by its address.
    let c = jwt_app("on_invalid_token = \"fallback\"");
    let res = c.get("/me", &[("x-forwarded-for", "198.51.100.9"), ("authorization", fake.as_str())]).await;
    assert_eq!((res.status, res.num("ratelimit-remaining")), (200, 1));
}

/// An LLM-like API: every response says how many tokens it used in `x-usage-tokens`.
#[tokio::test]
async fn a_limit_settled_by_the_response_charges_what_the_response_says() {
    // 100 tokens, refilled at one per 1000 s: nothing refills during the test.
    let tokens = NamedPolicy { name: "tokens".into(), policy: TokenBucket::new(100, 0.001).unwrap().into() };
    let store = Arc::new(MemoryStore::new(vec![tokens], MemoryOptions::default(), Arc::new(ManualClock::new(T0))));
    let usage = sluice_config::CostFrom::parse("response-header:x-usage-tokens").unwrap();
    let layer = axum_layer(store)
        .limit_settled("tokens", "ip", 1, usage)
        .headers(vec![HeaderStyle::Ietf])
        .build()
        .expect("layer builds");
    // The handler reports the tokens the request asks it to use (as `?used=N`), or says nothing.
    let handler = |uri: http::Uri| async move {
        let used = uri.query().and_then(|q| q.strip_prefix("used=")).map(str::to_string);
        let mut res = http::Response::new(Body::from("done"));
        if let Some(n) = used {
            res.headers_mut().insert("x-usage-tokens", n.parse().unwrap());
        }
        res
    };
    let c = Client { app: Router::new().route("/v1/chat", get(handler)).layer(layer) };
    // What the ietf field says is left: `"tokens";r=N;t=...`.
    let left = |r: &Resp| -> u64 {
        let field = r.header("ratelimit").expect("a RateLimit field");
        field.split(';').find_map(|p| p.strip_prefix("r=")).and_then(|n| n.parse().ok()).expect("r=")
    };

    // Each request reserves 1 (what its headers show), and is settled to what its response says.
    let first = c.get("/v1/chat?used=40", &[]).await;
    assert_eq!((first.status, left(&first)), (200, 99));
    let second = c.get("/v1/chat?used=30", &[]).await;
    assert_eq!(left(&second), 59, "40 used by the first");
    // No usage header: the reservation (1) stands.
    let third = c.get("/v1/chat", &[]).await;
    assert_eq!(left(&third), 29, "30 used by the second");
    // Not a whole number: the reservation stands too.
    let fourth = c.get("/v1/chat?used=12x", &[]).await;
    assert_eq!(left(&fourth), 28, "1 by the third");
    // A request that uses more than is left is not stopped (its response is already on its way):
    // the next one is, until the refill pays the debt back.
    let fifth = c.get("/v1/chat?used=80", &[]).await;
    assert_eq!((fifth.status, left(&fifth)), (200, 27));
    let denied = c.get("/v1/chat?used=1", &[]).await;
    assert_eq!(denied.status, 429, "40 + 30 + 1 + 1 + 80 used of 100: a debt of 52 tokens");
    assert_eq!(denied.num("retry-after"), 53_000, "the debt and one token for this request, at 1 per 1000 s");
}

/// A body sent a chunk per frame.
struct Chunks(std::collections::VecDeque<String>);

impl http_body::Body for Chunks {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(|c| Ok(http_body::Frame::data(c.into()))))
    }
}

#[tokio::test]
async fn a_limit_settled_by_the_response_body_charges_the_tokens_of_its_json_or_last_event() {
    let tokens = NamedPolicy { name: "tokens".into(), policy: TokenBucket::new(1000, 0.001).unwrap().into() };
    let store = Arc::new(MemoryStore::new(vec![tokens], MemoryOptions::default(), Arc::new(ManualClock::new(T0))));
    let usage = sluice_config::CostFrom::parse("response-json:/usage/total_tokens").unwrap();
    let layer = axum_layer(store).limit_settled("tokens", "ip", 1, usage).headers(vec![HeaderStyle::Ietf]).build();
    // `?used=N` reports N tokens; `/stream` sends them as server-sent events, a chunk at a time,
    // the usage in the last event.
    let json = |uri: http::Uri| async move {
        let used = uri.query().and_then(|q| q.strip_prefix("used=")).unwrap_or("0").to_string();
        ([("content-type", "application/json")], format!("{{\"usage\":{{\"total_tokens\":{used}}}}}"))
    };
    let stream = |uri: http::Uri| async move {
        let used = uri.query().and_then(|q| q.strip_prefix("used=")).unwrap_or("0").to_string();
        let events = vec![
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n".to_string(),
            format!("data: {{\"choices\":[],\"usage\":{{\"total_tokens\":{used}}}}}\n\n"),
            "data: [DONE]\n\n".to_string(),
        ];
        ([("content-type", "text/event-stream")], Body::new(Chunks(events.into())))
    };
    let app = Router::new().route("/v1/chat", get(json)).route("/v1/stream", get(stream));
    let c = Client { app: app.layer(layer.expect("layer builds")) };
    let left = |r: &Resp| -> u64 {
        let field = r.header("ratelimit").expect("a RateLimit field");
        field.split(';').find_map(|p| p.strip_prefix("r=")).and_then(|n| n.parse().ok()).expect("r=")
    };
    let first = c.get("/v1/chat?used=300", &[]).await;
    assert_eq!((first.status, left(&first)), (200, 999), "reserved 1");
    assert_eq!(&first.body[..], b"{\"usage\":{\"total_tokens\":300}}", "the body is the handler's");
    let second = c.get("/v1/stream?used=450", &[]).await;
    assert_eq!(left(&second), 699, "300 used by the first");
    assert!(String::from_utf8_lossy(&second.body).ends_with("data: [DONE]\n\n"));
    let third = c.get("/v1/chat?used=0", &[]).await;
    assert_eq!(left(&third), 249, "450 used by the stream");
}

#[tokio::test]
async fn a_limit_in_flight_holds_a_slot_until_the_response_body_is_done_with() {
    let streams = NamedPolicy {
        name: "streams".into(),
        policy: sluice_core::SlidingLog::new(2, 600 * NANOS_PER_SEC).unwrap().into(),
    };
    let store = Arc::new(MemoryStore::new(vec![streams], MemoryOptions::default(), Arc::new(ManualClock::new(T0))));
    let layer = axum_layer(store).limit_in_flight("streams", "ip").headers(vec![HeaderStyle::Ietf]).build();
    let handler = || async { Body::new(Chunks(["one".to_string(), "two".to_string()].into())) };
    let app = Router::new().route("/stream", get(handler)).layer(layer.expect("layer builds"));
    let call = || {
        let mut req = http::Request::get("/stream").body(Body::empty()).unwrap();
        req.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
        app.clone().oneshot(req)
    };
    // Read whole, a response gives its slot back: any number, one after another.
    for _ in 0..4 {
        let res = call().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(&res.into_body().collect().await.unwrap().to_bytes()[..], b"onetwo");
    }
    // Two responses not yet sent hold both slots.
    let first = call().await.unwrap();
    let second = call().await.unwrap();
    assert_eq!((first.status(), second.status()), (http::StatusCode::OK, http::StatusCode::OK));
    let third = call().await.unwrap();
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "1");
    assert_eq!(third.headers()["ratelimit-policy"], r#""streams";q=2;qu="concurrent-requests";w=600"#);
    // One dropped unread (the client left): its slot is back.
    drop(first);
    assert_eq!(call().await.unwrap().status(), 200);
    drop(second);

    // Only a sliding log can hold leases.
    let bucket = NamedPolicy { name: "b".into(), policy: TokenBucket::new(2, 1.0).unwrap().into() };
    let store = Arc::new(MemoryStore::new(vec![bucket], MemoryOptions::default(), Arc::new(ManualClock::new(T0))));
    let refused = axum_layer(store).limit_in_flight("b", "ip").build();
    assert!(matches!(refused, Err(LayerError::NotALease(name)) if name == "b"));
}

#[tokio::test]
async fn an_inner_service_reports_what_a_request_cost_in_a_response_extension() {
    let tokens = NamedPolicy { name: "tokens".into(), policy: TokenBucket::new(100, 0.001).unwrap().into() };
    let store = Arc::new(MemoryStore::new(vec![tokens], MemoryOptions::default(), Arc::new(ManualClock::new(T0))));
    let reported = sluice_config::CostFrom::parse("response-extension").unwrap();
    let layer = axum_layer(store).limit_settled("tokens", "ip", 1, reported).headers(vec![HeaderStyle::Ietf]).build();
    // The handler says what it used (`?used=N`), or nothing.
    let handler = |uri: http::Uri| async move {
        let mut res = http::Response::new(Body::from("done"));
        if let Some(n) = uri.query().and_then(|q| q.strip_prefix("used=")) {
            res.extensions_mut().insert(sluice_http::layer::UsedCost(n.parse().unwrap()));
        }
        res
    };
    let c = Client { app: Router::new().route("/work", get(handler)).layer(layer.expect("layer builds")) };
    let left = |r: &Resp| -> u64 {
        let field = r.header("ratelimit").expect("a RateLimit field");
        field.split(';').find_map(|p| p.strip_prefix("r=")).and_then(|n| n.parse().ok()).expect("r=")
    };
    assert_eq!(left(&c.get("/work?used=40", &[]).await), 99, "reserved 1");
    assert_eq!(left(&c.get("/work", &[]).await), 59, "settled to the 40 it reported");
    assert_eq!(left(&c.get("/work?used=0", &[]).await), 58, "the one that said nothing kept its 1");
    assert_eq!(left(&c.get("/work", &[]).await), 58, "one that used nothing gave its 1 back");
}
