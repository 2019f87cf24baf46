//! A gRPC service (tonic's health service) limited per client and per method by sluice's tower
//! layer: each client may call each method 5 times a second.
//!
//! ```text
//! cargo run -p sluice-tower --features tonic --example tonic        # listens on 127.0.0.1:50051 (PORT to change)
//! ```
//!
//! The key `["ip", "path"]` gives every (client, method) its own bucket: a gRPC call's path is
//! its method (`/grpc.health.v1.Health/Check`). A denied call gets gRPC's `RESOURCE_EXHAUSTED`
//! (`grpc-status: 8`) with `retry-after` and the rate-limit headers as metadata; the service
//! is not called. tonic puts the peer in `TcpConnectInfo`, where the layer reads it with the
//! `tonic` feature.

use std::sync::Arc;
use std::time::Duration;

use sluice_tower::{FixedWindow, MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SystemClock};
use tonic::transport::Server;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policy = NamedPolicy { name: "per-call".into(), policy: FixedWindow::per(5, Duration::from_secs(1))?.into() };
    let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
    let limits = RateLimitLayer::builder(Arc::new(store)).limit("per-call", ["ip", "path"]).build()?;

    let (_reporter, health) = tonic_health::server::health_reporter();
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(50051);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    println!("tonic example listening on {addr}");
    Server::builder().layer(limits).add_service(health).serve(addr).await?;
    Ok(())
}
