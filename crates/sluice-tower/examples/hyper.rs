//! A plain hyper 1 server (no framework) limited by sluice's tower layer: per client address, a
//! burst of 5, then one request a second.
//!
//! ```text
//! cargo run -p sluice-tower --example hyper          # listens on 127.0.0.1:3002 (PORT to change)
//! for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' localhost:3002/; done
//! ```
//!
//! The last line prints five `200`s, then `429`s. hyper puts nothing in a request about the
//! connection it came on: the server below inserts the peer's `SocketAddr`, where the layer
//! looks for it by default.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use sluice_tower::{MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SystemClock, TokenBucket};
use tower::ServiceBuilder;

/// The application: one answer for every request the layer lets through.
async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello\n"))))
}

/// Serves the limited app on `listener` until it fails.
pub async fn serve(listener: tokio::net::TcpListener) -> Result<(), Box<dyn std::error::Error>> {
    let policy = NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(5, 1.0)?.into() };
    let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
    let limits = RateLimitLayer::builder(Arc::new(store)).limit("per-ip", "ip").build()?;
    let app = ServiceBuilder::new().layer(limits).service_fn(hello);
    loop {
        let (stream, peer) = listener.accept().await?;
        // Each request of this connection carries its peer, where the layer reads it.
        let service = ServiceBuilder::new()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert::<SocketAddr>(peer);
                req
            })
            .service(app.clone());
        tokio::spawn(async move {
            let served =
                http1::Builder::new().serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
            if let Err(e) = served.await {
                eprintln!("connection from {peer}: {e}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3002);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("hyper example listening on http://{}", listener.local_addr()?);
    serve(listener).await
}
