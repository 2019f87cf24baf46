//! The proxy's connections to the upstream: kept and reused between requests, never handed a
//! second request before the first response ended, and replaced when the upstream closes them
//! — without a client ever seeing the difference.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Client, start};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A raw HTTP/1.1 upstream answering `ok` to every request; it counts connections and requests,
/// and closes a connection after `close_after` requests on it (0: never).
struct CountingUpstream {
    addr: std::net::SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

async fn raw_upstream(close_after: usize) -> CountingUpstream {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (connections, requests) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (c, r) = (connections.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let r = r.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut read = BufReader::new(read);
                let mut served = 0;
                loop {
                    let mut line = String::new();
                    // The head, up to its blank line (no bodies in this test).
                    loop {
                        line.clear();
                        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    r.fetch_add(1, Ordering::SeqCst);
                    served += 1;
                    let close = close_after > 0 && served >= close_after;
                    let head = if close { "Connection: close\r\n" } else { "" };
                    let reply = format!("HTTP/1.1 200 OK\r\n{head}Content-Length: 2\r\n\r\nok");
                    if write.write_all(reply.as_bytes()).await.is_err() || close {
                        // Closing: drain what the peer may still send, then drop the socket.
                        let mut rest = [0u8; 64];
                        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), read.read(&mut rest)).await;
                        return;
                    }
                }
            });
        }
    });
    CountingUpstream { addr, connections, requests }
}

fn config(up: &CountingUpstream) -> String {
    format!(
        "[upstream]\nurl = \"http://{}\"\ntimeout_ms = 5000\n\n[[policy]]\nname = \"p\"\nalgorithm = \"token-bucket\"\ncapacity = 100000\nrefill_per_second = 1\n\n[[route]]\npath = \"/*\"\nlimits = [{{ policy = \"p\", key = \"ip\" }}]\n",
        up.addr
    )
}

#[tokio::test]
async fn sequential_requests_share_one_upstream_connection() {
    let up = raw_upstream(0).await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    for _ in 0..50 {
        let res = c.get("/x", &[]).await;
        assert_eq!((res.status, res.text().as_str()), (200, "ok"));
    }
    assert_eq!(up.requests.load(Ordering::SeqCst), 50);
    assert_eq!(up.connections.load(Ordering::SeqCst), 1, "one connection, reused");
}

#[tokio::test]
async fn concurrent_requests_never_share_a_connection_mid_exchange() {
    let up = raw_upstream(0).await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    let all = (0..32).map(|_| {
        let c = c.clone();
        tokio::spawn(async move { c.get("/x", &[]).await.status })
    });
    for h in all {
        assert_eq!(h.await.unwrap(), 200);
    }
    let opened = up.connections.load(Ordering::SeqCst);
    assert!((1..=32).contains(&opened), "{opened} connections for 32 concurrent requests");
    // Afterwards they are all reused: no new connection for the next requests.
    for _ in 0..10 {
        assert_eq!(c.get("/x", &[]).await.status, 200);
    }
    assert_eq!(up.connections.load(Ordering::SeqCst), opened);
}

#[tokio::test]
async fn an_upstream_that_closes_its_connections_costs_clients_nothing() {
    // Every connection carries 3 requests, then the upstream closes it.
    let up = raw_upstream(3).await;
    let (gw, _clock) = start(&config(&up)).await;
    let c = Client::new(gw.addr);
    for i in 0..30 {
        assert_eq!(c.get("/x", &[]).await.status, 200, "request {i}");
    }
    assert_eq!(up.requests.load(Ordering::SeqCst), 30);
    assert_eq!(up.connections.load(Ordering::SeqCst), 10);
}
