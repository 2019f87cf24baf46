//! What a service shows on the admin listener, and the gateway's answers.

use serde_json::Value;

use super::status::Status;
use crate::gateway::Gateway;
use crate::observe::{Scrape, config_json};

/// A service the admin listener can show: the gateway, the seed service.
pub trait Inspect: Send + Sync + 'static {
    /// The `/metrics` text (OpenMetrics).
    fn metrics_text(&self) -> String;

    /// Whether the store in use can decide, or its failure mode lets the service serve
    /// (`/readyz`), and the store's kind.
    fn readiness(&self) -> (bool, &'static str);

    /// The configuration in force, secrets redacted (`/config`).
    fn config_json(&self) -> Value;

    /// The status page's document (`/status.json`).
    fn status(&self) -> Status;
}

impl Inspect for Gateway {
    fn metrics_text(&self) -> String {
        self.observer().metrics().render(scrape(self))
    }

    fn readiness(&self) -> (bool, &'static str) {
        let loaded = self.config();
        (loaded.store().ready(), loaded.store().kind())
    }

    fn config_json(&self) -> Value {
        config_json(&self.config().config)
    }

    fn status(&self) -> Status {
        let loaded = self.config();
        let decisions = loaded.observed.counts(&loaded.config);
        Status::new("gateway", &scrape(self), self.observer(), decisions, &config_json(&loaded.config))
            .with_upstreams(loaded.upstreams.views())
    }
}

/// What the gateway's store and request count read now.
fn scrape(gateway: &Gateway) -> Scrape {
    let loaded = gateway.config();
    Scrape::of(loaded.store().as_ref(), gateway.in_flight()).with_max_in_flight(loaded.config.server.max_in_flight)
}
