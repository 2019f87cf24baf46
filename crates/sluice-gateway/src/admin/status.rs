//! The status page's document: live counts per route and policy, the most denied keys, the
//! store's health, the routes and policies in force (never a secret).

use serde::Serialize;
use serde_json::Value;

use crate::observe::{LimitCounts, Observer, ReloadSeen, Scrape};
use crate::upstreams::UpstreamView;

/// How many of the most denied keys the status page lists.
pub const TOP_DENIED_SHOWN: usize = 10;

/// The store, as the status page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreHealth {
    /// `memory`, `redis`, ...
    pub kind: &'static str,
    /// Whether it can decide, or its failure mode lets the service serve (`/readyz`).
    pub ready: bool,
    /// Failing now: since its last error, or failure-mode verdict, it has not decided again.
    pub failing: bool,
    /// `open` or `closed` for a store with a circuit breaker; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<&'static str>,
    /// Store errors so far (`sluice_store_errors_total`, every kind).
    pub errors: u64,
    /// Requests the failure mode answered so far (`sluice_degraded_total`).
    pub degraded: u64,
}

/// One of the most denied keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeniedView {
    /// The keyed hash of the key, in hex (what decision lines call `key_hash`).
    pub key_hash: String,
    /// The policy that denied it last.
    pub policy: String,
    /// Its denials in the last minute (at most `overcount` too many).
    pub denials: u64,
    /// How many of `denials` may belong to other keys (the summary is bounded).
    pub overcount: u64,
}

/// The document `/status.json` answers with and the status page renders.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    /// `gateway` or `seed`.
    pub service: &'static str,
    /// sluice's version.
    pub version: &'static str,
    /// Seconds since the process started serving.
    pub uptime_seconds: u64,
    /// When it started, in seconds since the Unix epoch.
    pub started_at_unix: u64,
    /// The last reload (of the configuration, or of the rate-limit service's descriptors):
    /// absent before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reload: Option<ReloadSeen>,
    /// Requests being handled.
    pub in_flight: usize,
    /// The bound on requests in flight, if there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// The store's health.
    pub store: StoreHealth,
    /// Per route and policy, the decisions so far (the page turns them into rates).
    pub decisions: Vec<LimitCounts>,
    /// The most denied keys of the last minute (between 30 and 60 seconds).
    pub top_denied: Vec<DeniedView>,
    /// The upstreams: each target's health, load and response times (none for a service that
    /// answers itself).
    pub upstreams: Vec<UpstreamView>,
    /// The routes in force, as `/config` shows them.
    pub routes: Value,
    /// The policies in force, as `/config` shows them but for durations, written the way a
    /// configuration writes them (`"window": "15m"`, not `"window_ms": 900000`).
    pub policies: Value,
}

impl Status {
    /// The status of a `service` whose store reads as `scrape`, counted by `observer`, with the
    /// `routes` and `policies` of `config` (the JSON of `/config`, secrets already redacted).
    pub fn new(
        service: &'static str,
        scrape: &Scrape,
        observer: &Observer,
        decisions: Vec<LimitCounts>,
        config: &Value,
    ) -> Self {
        let m = observer.metrics();
        let store = StoreHealth {
            kind: scrape.store,
            ready: scrape.ready,
            failing: observer.store_failing(),
            breaker: scrape.breaker_open.map(|open| if open { "open" } else { "closed" }),
            errors: m.store_errors_seen(),
            degraded: m.degraded_seen(),
        };
        let top_denied = observer
            .top_denied()
            .top(TOP_DENIED_SHOWN)
            .into_iter()
            .map(|d| DeniedView {
                key_hash: d.key.to_hex(),
                policy: d.policy.into(),
                denials: d.denials,
                overcount: d.overcount,
            })
            .collect();
        let since_epoch = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let started = observer.started();
        Self {
            service,
            version: env!("CARGO_PKG_VERSION"),
            uptime_seconds: started.elapsed().map_or(0, |d| d.as_secs()),
            started_at_unix: since_epoch(started),
            last_reload: observer.last_reload(),
            in_flight: scrape.in_flight,
            max_in_flight: scrape.max_in_flight,
            store,
            decisions,
            top_denied,
            upstreams: Vec::new(),
            routes: config["routes"].clone(),
            policies: durations_written(&config["policies"]),
        }
    }

    /// The same status, showing `upstreams`.
    pub fn with_upstreams(self, upstreams: Vec<UpstreamView>) -> Self {
        Self { upstreams, ..self }
    }
}

/// `value` with every `NAME_ms` field of an object (at any depth) written as `NAME`, a duration
/// as a configuration writes it (`15m`, `1.5s`).
fn durations_written(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(durations_written).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| match (k.strip_suffix("_ms"), v.as_u64()) {
                    (Some(name), Some(ms)) => {
                        (name.to_string(), Value::from(sluice_config::format_duration(ms.saturating_mul(1_000_000))))
                    }
                    _ => (k.clone(), durations_written(v)),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::durations_written;
    use serde_json::json;

    #[test]
    fn durations_are_written_as_a_configuration_writes_them() {
        let policies = json!([
            { "name": "per-account", "limit": 5, "window_ms": 900_000 },
            { "name": "burst", "delay_ms": 1_500, "nested": { "lease_ms": 250 }, "timeout_ms": null },
        ]);
        assert_eq!(
            durations_written(&policies),
            json!([
                { "name": "per-account", "limit": 5, "window": "15m" },
                { "name": "burst", "delay": "1.5s", "nested": { "lease": "250ms" }, "timeout_ms": null },
            ])
        );
    }
}
