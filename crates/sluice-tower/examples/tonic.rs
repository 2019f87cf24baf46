//! A gRPC service (tonic's health service) limited per client and per method by sluice's tower
//! layer: each client may call each method 5 times in a burst, then once a second.
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

use sluice_tower::{MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SystemClock, TokenBucket};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// Serves the limited health service on `incoming` until it fails.
pub async fn serve(incoming: TcpIncoming) -> Result<(), Box<dyn std::error::Error>> {
    let policy = NamedPolicy { name: "per-call".into(), policy: TokenBucket::new(5, 1.0)?.into() };
    let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
    let limits = RateLimitLayer::builder(Arc::new(store)).limit("per-call", ["ip", "path"]).build()?;
    let (_reporter, health) = tonic_health::server::health_reporter();
    Server::builder().layer(limits).add_service(health).serve_with_incoming(incoming).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(50051);
    let incoming = TcpIncoming::bind(std::net::SocketAddr::from(([127, 0, 0, 1], port)))?;
    println!("tonic example listening on {}", incoming.local_addr()?);
    serve(incoming).await
}
