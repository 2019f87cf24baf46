//! The front page's app, as a user writes it (only `sluice_tower` paths, no `.peer(...)`),
//! served by axum on a real socket: clients at different addresses get their own limits, and
//! one key's limit holds across addresses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{Router, routing::get};
use sluice_tower::{MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SlidingWindow, SystemClock, TokenBucket};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

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
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    let key = key.map(|k| format!("x-api-key: {k}\r\n")).unwrap_or_default();
    let request = format!("GET /api/data HTTP/1.1\r\nhost: t\r\n{key}connection: close\r\n\r\n");
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
