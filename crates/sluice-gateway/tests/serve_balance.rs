//! The per-core workers share the connections evenly ([`sluice_gateway::balance`]): eight
//! keep-alive connections opened one after another, each held open, are served four by each of
//! two workers, whichever socket the kernel put them on. Without the balance, the kernel's hash
//! splits eight connections four and four only about a quarter of the time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use sluice_gateway::respond::{Body, full};
use sluice_gateway::serve::{Dropped, Handler, Listeners, serve_per_core};

/// Answers every request with the name of the worker thread that served it.
struct WhichWorker;

impl Handler for WhichWorker {
    async fn handle(self: Arc<Self>, _: SocketAddr, _: Request<Incoming>) -> Result<Response<Body>, Dropped> {
        let name = std::thread::current().name().unwrap_or("unnamed").to_string();
        Ok(Response::new(full(Bytes::from(name))))
    }
}

/// One request on `conn`, which stays open: the body of the answer.
fn ask(conn: &mut TcpStream) -> String {
    conn.write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap())
                })
                .expect("a content-length");
            if body.len() >= length {
                return body[..length].to_string();
            }
        }
    }
}

#[test]
fn connections_held_open_are_split_evenly_between_two_workers() {
    let listeners = Listeners::bind("127.0.0.1:0".parse().unwrap(), 2).unwrap();
    let addr = listeners.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(serve_per_core(
            listeners,
            Arc::new(WhichWorker),
            async { stopped.await.unwrap() },
            Duration::ZERO,
        ))
    });

    let mut held = Vec::new();
    let mut served = Vec::new();
    for _ in 0..8 {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // Answered before the next connects: every earlier one is counted where it is served.
        served.push(ask(&mut conn));
        held.push(conn);
    }
    let on = |w: &str| served.iter().filter(|s| s.as_str() == w).count();
    assert_eq!((on("sluice-worker-0"), on("sluice-worker-1")), (4, 4), "{served:?}");
    // A handed connection goes on being served by the worker it was handed to.
    for (conn, first) in held.iter_mut().zip(&served) {
        assert_eq!(&ask(conn), first);
    }

    drop(held);
    stop.send(()).unwrap();
    server.join().unwrap().unwrap();
}
