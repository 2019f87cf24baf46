//! The layer on a real Redis, as a user with the `redis` feature writes it: while Redis is
//! down, a fail-closed layer answers 503 and logs the failure once, with its cause; when Redis
//! is back, it decides again and logs that once.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::Request;
use sluice_tower::{NamedPolicy, OnError, RateLimitLayer, RedisOptions, RedisStore, TokenBucket};
use tower::ServiceExt;

#[path = "../../sluice-redis/tests/support/mod.rs"]
mod support;

#[path = "../../sluice-http/tests/logs/mod.rs"]
mod logs;
use logs::Logs;

#[tokio::test(flavor = "current_thread")]
async fn redis_down_is_logged_once_with_its_cause_and_its_end_once() {
    let logs = Logs::capture();
    let mut redis = support::RedisServer::start();
    let policy = NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(100, 10.0).unwrap().into() };
    let store = RedisStore::new(vec![policy], RedisOptions::single(redis.url(), OnError::FailClosed)).unwrap();
    let layer = RateLimitLayer::builder(Arc::new(store))
        .limit("per-ip", "ip")
        .key_secret(b"the same in every instance")
        .build()
        .unwrap();
    let app = Router::new().route("/", get(|| async { "ok" })).layer(layer.clone());
    let status = |app: Router| async move {
        let peer: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let req = Request::get("/").extension(axum::extract::ConnectInfo(peer)).body(Body::empty()).unwrap();
        app.oneshot(req).await.unwrap().status().as_u16()
    };

    assert_eq!(status(app.clone()).await, 200);
    redis.kill();
    let mut down = Vec::new();
    for _ in 0..4 {
        down.push(status(app.clone()).await);
    }
    assert_eq!(down, [503; 4], "fail-closed while Redis is down");
    assert!(layer.store_failing() && layer.store_failures() >= 4, "counted: {}", layer.store_failures());
    let text = logs.text();
    assert_eq!(logs.count("the store cannot decide"), 1, "one line for the outage:\n{text}");
    let line = text.lines().find(|l| l.contains("the store cannot decide")).unwrap();
    assert!(line.contains("store=\"redis\""), "the line names the store: {line}");
    // And the cause, as Redis's client said it (the connection closed, or refused).
    let cause = line.split("error=").nth(1).unwrap_or_default();
    assert!(cause.contains("redis: connection"), "and the cause: {line}");

    redis.restart();
    let mut back = 0;
    for _ in 0..200 {
        if status(app.clone()).await == 200 {
            back += 1;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(back, 1, "Redis is back: the layer decides again");
    assert!(!layer.store_failing());
    let text = logs.text();
    assert_eq!(logs.count("the store decides again"), 1, "its end, once:\n{text}");
    assert_eq!(logs.count("the store cannot decide"), 1, "still one line for the outage");
}
