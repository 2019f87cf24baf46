//! Service events: start, stop (reloads and store failures are logged by the `Observer`).

use std::net::SocketAddr;

use sluice_config::{Config, StoreConfig};

/// The tracing target of service events.
pub const TARGET: &str = "sluice::event";

/// Logs the start of the gateway: where it listens, the admin listener, the store, the size of
/// the configuration read from `source` (a file name). The message reads
/// `sluice gateway listening on http://ADDR (config SOURCE)`.
pub fn started(config: &Config, listen: SocketAddr, admin: Option<SocketAddr>, source: &str) {
    let store = match &config.store {
        StoreConfig::Memory { .. } => "memory",
        StoreConfig::Redis { .. } => "redis",
    };
    tracing::info!(
        target: TARGET,
        event = "start",
        listen = %listen,
        admin = admin.map(|a| a.to_string()),
        store,
        routes = config.routes.len(),
        policies = config.policies.len(),
        upstream = config.upstream.as_ref().map(|u| u.url.as_str()),
        version = env!("CARGO_PKG_VERSION"),
        "sluice gateway listening on http://{listen} (config {source})"
    );
}

/// Logs the end of the gateway (after draining).
pub fn stopped() {
    tracing::info!(target: TARGET, event = "stop", "sluice stopped");
}
