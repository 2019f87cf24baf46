//! The tower layer in an axum app on a real socket: a per-IP and a per-API-key limit, denials
//! answered by the layer (the handler never runs), admitted responses with headers.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use common::{Client, T0};
use sluice_config::{HeaderStyle, KeySource, KeySpec};
use sluice_core::{ManualClock, TokenBucket};
use sluice_http::layer::{LayerError, RateLimitLayer};
use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
use tokio::net::TcpListener;

fn store() -> Arc<MemoryStore> {
    let policies = vec![
        NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(3, 0.001).unwrap().into() },
        NamedPolicy { name: "per-key".into(), policy: TokenBucket::new(2, 0.001).unwrap().into() },
    ];
    Arc::new(MemoryStore::new(policies, MemoryOptions::default(), Arc::new(ManualClock::new(T0))))
}

fn ip() -> KeySpec {
    KeySpec { parts: vec![vec![KeySource::Ip]] }
}

fn api_key_or_ip() -> KeySpec {
    KeySpec { parts: vec![vec![KeySource::Header("x-api-key".into()), KeySource::Ip]] }
}

/// An axum app behind the layer; returns its address and how often the handler ran.
async fn app() -> (SocketAddr, Arc<AtomicUsize>) {
    let layer = RateLimitLayer::builder(store())
        .limit("per-ip", ip())
        .limit("per-key", api_key_or_ip())
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .headers(vec![HeaderStyle::Draft6, HeaderStyle::Ietf])
        .peer(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
        .build()
        .expect("layer builds");
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let app = Router::new()
        .route(
            "/hello",
            get(move || {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    "hello"
                }
            }),
        )
        .layer(layer);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await;
    });
    (addr, hits)
}

#[tokio::test]
async fn the_per_key_and_per_ip_limits_deny_with_429_and_headers_and_pass_otherwise() {
    let (addr, hits) = app().await;
    let c = Client::new(addr);
    let from = |key: &'static str| [("x-forwarded-for", "198.51.100.1"), ("x-api-key", key)];

    let ok = c.get("/hello", &from("key-1")).await;
    assert_eq!((ok.status, ok.text().as_str()), (200, "hello"));
    // The headers describe the limit closest to denying: per-key (2), one left.
    assert_eq!((ok.num("ratelimit-limit"), ok.num("ratelimit-remaining")), (2, 1));
    assert_eq!(ok.header("ratelimit"), Some("\"per-key\";r=1;t=1000"));
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
    let unknown = RateLimitLayer::builder(store()).limit("nope", ip()).build().err();
    assert_eq!(unknown, Some(LayerError::UnknownPolicy("nope".into())));
    let body = KeySpec { parts: vec![vec![KeySource::Json("/email".into())]] };
    let body_key = RateLimitLayer::builder(store()).limit("per-ip", body).build().err();
    assert!(matches!(body_key, Some(LayerError::BodyKey(_))), "{body_key:?}");
}
