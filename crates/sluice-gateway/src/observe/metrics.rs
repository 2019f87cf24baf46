//! The Prometheus metrics of the gateway: families registered once, rendered on scrape.

use std::sync::atomic::AtomicU64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::{Metric, Registry};
use sluice_store::{KeyStats, StoreError};

use super::histogram::LatencyHistogram;
use super::process::ProcessCollector;

/// `sluice_decisions_total`: one per limit applied to a request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DecisionLabels {
    pub route: String,
    pub policy: String,
    pub algorithm: &'static str,
    pub outcome: &'static str,
}

/// `sluice_requests_total`: one per request that reached the routing step.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub route: String,
    pub outcome: &'static str,
}

/// `sluice_refused_total`: one per request refused before any limit decided it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RefusedLabels {
    pub route: String,
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StoreLabels {
    pub store: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StoreErrorLabels {
    pub store: &'static str,
    pub kind: &'static str,
}

/// `sluice_degraded_total`: requests a failure mode answered.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DegradedLabels {
    pub store: &'static str,
    pub mode: &'static str,
}

/// `sluice_request_body_errors_total`: request bodies cut, by why.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BodyErrorLabels {
    pub reason: &'static str,
}

/// A counter's reason label (`sluice_upstream_tls_errors_total{reason}`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: &'static str,
}

/// A target of a named upstream, and what happened (`sluice_upstream_responses_total`'s class,
/// `sluice_upstream_failures_total`'s kind; empty for `sluice_upstream_ejections_total`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabels {
    /// The upstream's name (`default` for `[upstream]`).
    pub upstream: String,
    /// The target, `host:port`.
    pub target: String,
    /// `2xx`... for responses, `connect`, `timeout`, `broken` for failures.
    pub outcome: &'static str,
}

/// An upstream's name (`sluice_upstream_retries_total`, `sluice_upstream_unavailable_total`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    /// The upstream's name.
    pub upstream: String,
}

/// A target of a named upstream (`sluice_upstream_response_seconds`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamTargetLabels {
    /// The upstream's name (`default` for `[upstream]`).
    pub upstream: String,
    /// The target, `host:port`.
    pub target: String,
}

/// The family of the upstreams' response times, whose histograms reach minutes.
pub type UpstreamLatencies = Family<UpstreamTargetLabels, LatencyHistogram, fn() -> LatencyHistogram>;

/// What the upstreams count, shared by every configuration.
#[derive(Debug, Clone)]
pub struct UpstreamMetrics {
    /// `sluice_upstream_responses_total{upstream,target,outcome}`: response heads by class.
    pub responses: Family<TargetLabels, Counter>,
    /// `sluice_upstream_failures_total{upstream,target,outcome}`: connect, timeout, broken.
    pub failures: Family<TargetLabels, Counter>,
    /// `sluice_upstream_ejections_total{upstream,target,outcome=""}`.
    pub ejections: Family<TargetLabels, Counter>,
    /// `sluice_upstream_retries_total{upstream}`: requests sent again to another target.
    pub retries: Family<UpstreamLabels, Counter>,
    /// `sluice_upstream_unavailable_total{upstream}`: 503s because no target was up.
    pub unavailable: Family<UpstreamLabels, Counter>,
    /// `sluice_upstream_health_checks_total{upstream,target,outcome}`: healthy, unhealthy.
    pub health_checks: Family<TargetLabels, Counter>,
    /// `sluice_upstream_response_seconds{upstream,target}`: from sending a request to its
    /// response head.
    pub latency: UpstreamLatencies,
}

impl Default for UpstreamMetrics {
    fn default() -> Self {
        Self {
            responses: Family::default(),
            failures: Family::default(),
            ejections: Family::default(),
            retries: Family::default(),
            unavailable: Family::default(),
            health_checks: Family::default(),
            latency: Family::new_with_constructor(LatencyHistogram::upstream),
        }
    }
}

/// `sluice_reservations_refused_total`: settlements and refunds refused, by why.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReservationLabels {
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReloadLabels {
    pub result: &'static str,
}

/// `sluice_snapshot_writes_total`: the memory store's snapshot written (`ok`) or not (`failed`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct SnapshotLabels {
    pub result: &'static str,
}

/// Outcomes of `sluice_decisions_total`, in the order of the per-limit counter arrays.
/// `allowed_degraded`: admitted by `fail-open` without a decision (the store could not decide).
pub(crate) const DECISION_OUTCOMES: [&str; 6] =
    ["allowed", "denied", "shadow_denied", "error", "allowed_degraded", "soft_over"];
/// Outcomes of `sluice_requests_total` for a matched route, in the order of its counter array.
pub(crate) const REQUEST_OUTCOMES: [&str; 4] = ["allowed", "denied", "error", "allowed_degraded"];
/// Why a request body was cut (`sluice_request_body_errors_total{reason}`), in the order of
/// [`BodyErrors`]' counters: its framing was broken, the client closed its connection inside it,
/// or no byte came for `body_idle_timeout`.
pub(crate) const BODY_ERROR_REASONS: [&str; 3] = ["malformed", "incomplete", "stalled"];
/// The failure modes that answer for a store (`sluice_degraded_total{mode}`).
pub(crate) const DEGRADED_MODES: [&str; 2] = ["fail-open", "local"];

/// The gateway's metric families. Label sets are resolved into counter handles when a
/// configuration is loaded (see `Observed`), so a request only adds to atomics.
#[derive(Debug)]
pub struct Metrics {
    /// Every family below, for the text exposition.
    registry: Registry,
    /// `sluice_decisions_total`: one per limit decided (route, policy, algorithm, outcome).
    pub(crate) decisions: Family<DecisionLabels, Counter>,
    /// `sluice_requests_total`: one per request (route, outcome).
    pub(crate) requests: Family<RequestLabels, Counter>,
    /// `sluice_decision_duration_seconds`: key building and store, per store kind.
    pub(crate) decision_duration: Family<StoreLabels, LatencyHistogram>,
    /// `sluice_store_latency_seconds`: the store call alone.
    pub(crate) store_latency: Family<StoreLabels, LatencyHistogram>,
    /// `sluice_store_errors_total`, by store and error kind, whatever the failure mode did.
    store_errors: Family<StoreErrorLabels, Counter>,
    /// `sluice_degraded_total`: requests a failure mode answered instead of the store.
    degraded: Family<DegradedLabels, Counter>,
    /// `sluice_shed_total`: requests refused beyond `max_in_flight`.
    pub(crate) shed: Counter,
    /// `sluice_shed_per_client_total`: requests refused beyond `max_in_flight_per_client`.
    pub(crate) shed_per_client: Counter,
    /// `sluice_upgrades_refused_total`: requests asking for a protocol upgrade, answered 501.
    pub(crate) upgrades_refused: Counter,
    /// `sluice_upstream_tls_errors_total`: connections to an `https://` upstream whose TLS
    /// failed, by reason.
    upstream_tls_errors: Family<ReasonLabels, Counter>,
    /// The upstreams' responses, failures, ejections, retries and 503s.
    upstreams: UpstreamMetrics,
    /// `sluice_request_body_errors_total`: request bodies cut, by reason.
    body_errors: Family<BodyErrorLabels, Counter>,
    /// `sluice_refused_total`: requests refused because readers could disagree on them, by
    /// route and reason.
    pub(crate) refused: Family<RefusedLabels, Counter>,
    /// `sluice_config_reloads_total`, applied or refused.
    reloads: Family<ReloadLabels, Counter>,
    /// `sluice_reservations_refused_total`: the decision API's settlements and refunds refused.
    reservations_refused: Family<ReservationLabels, Counter>,
    /// `sluice_decision_log_dropped_total`: lines the denial cap refused.
    pub(crate) log_dropped: Counter,
    /// `sluice_snapshot_writes_total` and `sluice_snapshot_last_success_timestamp_seconds`:
    /// absent unless a snapshot is written ([`Metrics::snapshot_writes`]).
    snapshot_writes: SnapshotWrites,
    /// Store errors so far, every kind (the status page's total).
    errors_seen: Counter,
    /// Failure-mode verdicts so far, every mode (the status page's total).
    degraded_seen: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family (and the process collector) in a new registry.
    pub fn new() -> Self {
        let m = Self {
            registry: Registry::default(),
            decisions: Family::default(),
            requests: Family::default(),
            decision_duration: Family::default(),
            store_latency: Family::default(),
            store_errors: Family::default(),
            degraded: Family::default(),
            shed: Counter::default(),
            shed_per_client: Counter::default(),
            upgrades_refused: Counter::default(),
            upstream_tls_errors: Family::default(),
            upstreams: UpstreamMetrics::default(),
            body_errors: Family::default(),
            refused: Family::default(),
            reloads: Family::default(),
            reservations_refused: Family::default(),
            log_dropped: Counter::default(),
            snapshot_writes: SnapshotWrites::default(),
            errors_seen: Counter::default(),
            degraded_seen: Counter::default(),
        };
        let mut registry = Registry::default();
        register(
            &mut registry,
            "sluice_decisions",
            "Decisions per limit applied to a request: allowed, denied, shadow_denied (a shadow policy \
             would have denied), error (the store could not decide), allowed_degraded (admitted by \
             fail-open: the store could not decide), soft_over (a soft policy is over its limit: \
             passed on, marked).",
            m.decisions.clone(),
        );
        register(
            &mut registry,
            "sluice_requests",
            "Requests by route (configured name, or unmatched) and outcome.",
            m.requests.clone(),
        );
        register(
            &mut registry,
            "sluice_decision_duration_seconds",
            "Time to decide a request: building its keys and asking the store.",
            m.decision_duration.clone(),
        );
        register(
            &mut registry,
            "sluice_store_latency_seconds",
            "Time the store took to answer a request's checks.",
            m.store_latency.clone(),
        );
        register(
            &mut registry,
            "sluice_store_errors",
            "Requests the store could not decide, by error kind, whatever its failure mode then did.",
            m.store_errors.clone(),
        );
        register(
            &mut registry,
            "sluice_degraded",
            "Requests the store's failure mode answered instead of the store: fail-open (admitted \
             unchecked) or local (decided by the in-process fallback).",
            m.degraded.clone(),
        );
        register(
            &mut registry,
            "sluice_shed",
            "Requests shed with 503 because max_in_flight was reached.",
            m.shed.clone(),
        );
        register(
            &mut registry,
            "sluice_shed_per_client",
            "Requests answered 429 because their client already had max_in_flight_per_client requests in flight.",
            m.shed_per_client.clone(),
        );
        register(
            &mut registry,
            "sluice_upgrades_refused",
            "Requests answered 501 because they asked to switch protocols in a way their route does not relay \
             (a WebSocket is relayed only where the route says upgrades = [\"websocket\"]).",
            m.upgrades_refused.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_tls_errors",
            "Connections to an https:// upstream whose TLS failed (the request answered 502), by reason: \
             unknown_issuer, expired, not_valid_for_name, bad_certificate, no_http2, handshake.",
            m.upstream_tls_errors.clone(),
        );
        let u = &m.upstreams;
        register(
            &mut registry,
            "sluice_upstream_responses",
            "Response heads from each target of each upstream, by class (outcome: 2xx, 3xx, 4xx, 5xx).",
            u.responses.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_response_seconds",
            "Time from sending a request to a target to its response head (responses only, not failures).",
            u.latency.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_failures",
            "Requests to a target that failed, by kind (outcome: connect — nothing sent; timeout — no response \
             head in time; broken — the exchange broke).",
            u.failures.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_ejections",
            "Times a target was taken out of its upstream's rotation after eject_after failures in a row.",
            u.ejections.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_retries",
            "Requests sent again to another target after the first one could not be connected to (safe methods \
             without a body only).",
            u.retries.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_health_checks",
            "Active health checks of each target (outcome: healthy — a 2xx or 3xx in time; unhealthy).",
            u.health_checks.clone(),
        );
        register(
            &mut registry,
            "sluice_upstream_unavailable",
            "Requests answered 503 because every target of their upstream was ejected.",
            u.unavailable.clone(),
        );
        register(
            &mut registry,
            "sluice_refused",
            "Requests refused before any limit decided them, because the application behind sluice could read \
             them another way, by route (unmatched for a path) and reason: path, header, token, content_type, \
             query, body.",
            m.refused.clone(),
        );
        register(
            &mut registry,
            "sluice_reservations_refused",
            "Settlements and refunds the decision API refused: unknown (no open reservation of that id \
             for that caller: never made, someone else's, used, expired), too_large (a refund above \
             the charge).",
            m.reservations_refused.clone(),
        );
        register(
            &mut registry,
            "sluice_request_body_errors",
            "Request bodies cut by the client's fault, by reason: malformed (broken framing: 400), \
             incomplete (the client closed its connection inside it) or stalled (no byte for \
             body_idle_timeout: 408). Never counted as upstream errors.",
            m.body_errors.clone(),
        );
        register(
            &mut registry,
            "sluice_config_reloads",
            "Configuration reloads, applied (ok) or refused (the running configuration kept serving).",
            m.reloads.clone(),
        );
        register(
            &mut registry,
            "sluice_decision_log_dropped",
            "Decision log lines (denials, shadow denials, store errors) not written because \
             decision_log.denials_per_second was reached.",
            m.log_dropped.clone(),
        );
        register(
            &mut registry,
            "sluice_snapshot_writes",
            "Writes of the memory store's snapshot (store.snapshot): ok, or failed (the state written last is \
             what a restart would read).",
            m.snapshot_writes.writes.clone(),
        );
        register(
            &mut registry,
            "sluice_snapshot_last_success_timestamp_seconds",
            "When the memory store's snapshot was last written, in seconds since the Unix epoch.",
            m.snapshot_writes.last_success.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));
        // Both outcomes exist from the start, so `increase()` works on the first reload.
        for result in ["ok", "refused"] {
            let _ = m.reloads.get_or_create(&ReloadLabels { result });
        }
        Self { registry, ..m }
    }

    /// The counters of request bodies cut, one per reason (created at zero).
    /// The upstreams' families, for the upstreams to count into.
    pub(crate) fn upstreams(&self) -> &UpstreamMetrics {
        &self.upstreams
    }

    /// The family of `sluice_upstream_tls_errors_total`, for an upstream to count into.
    pub(crate) fn upstream_tls_errors(&self) -> Family<ReasonLabels, Counter> {
        self.upstream_tls_errors.clone()
    }

    pub(crate) fn body_errors(&self) -> BodyErrors {
        BodyErrors(BODY_ERROR_REASONS.map(|reason| self.body_errors.get_or_create_owned(&BodyErrorLabels { reason })))
    }

    /// Counts a settlement or refund of the decision API refused for `reason`.
    pub fn reservation_refused(&self, reason: &'static str) {
        self.reservations_refused.get_or_create(&ReservationLabels { reason }).inc();
    }

    /// Counts a request the store could not decide.
    pub(crate) fn store_error(&self, store: &'static str, e: &StoreError) {
        self.store_errors.get_or_create(&StoreErrorLabels { store, kind: error_kind(e) }).inc();
        self.errors_seen.inc();
    }

    /// Counts a request the failure mode `mode` answered.
    pub(crate) fn degraded(&self, store: &'static str, mode: &'static str) {
        self.degraded.get_or_create(&DegradedLabels { store, mode }).inc();
        self.degraded_seen.inc();
    }

    /// Store errors counted so far, every store and kind.
    pub fn store_errors_seen(&self) -> u64 {
        self.errors_seen.get()
    }

    /// Requests a failure mode answered so far, every store and mode.
    pub fn degraded_seen(&self) -> u64 {
        self.degraded_seen.get()
    }

    /// Creates, at zero, the error series a store of kind `store` can produce, so alerts on
    /// `increase()` see the first error: `timeout` and `unavailable` and the failure modes for
    /// Redis, `full` for the memory store.
    pub(crate) fn expect_store(&self, store: &'static str) {
        let kinds: &[&'static str] = match store {
            "redis" => &["timeout", "unavailable"],
            "memory" => &["full"],
            _ => &[],
        };
        for &kind in kinds {
            let _ = self.store_errors.get_or_create(&StoreErrorLabels { store, kind });
        }
        if store == "redis" {
            for mode in DEGRADED_MODES {
                let _ = self.degraded.get_or_create(&DegradedLabels { store, mode });
            }
        }
    }

    /// What counts the snapshot's writes, its series created (`ok` and `failed` at zero, so an
    /// alert on `increase()` sees the first failure). Called by the process that writes it.
    pub fn snapshot_writes(&self) -> SnapshotWrites {
        for result in ["ok", "failed"] {
            let _ = self.snapshot_writes.writes.get_or_create(&SnapshotLabels { result });
        }
        self.snapshot_writes.clone()
    }

    /// Counts a reload, applied or refused.
    pub(crate) fn reload(&self, ok: bool) {
        self.reloads.get_or_create(&ReloadLabels { result: if ok { "ok" } else { "refused" } }).inc();
    }

    /// The text exposition (OpenMetrics): the registered families, then what `scrape` reads now.
    pub fn render(&self, scrape: Scrape) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let mut now = Registry::default();
        now.register_collector(Box::new(scrape));
        // Writing to a String cannot fail; the encoders only fail on a failing writer.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &now);
        let _ = encode_eof(&mut out);
        out
    }
}

/// The counters of request bodies cut (`sluice_request_body_errors_total`), resolved once.
#[derive(Debug, Clone)]
pub struct BodyErrors([Counter; 3]);

impl BodyErrors {
    /// A body whose framing was broken (a bad chunk-size line, say).
    pub fn malformed(&self) {
        self.0[0].inc();
    }

    /// A body the client stopped sending by closing its connection.
    pub fn incomplete(&self) {
        self.0[1].inc();
    }

    /// A body that paused longer than `body_idle_timeout`.
    pub fn stalled(&self) {
        self.0[2].inc();
    }
}

/// Counts the memory store's snapshot writes (see [`Metrics::snapshot_writes`]). Cheap to clone:
/// clones count into the same series.
#[derive(Debug, Clone, Default)]
pub struct SnapshotWrites {
    /// `sluice_snapshot_writes_total{result}`.
    writes: Family<SnapshotLabels, Counter>,
    /// `sluice_snapshot_last_success_timestamp_seconds{store="memory"}`.
    last_success: Family<StoreLabels, Gauge<f64, AtomicU64>>,
}

impl SnapshotWrites {
    /// Counts a write: written at `unix_seconds`, or failed.
    pub fn record(&self, written: bool, unix_seconds: f64) {
        let result = if written { "ok" } else { "failed" };
        self.writes.get_or_create(&SnapshotLabels { result }).inc();
        if written {
            self.last_success.get_or_create(&StoreLabels { store: "memory" }).set(unix_seconds);
        }
    }
}

/// Registers `metric` as `name` in `registry`. prometheus-client ends every help text with a
/// period of its own: `help` is written as a sentence here, and its final period left to it.
fn register(registry: &mut Registry, name: &str, help: &str, metric: impl Metric) {
    registry.register(name, help.trim_end_matches('.'), metric);
}

/// A short, bounded name for a store error: the `kind` label of `sluice_store_errors_total`.
pub fn error_kind(e: &StoreError) -> &'static str {
    e.kind()
}

/// What is read at scrape time rather than counted per request: requests in flight and what the
/// store in use reports about itself.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// Requests being handled.
    pub in_flight: usize,
    /// The bound on requests in flight (`server.max_in_flight`), if there is one.
    pub max_in_flight: Option<usize>,
    /// The store's kind (`memory`, `redis`).
    pub store: &'static str,
    /// Whether the store can serve (see `Store::ready`).
    pub ready: bool,
    /// Keys and evictions per policy (memory store).
    pub keys: Vec<KeyStats>,
    /// Whether the breaker is open (Redis store).
    pub breaker_open: Option<bool>,
    /// Requests denied from the local deny cache (Redis store).
    pub deny_cache_hits: Option<u64>,
    /// What quota leases did (`lease = "auto"` on a Redis store).
    pub leases: Option<sluice_store::LeaseStats>,
}

impl Scrape {
    /// Reads `store` now.
    pub fn of(store: &dyn sluice_store::Store, in_flight: usize) -> Self {
        Self {
            in_flight,
            max_in_flight: None,
            store: store.kind(),
            ready: store.ready(),
            keys: store.key_stats(),
            breaker_open: store.breaker_open(),
            deny_cache_hits: store.deny_cache_hits(),
            leases: store.lease_stats(),
        }
    }

    /// The same, with the bound on requests in flight (`sluice_max_in_flight`).
    pub fn with_max_in_flight(self, max: usize) -> Self {
        Self { max_in_flight: Some(max), ..self }
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let g = ConstGauge::new(self.in_flight as i64);
        g.encode(encoder.encode_descriptor("sluice_in_flight", "Requests being handled.", None, g.metric_type())?)?;
        if let Some(max) = self.max_in_flight {
            let g = ConstGauge::new(i64::try_from(max).unwrap_or(i64::MAX));
            g.encode(encoder.encode_descriptor(
                "sluice_max_in_flight",
                "The bound on requests in flight (server.max_in_flight): beyond it, requests are shed with 503.",
                None,
                g.metric_type(),
            )?)?;
        }

        let store = [("store", self.store)];
        let mut e = encoder.encode_descriptor(
            "sluice_store_ready",
            "1 when the store can decide or its failure mode allows serving (/readyz answers 200).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::from(self.ready)).encode(e.encode_family(&store)?)?;

        if !self.keys.is_empty() {
            let mut e = encoder.encode_descriptor(
                "sluice_keys",
                "Keys held per policy (memory store).",
                None,
                MetricType::Gauge,
            )?;
            for k in &self.keys {
                ConstGauge::new(k.keys as i64).encode(e.encode_family(&[("policy", k.policy.as_str())])?)?;
            }
            let mut e = encoder.encode_descriptor(
                "sluice_evictions",
                "Keys evicted per policy (memory store): fresh (no decision changed) or lru (a live key \
                 dropped to make room: raise store.max_keys).",
                None,
                MetricType::Counter,
            )?;
            for k in &self.keys {
                for (reason, n) in [("fresh", k.evicted_fresh), ("lru", k.evicted_lru)] {
                    ConstCounter::new(n)
                        .encode(e.encode_family(&[("policy", k.policy.as_str()), ("reason", reason)])?)?;
                }
            }
        }
        if let Some(open) = self.breaker_open {
            let mut e = encoder.encode_descriptor(
                "sluice_breaker_open",
                "1 while the store's circuit breaker is open: decisions take the failure mode without asking it.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(i64::from(open)).encode(e.encode_family(&store)?)?;
        }
        if let Some(hits) = self.deny_cache_hits {
            let mut e = encoder.encode_descriptor(
                "sluice_deny_cache_hits",
                "Requests denied from the local deny cache without a store round trip.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(hits).encode(e.encode_family(&store)?)?;
        }
        if let Some(l) = self.leases {
            let mut e = encoder.encode_descriptor(
                "sluice_lease_admissions",
                "Requests admitted from quota leases, without a store round trip.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(l.admitted_locally).encode(e.encode_family(&store)?)?;
            let mut e = encoder.encode_descriptor(
                "sluice_lease_store_calls",
                "Calls a store with quota leases made to the shared store: decisions, leases taken, units given back.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(l.store_calls).encode(e.encode_family(&store)?)?;
            let mut e = encoder.encode_descriptor(
                "sluice_lease_units_held",
                "Units held unspent by this instance's live quota leases: counted by the store, admitted by no one yet.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(i64::try_from(l.held).unwrap_or(i64::MAX)).encode(e.encode_family(&store)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_help_text_is_one_sentence_with_one_period() {
        let scrape = Scrape {
            in_flight: 0,
            max_in_flight: Some(1),
            store: "memory",
            ready: true,
            keys: vec![KeyStats { policy: "p".into(), keys: 1, evicted_fresh: 0, evicted_lru: 0 }],
            breaker_open: Some(false),
            deny_cache_hits: Some(0),
            leases: Some(sluice_store::LeaseStats::default()),
        };
        let text = Metrics::new().render(scrape);
        let helps: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP ")).collect();
        assert!(helps.len() >= 10, "{text}");
        for help in helps {
            assert!(help.ends_with('.') && !help.ends_with(".."), "{help}");
        }
    }
}
