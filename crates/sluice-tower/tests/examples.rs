//! The front page's app and the three examples, run as a user runs them, on real sockets: the
//! front page's code as a user copies it (only `sluice_tower` paths, no `.peer(...)`; its limits
//! made small), and each example's own code (`examples/*.rs`, included as modules: what runs
//! here is what `cargo run --example` runs).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{Router, routing::get};
use sluice_tower::{MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SlidingWindow, SystemClock, TokenBucket};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tonic::Code;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

#[allow(dead_code)] // its `main`
#[path = "../examples/axum.rs"]
mod axum_example;
#[allow(dead_code)]
#[path = "../examples/hyper.rs"]
mod hyper_example;
#[allow(dead_code)]
#[path = "../examples/tonic.rs"]
mod tonic_example;

/// The front page's app with small limits (2 per address, 3 per key), on a free port.
async fn serve() -> SocketAddr {
    let store = MemoryStore::new(
        vec![
            NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(2, 0.001).unwrap().into() },
            NamedPolicy {
                name: "per-key".into(),
                policy: SlidingWindow::per(3, Duration::from_secs(3600)).unwrap().into(),
            },
        ],
        MemoryOptions::default(),
        Arc::new(SystemClock::new()),
    );
    let limits = RateLimitLayer::builder(Arc::new(store))
        .limit("per-ip", "ip")
        .limit("per-key", "header:x-api-key|ip")
        .build()
        .unwrap();
    let app = Router::new().route("/api/data", get(|| async { "data\n" })).layer(limits);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    addr
}

/// The status of `GET /api/data` sent from the loopback address `from` (127.0.0.0/8 is all
/// local on Linux), with `x-api-key: key` when given.
async fn send(server: SocketAddr, from: [u8; 4], key: Option<&str>) -> u16 {
    send_to(server, "/api/data", from, key).await
}

/// The status of `GET path`, as [`send`].
async fn send_to(server: SocketAddr, path: &str, from: [u8; 4], key: Option<&str>) -> u16 {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    let key = key.map(|k| format!("x-api-key: {k}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nhost: t\r\n{key}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn without_peer_each_client_address_has_its_own_limit() {
    let server = serve().await;
    let a = [
        send(server, [127, 0, 0, 2], None).await,
        send(server, [127, 0, 0, 2], None).await,
        send(server, [127, 0, 0, 2], None).await,
    ];
    assert_eq!(a, [200, 200, 429], "the first address: 2 a burst, then denied");
    // Had the layer missed axum's ConnectInfo, this would be a 500 (no_client_address), or,
    // with one bucket for all, a 429.
    assert_eq!(send(server, [127, 0, 0, 3], None).await, 200, "another address has its own bucket");
}

#[tokio::test]
async fn one_api_key_is_one_limit_from_any_address() {
    let server = serve().await;
    let mut statuses = Vec::new();
    for from in [[127, 0, 0, 4], [127, 0, 0, 5], [127, 0, 0, 6], [127, 0, 0, 7]] {
        statuses.push(send(server, from, Some("team-a")).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429], "3 per key, whatever address sends it");
    assert_eq!(send(server, [127, 0, 0, 7], Some("team-b")).await, 200, "another key");
}

/// `n` requests to `path` from `from`, in turn: their statuses.
async fn statuses(server: SocketAddr, path: &str, from: [u8; 4], key: Option<&str>, n: usize) -> Vec<u16> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(send_to(server, path, from, key).await);
    }
    all
}

#[tokio::test]
async fn the_axum_example_limits_per_address_and_per_key_and_leaves_health_alone() {
    let app = axum_example::app().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await });
    // Keyed requests from one address: each key has 5, the address 10.
    let mut from_one = Vec::new();
    for key in ["a", "a", "a", "a", "a", "a", "b", "b", "b", "b", "b", "c"] {
        from_one.push(send(server, [127, 0, 1, 2], Some(key)).await);
    }
    let want = [200, 200, 200, 200, 200, 429, 200, 200, 200, 200, 200, 429];
    assert_eq!(from_one, want, "5 per key; the address's 10 spent by keys a and b (a denial spends nothing)");
    assert_eq!(send_to(server, "/health", [127, 0, 1, 2], None).await, 200, "/health is not limited");
    // Without a key, a request counts under its address in both limits: the tighter, 5.
    let unkeyed = statuses(server, "/api/data", [127, 0, 1, 3], None, 6).await;
    assert_eq!(unkeyed, [200, 200, 200, 200, 200, 429], "without a key: the address in both limits");
    let mut keyed = Vec::new();
    for from in 4..10 {
        keyed.push(send(server, [127, 0, 1, from], Some("team-a")).await);
    }
    assert_eq!(keyed, [200, 200, 200, 200, 200, 429], "a burst of 5 per key, from any address");
}

#[tokio::test]
async fn the_hyper_example_limits_per_address() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    tokio::spawn(async move { hyper_example::serve(listener).await.map_err(|e| e.to_string()) });
    assert_eq!(statuses(server, "/", [127, 0, 2, 2], None, 6).await, [200, 200, 200, 200, 200, 429]);
    assert_eq!(send_to(server, "/", [127, 0, 2, 3], None).await, 200, "another address");
}

#[tokio::test]
async fn the_tonic_example_denies_in_grpc_terms_per_client_and_method() {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(async move { tonic_example::serve(incoming).await.map_err(|e| e.to_string()) });
    let channel = loop {
        // The server task may not be accepting yet.
        match Channel::from_shared(format!("http://{addr}")).unwrap().connect().await {
            Ok(channel) => break channel,
            Err(_) => tokio::task::yield_now().await,
        }
    };
    let mut client = HealthClient::new(channel);
    // The empty service name is the server's own health: SERVING.
    let check = || HealthCheckRequest { service: String::new() };
    for _ in 0..5 {
        client.check(check()).await.expect("within the burst: the service answers");
    }
    let denied = client.check(check()).await.expect_err("the sixth call at once");
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    let retry_after: u64 = denied.metadata().get("retry-after").unwrap().to_str().unwrap().parse().unwrap();
    assert_eq!(retry_after, 1, "one call a second: back in a second");
    assert!(denied.metadata().get("ratelimit-remaining").is_some(), "the rate-limit headers as metadata");
    // Another method of the same service has its own bucket: `Watch` opens its stream.
    let watched = client.watch(check()).await;
    assert!(watched.is_ok(), "another method is limited apart: {watched:?}");
}
