//! Counters per domain and descriptor, in Prometheus text format.
//!
//! Label values are the domain (configured domains only; `(unknown)` otherwise) and the
//! descriptor's configured path (`key_value.key`), or `(none)` when nothing matched: bounded by
//! the files. `detailed_metric` and `value_to_metric` opt in to request values, as in
//! envoyproxy/ratelimit.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::descriptors::Descriptors;

/// What happened to a request or a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Result {
    /// Within its limit.
    Ok,
    /// Over its limit.
    OverLimit,
    /// Over its limit, answered OK (`shadow_mode`).
    ShadowOverLimit,
    /// `unlimited`.
    Unlimited,
    /// No limit applied (nothing matched, or replaced).
    NoLimit,
    /// The request failed (bad request, store down).
    Error,
}

impl Result {
    fn name(self) -> &'static str {
        match self {
            Result::Ok => "ok",
            Result::OverLimit => "over_limit",
            Result::ShadowOverLimit => "shadow_over_limit",
            Result::Unlimited => "unlimited",
            Result::NoLimit => "no_limit",
            Result::Error => "error",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DescriptorLabels {
    domain: String,
    descriptor: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HitLabels {
    domain: String,
    descriptor: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// The service's metric families.
pub(crate) struct Metrics {
    /// Every family below.
    registry: Registry,
    /// `sluice_rls_requests_total{result}`: one per `ShouldRateLimit`.
    requests: Family<ResultLabels, Counter>,
    /// `sluice_rls_descriptors_total{domain,descriptor,result}`: one per request descriptor.
    descriptors: Family<DescriptorLabels, Counter>,
    /// `sluice_rls_hits_total{domain,descriptor}`: the hits (`hits_addend`) asked for.
    hits: Family<HitLabels, Counter>,
    /// `sluice_rls_config_loads_total{result}`: loads and reloads of the descriptor directory.
    reloads: Family<ResultLabels, Counter>,
    /// `sluice_rls_domains`: domains loaded.
    domains: Gauge,
    /// `sluice_rls_limits`: limits loaded.
    limits: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::default();
        let descriptors = Family::default();
        let hits = Family::default();
        let reloads = Family::default();
        let domains = Gauge::default();
        let limits = Gauge::default();
        registry.register("sluice_rls_requests", "ShouldRateLimit requests by result", requests.clone());
        registry.register(
            "sluice_rls_descriptors",
            "Request descriptors by domain, descriptor and result",
            descriptors.clone(),
        );
        registry.register("sluice_rls_hits", "Hits asked for (hits_addend) by domain and descriptor", hits.clone());
        registry.register("sluice_rls_config_loads", "Loads of the descriptor directory by result", reloads.clone());
        registry.register("sluice_rls_domains", "Domains loaded", domains.clone());
        registry.register("sluice_rls_limits", "Limits loaded", limits.clone());
        Self { registry, requests, descriptors, hits, reloads, domains, limits }
    }

    pub fn request(&self, result: Result) {
        self.requests.get_or_create(&ResultLabels { result: result.name() }).inc();
    }

    pub fn descriptor(&self, (domain, descriptor): &(String, String), result: Result, hits: u64) {
        let labels = DescriptorLabels { domain: domain.clone(), descriptor: descriptor.clone(), result: result.name() };
        self.descriptors.get_or_create(&labels).inc();
        if hits > 0 {
            self.hits.get_or_create(&HitLabels { domain: labels.domain, descriptor: labels.descriptor }).inc_by(hits);
        }
    }

    pub fn reloaded(&self, ok: bool) {
        self.reloads.get_or_create(&ResultLabels { result: if ok { "ok" } else { "refused" } }).inc();
    }

    pub fn loaded(&self, d: &Descriptors) {
        self.domains.set(i64::try_from(d.domains.len()).unwrap_or(i64::MAX));
        self.limits.set(i64::try_from(d.limits.len()).unwrap_or(i64::MAX));
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
