//! Service events: start, stop, what a reload read (reloads and store failures are logged by the
//! `Observer`).

use std::net::SocketAddr;

use sluice_config::{Config, StoreConfig};

/// The tracing target of service events.
pub const TARGET: &str = sluice_http::store_health::EVENT_TARGET;

/// What a reload read again: named in its `reload` event (`of`), counted in the same
/// `sluice_config_reloads_total` family whatever it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// The configuration file (SIGHUP).
    Config,
    /// The rate-limit service's descriptor directory (`[rls] descriptors`: SIGHUP, or a changed
    /// file the watcher saw).
    Descriptors,
}

impl Reload {
    /// `config` or `rls_descriptors`: the event's `of` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Reload::Config => "config",
            Reload::Descriptors => "rls_descriptors",
        }
    }

    /// What the event's message calls it.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Reload::Config => "configuration",
            Reload::Descriptors => "rate-limit descriptors",
        }
    }
}

/// Logs the start of the gateway: where it listens, the admin listener, the store, the size of
/// the configuration read from `source` (a file name). The message reads
/// `sluice gateway listening on http://ADDR (config SOURCE)` (`https://` with `[server.tls]`);
/// with no gateway listener (`listen` is `None`: the file configures only the rate-limit
/// service), `sluice started without a gateway listener (config SOURCE)` and no `listen` field.
pub fn started(config: &Config, listen: Option<SocketAddr>, admin: Option<SocketAddr>, source: &str) {
    let store = match &config.store {
        StoreConfig::Memory { .. } => "memory",
        StoreConfig::Redis { .. } => "redis",
    };
    let scheme = if config.server.tls.is_some() { "https" } else { "http" };
    let Some(listen) = listen else {
        tracing::info!(
            target: TARGET,
            event = "start",
            admin = admin.map(|a| a.to_string()),
            store,
            version = env!("CARGO_PKG_VERSION"),
            "sluice started without a gateway listener (config {source})"
        );
        return;
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
        "sluice gateway listening on {scheme}://{listen} (config {source})"
    );
}

/// Logs the end of the gateway (after draining).
pub fn stopped() {
    tracing::info!(target: TARGET, event = "stop", "sluice stopped");
}
