//! A small axum app that limits its own API with sluice's tower layer: a per-IP limit and a
//! per-API-key limit, both applied to every `/api` request, in memory.
//!
//! Run it:
//!
//! ```text
//! cargo run -p sluice-tower --example axum          # listens on 127.0.0.1:3001 (PORT to change)
//! ```
//!
//! Then, in another shell:
//!
//! ```text
//! curl -i localhost:3001/health                         # not limited
//! curl -i -H 'x-api-key: team-a' localhost:3001/api/data    # per key: 5 at once, then 1 every 2 s
//! for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' -H 'x-api-key: team-a' localhost:3001/api/data; done
//! for i in $(seq 7); do curl -s -o /dev/null -w '%{http_code} ' localhost:3001/api/data; done
//! ```
//!
//! The first loop prints five `200`s and then `429`s: the `team-a` key is spent, while another
//! key from the same address still gets through until the address's own limit (10 at once, then
//! 1 a second) is reached. A request without `x-api-key` counts under its address in both
//! limits (`header:x-api-key|ip`): the second loop also stops after five, the tighter of the two.
//! Admitted responses carry `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` and
//! `RateLimit-Policy`, describing the limit closest to denying; a denial is a 429 with
//! `Retry-After`, `Cache-Control: no-store` and a JSON body, and the handler does not run.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use sluice_tower::{MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SystemClock, TokenBucket};

/// The app: `/api` limited per address and per API key, `/health` not limited.
pub fn app() -> Result<Router, Box<dyn std::error::Error>> {
    // The limits live in an in-memory store; each policy has a name the layer refers to.
    let store = MemoryStore::new(
        vec![
            NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(10, 1.0)?.into() },
            NamedPolicy { name: "per-key".into(), policy: TokenBucket::new(5, 0.5)?.into() },
        ],
        MemoryOptions::default(),
        Arc::new(SystemClock::new()),
    );
    let limits = RateLimitLayer::builder(Arc::new(store))
        // Every client address (IPv6 grouped by /56). Keys are written as in a configuration
        // file's limits.
        .limit("per-ip", "ip")
        // Every API key; without the header, the address stands in for it.
        .limit("per-key", "header:x-api-key|ip")
        // The client address is read from axum's `ConnectInfo` (`serve` below); behind a
        // proxy, add `.trusted_proxies(...)`.
        .build()?;

    let api = Router::new()
        .route("/api/data", get(|| async { axum::Json(serde_json::json!({ "data": [1, 2, 3] })) }))
        .route("/api/hello/{name}", get(|Path(name): Path<String>| async move { format!("hello, {name}\n") }))
        .layer(limits);
    Ok(Router::new().route("/health", get(|| async { "ok\n" })).merge(api))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let app = app()?;
    let port: u16 = std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3001);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("axum example listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
