//! Observability: Prometheus metrics, sampled decision logs, service events, the admin listener.
//!
//! - [`Observer`] owns the metric families and the sources (clock, random draws) of the decision
//!   log; one per gateway, kept across reloads.
//! - [`Observed`] holds what one loaded configuration needs per request: counter handles
//!   resolved from `(route, policy)` label sets when the configuration is loaded, histogram
//!   handles, and the [`DecisionLog`] policy of its `[decision_log]`. A request only adds to
//!   atomics; a decision log line is built only when it is written.
//! - [`FaceObserver`] counts and logs the same way for faces without a configuration: the tower
//!   layer (through its `Observe` hook) and the seed service.
//! - [`TopDenied`] keeps the most denied keys of the last minute, bounded, for the status page.
//! - [`json_lines`] is the log format of `sluice serve`: one JSON object per line.
//!
//! Label values are bounded: route names from the configuration (or `unmatched`, or
//! `/v1/check`), policy names, algorithm names, fixed outcome words. Never a key, an IP or a
//! raw path.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_gateway::observe::{Observer, Scrape};
//! let observer = Arc::new(Observer::new());
//! observer.reloaded(&Err(sluice_gateway::error::GatewayError::NeedsRestart("server.listen")));
//! let text = observer.metrics().render(Scrape {
//!     in_flight: 0, max_in_flight: Some(100), store: "memory", ready: true, keys: vec![], breaker_open: None,
//!     deny_cache_hits: None, leases: None,
//! });
//! assert!(text.contains("sluice_config_reloads_total{result=\"refused\"} 1"));
//! assert!(text.contains("sluice_max_in_flight 100"));
//! assert!(text.ends_with("# EOF\n"));
//! ```

mod config_view;
mod decision_log;
mod events;
mod exposition;
mod histogram;
mod log_format;
mod metrics;
mod observed;
mod process;
mod top_denied;

use std::sync::Arc;

use sluice_core::{Clock, SystemClock};
use sluice_http::store_health::StoreHealth;
use sluice_store::StoreError;

use crate::error::GatewayError;

pub use config_view::{config_json, policy_json};
pub use decision_log::{DecisionLine, DecisionLog, SampleSource, TARGET as DECISION_TARGET, ThreadRandom};
pub use events::{Reload, TARGET as EVENT_TARGET, started, stopped};
pub use exposition::{Exposition, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, text_format};
pub use histogram::LatencyHistogram;
pub use log_format::json_lines;
pub use metrics::{
    BodyErrors, Metrics, ReasonLabels, Scrape, SnapshotWrites, TargetLabels, UpstreamLabels, UpstreamLatencies,
    UpstreamMetrics, UpstreamTargetLabels, error_kind,
};
pub use observed::{
    CHECK_API_ROUTE, FAIL_OPEN, FaceObserver, FaceRoute, LimitCounts, Observed, PendingLine, UNMATCHED_ROUTE,
};
pub use process::{ProcessCollector, ProcessStats};
pub use top_denied::{DeniedKey, TopDenied};

/// The gateway's metrics and the sources of its decision log, shared across reloads.
pub struct Observer {
    /// The metric families (one registry for the process).
    metrics: Metrics,
    /// Clock of the decision log's denial cap (manual in tests).
    clock: Arc<dyn Clock>,
    /// Draws for sampling admitted decisions (fixed in tests).
    random: Arc<dyn SampleSource>,
    /// Whether the store is failing now: its first failure and its recovery are logged once.
    store_health: StoreHealth,
    /// The most denied keys of the last minute, for the status page.
    top_denied: TopDenied,
    /// When the process started serving (this observer was made), for the status page's uptime.
    started: std::time::SystemTime,
    /// The last reload, for the status page: `None` before the first.
    last_reload: std::sync::Mutex<Option<ReloadSeen>>,
}

/// A reload as the status page shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReloadSeen {
    /// What was read again: `config` or `rls_descriptors`.
    pub of: &'static str,
    /// `ok` (applied) or `refused` (the running one kept serving).
    pub result: &'static str,
    /// When, in seconds since the Unix epoch.
    pub at_unix: u64,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").field("random", &self.random).finish_non_exhaustive()
    }
}

impl Default for Observer {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer {
    /// Metrics in a new registry; the decision log's cap reads the system clock and sampling
    /// draws from the thread-local generator.
    pub fn new() -> Self {
        Self::with_sources(Arc::new(SystemClock::new()), Arc::new(ThreadRandom))
    }

    /// Like [`Observer::new`], with the decision log's clock and random draws given (tests).
    pub fn with_sources(clock: Arc<dyn Clock>, random: Arc<dyn SampleSource>) -> Self {
        let top_denied = TopDenied::new(Arc::clone(&clock));
        Self {
            metrics: Metrics::new(),
            clock,
            random,
            store_health: StoreHealth::default(),
            top_denied,
            started: std::time::SystemTime::now(),
            last_reload: std::sync::Mutex::new(None),
        }
    }

    /// When the process started serving.
    pub fn started(&self) -> std::time::SystemTime {
        self.started
    }

    /// The last reload, if there was one.
    pub fn last_reload(&self) -> Option<ReloadSeen> {
        self.last_reload.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The metric families.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The most denied keys of the last minute.
    pub fn top_denied(&self) -> &TopDenied {
        &self.top_denied
    }

    /// True from a store failure (or a failure mode's verdict) until the store decides again.
    pub fn store_failing(&self) -> bool {
        self.store_health.failing()
    }

    /// A decision log policy for `config`, counting its drops in this observer's metrics.
    pub fn decision_log(&self, config: &sluice_config::DecisionLog) -> DecisionLog {
        DecisionLog::new(config, Arc::clone(&self.clock), Arc::clone(&self.random), self.metrics.log_dropped.clone())
    }

    /// Counts and logs a configuration reload: applied, or refused (the running one kept).
    pub fn reloaded(&self, result: &Result<(), GatewayError>) {
        self.reloaded_of(Reload::Config, result);
    }

    /// Counts and logs a reload of `what`: applied, or refused with its error (the running one
    /// kept). Every reload is counted in `sluice_config_reloads_total` and logged as a `reload`
    /// event, whatever it read again, so one alert on refusals covers every file sluice reads.
    pub fn reloaded_of(&self, what: Reload, result: &Result<(), impl std::fmt::Display>) {
        self.metrics.reload(result.is_ok());
        let of = what.as_str();
        let at_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(ReloadSeen {
            of,
            result: if result.is_ok() { "ok" } else { "refused" },
            at_unix,
            error: result.as_ref().err().map(ToString::to_string),
        });
        match result {
            Ok(()) => {
                tracing::info!(target: events::TARGET, event = "reload", of, result = "ok", "{} reloaded", what.noun())
            }
            Err(e) => tracing::warn!(
                target: events::TARGET,
                event = "reload",
                of,
                result = "refused",
                error = %e,
                "{} reload refused; the running one keeps serving",
                what.noun()
            ),
        }
    }

    /// A store answered: logs recovery once after failures.
    pub(crate) fn store_ok(&self) {
        self.store_health.answered();
    }

    /// A store failed: logs the first failure of a run of them (decision lines, capped, carry
    /// the rest).
    pub(crate) fn store_failed(&self, store: &'static str, e: &StoreError) {
        self.store_health.failed(store, e);
    }
}
