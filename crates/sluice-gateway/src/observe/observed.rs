//! Metric handles and the decision log of one loaded configuration, resolved once.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use sluice_config::Config;
use sluice_core::{Decision, ceil_millis};
use sluice_http::enforce::{Outcome, PolicyInfo};
use sluice_http::keys::KeyKind;
use sluice_http::pipeline::{Ruling, Timing};
use sluice_store::{Check, StoreError};

use super::Observer;
use super::decision_log::{DecisionLine, DecisionLog};
use super::histogram::LatencyHistogram;
use super::metrics::{DECISION_OUTCOMES, DecisionLabels, REQUEST_OUTCOMES, RequestLabels, StoreLabels, error_kind};

/// The `route` label (and log field) of decisions made through the decision API; it is also the
/// API's path.
pub const CHECK_API_ROUTE: &str = "/v1/check";
/// The `route` label of requests that matched no configured route.
pub const UNMATCHED_ROUTE: &str = "unmatched";

const ALLOWED: usize = 0;
const DENIED: usize = 1;
const SHADOW_DENIED: usize = 2;
const ERROR: usize = 3;

/// The counters of one route: per limit (in the route's order) one per decision outcome, and
/// one per request outcome.
#[derive(Debug, Clone)]
struct RouteHandles {
    /// Per limit: allowed, denied, shadow-denied, error.
    limits: Vec<[Counter; 4]>,
    /// Per request: allowed, denied, error.
    requests: [Counter; 3],
}

/// Everything a request needs to be counted and logged under one configuration: counter and
/// histogram handles resolved from their label sets when the configuration was loaded, and the
/// decision log policy of its `[decision_log]`.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The families and log sources, shared across reloads.
    observer: Arc<Observer>,
    /// This configuration's `[decision_log]` policy.
    log: Arc<DecisionLog>,
    /// Per configured route (same order), its counters.
    routes: Vec<RouteHandles>,
    /// `/v1/check`, one entry per policy.
    api: RouteHandles,
    /// Requests that matched no route.
    unmatched: Counter,
    /// Decision latency, key building included.
    decision_duration: LatencyHistogram,
    /// Store latency.
    store_latency: LatencyHistogram,
    /// The store's kind, for labels and log lines.
    store: &'static str,
}

/// A request's decision line, if it gets one, waiting for the response status.
#[derive(Debug)]
#[must_use = "a pending line is written by `emit`"]
pub struct PendingLine<'a>(Option<DecisionLine<'a>>);

impl PendingLine<'_> {
    /// Writes the line, if any, with the response's `status` (0: the connection was dropped).
    pub fn emit(self, status: u16) {
        if let Some(mut line) = self.0 {
            line.status = status;
            line.emit();
        }
    }
}

impl Observed {
    /// Resolves the label sets of `config` (its routes and policies) on a store of kind `store`.
    pub fn resolve(observer: &Arc<Observer>, config: &Config, store: &'static str) -> Self {
        let m = observer.metrics();
        let handles = |route: &str, policies: &mut dyn Iterator<Item = usize>| RouteHandles {
            limits: policies
                .map(|p| {
                    let policy = &config.policies[p];
                    DECISION_OUTCOMES.map(|outcome| {
                        m.decisions.get_or_create_owned(&DecisionLabels {
                            route: route.to_owned(),
                            policy: policy.name.clone(),
                            algorithm: policy.policy.name(),
                            outcome,
                        })
                    })
                })
                .collect(),
            requests: REQUEST_OUTCOMES
                .map(|outcome| m.requests.get_or_create_owned(&RequestLabels { route: route.to_owned(), outcome })),
        };
        let routes = config.routes.iter().map(|r| handles(&r.name, &mut r.limits.iter().map(|l| l.policy))).collect();
        let api = handles(CHECK_API_ROUTE, &mut (0..config.policies.len()));
        let unmatched =
            m.requests.get_or_create_owned(&RequestLabels { route: UNMATCHED_ROUTE.into(), outcome: "unlimited" });
        let labels = StoreLabels { store };
        Self {
            log: Arc::new(observer.decision_log(&config.decision_log)),
            observer: Arc::clone(observer),
            routes,
            api,
            unmatched,
            decision_duration: m.decision_duration.get_or_create_owned(&labels),
            store_latency: m.store_latency.get_or_create_owned(&labels),
            store,
        }
    }

    /// The observer these handles report to.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    /// The decision log policy of this configuration.
    pub fn log(&self) -> &DecisionLog {
        &self.log
    }

    /// Counts a request that matched no route.
    pub fn unmatched(&self) {
        self.unmatched.inc();
    }

    /// Counts a request shed for overload.
    pub fn shed(&self) {
        self.observer.metrics().shed.inc();
    }

    /// Counts a decided request of route `route` (`None`: the decision API) named `route_name`,
    /// and picks its decision line, written by [`PendingLine::emit`] once the status is known.
    pub fn record<'a>(&self, route: Option<usize>, route_name: &'a str, ruling: &'a Ruling<'_>) -> PendingLine<'a> {
        let policies = ruling.policies();
        match &ruling.outcome {
            Ok(outcome) => {
                self.decided(route, &ruling.checks, &ruling.positions, policies, outcome, ruling.timing);
                PendingLine(self.pick(outcome).map(|(i, verdict)| {
                    let kind = ruling.kinds.get(i).copied().unwrap_or("absent");
                    self.line(
                        route_name,
                        policies,
                        &ruling.checks[i],
                        &outcome.decisions[i],
                        verdict,
                        kind,
                        ruling.timing,
                    )
                }))
            }
            Err(e) => {
                let kind = ruling.kinds.first().copied().unwrap_or("absent");
                let (checks, positions) = (&ruling.checks, &ruling.positions);
                PendingLine(self.failed(route, route_name, checks, positions, policies, e, ruling.timing, kind))
            }
        }
    }

    fn handles(&self, route: Option<usize>) -> Option<&RouteHandles> {
        match route {
            Some(i) => self.routes.get(i),
            None => Some(&self.api),
        }
    }

    /// Counts the decision of route `route` (`None`: the decision API, whose limits are
    /// indexed by policy) for `checks` (each at `positions[i]` among the route's limits): every
    /// limit's own decision, the request's outcome, the durations. `policies` tells shadow
    /// policies apart.
    #[allow(clippy::too_many_arguments)]
    pub fn decided(
        &self,
        route: Option<usize>,
        checks: &[Check],
        positions: &[usize],
        policies: &[PolicyInfo],
        outcome: &Outcome,
        timing: Timing,
    ) {
        self.times(timing);
        self.observer.store_ok();
        let Some(h) = self.handles(route) else { return };
        for (i, (check, d)) in checks.iter().zip(&outcome.decisions).enumerate() {
            if outcome.not_evaluated.contains(&i) {
                continue;
            }
            let slot = if route.is_some() { positions.get(i).copied().unwrap_or(i) } else { check.policy };
            let shadow = policies.get(check.policy).is_some_and(|p| p.shadow);
            let which = match (d.allowed, shadow) {
                (true, _) => ALLOWED,
                (false, false) => DENIED,
                (false, true) => SHADOW_DENIED,
            };
            if let Some(c) = h.limits.get(slot) {
                c[which].inc();
            }
        }
        h.requests[if outcome.allowed { ALLOWED } else { DENIED }].inc();
    }

    /// Counts a request its store could not decide, logs the failure as a service event when
    /// the store starts failing, and gives its decision line when under the denial cap.
    #[allow(clippy::too_many_arguments)]
    fn failed<'a>(
        &self,
        route: Option<usize>,
        route_name: &'a str,
        checks: &[Check],
        positions: &[usize],
        policies: &'a [PolicyInfo],
        error: &StoreError,
        timing: Timing,
        key_type: KeyKind,
    ) -> Option<DecisionLine<'a>> {
        self.times(timing);
        self.observer.metrics().store_error(self.store, error);
        self.observer.store_failed(self.store, error);
        if let Some(h) = self.handles(route) {
            for (i, check) in checks.iter().enumerate() {
                let slot = if route.is_some() { positions.get(i).copied().unwrap_or(i) } else { check.policy };
                if let Some(c) = h.limits.get(slot) {
                    c[ERROR].inc();
                }
            }
            h.requests[2].inc();
        }
        let first = checks.first()?;
        if !self.log.admit_denial() {
            return None;
        }
        let info = policies.get(first.policy);
        Some(DecisionLine {
            route: route_name,
            policy: info.map_or("", |p| p.name.as_str()),
            algorithm: info.map_or("", |p| p.policy.name()),
            key_type,
            key: first.key,
            decision: "error",
            limit: info.map_or(0, |p| p.policy.limit()),
            remaining: 0,
            retry_after_ms: 0,
            cost: first.cost,
            store: self.store,
            store_latency_us: timing.store_ns / 1_000,
            status: 0,
            shadow: info.is_some_and(|p| p.shadow),
            error: Some(error_kind(error)),
        })
    }

    fn times(&self, timing: Timing) {
        self.decision_duration.observe_nanos(timing.decision_ns);
        self.store_latency.observe_nanos(timing.store_ns);
    }

    /// Which check of a decided request gets a log line, if any: the limit that denied (under
    /// the denial cap), else a shadow limit that would have denied (under the cap), else the
    /// limit closest to denying (sampled). The sampling draw and the cap are taken here.
    pub fn pick(&self, outcome: &Outcome) -> Option<(usize, &'static str)> {
        if !outcome.allowed {
            let i = outcome.describe?;
            return self.log.admit_denial().then_some((i, "denied"));
        }
        if let Some(&i) = outcome.shadow_denied.first() {
            return self.log.admit_denial().then_some((i, "shadow_denied"));
        }
        if outcome.decisions.is_empty() || !self.log.sample_admitted() {
            return None;
        }
        Some((outcome.describe.unwrap_or(0), "allowed"))
    }

    /// The line for check `i` of a decided request (see [`Observed::pick`]), its status still 0.
    #[allow(clippy::too_many_arguments)]
    fn line<'a>(
        &self,
        route: &'a str,
        policies: &'a [PolicyInfo],
        check: &Check,
        decision: &Decision,
        verdict: &'static str,
        key_type: KeyKind,
        timing: Timing,
    ) -> DecisionLine<'a> {
        let info = policies.get(check.policy);
        DecisionLine {
            route,
            policy: info.map_or("", |p| p.name.as_str()),
            algorithm: info.map_or("", |p| p.policy.name()),
            key_type,
            key: check.key,
            decision: verdict,
            limit: decision.limit,
            remaining: decision.remaining,
            retry_after_ms: if decision.allowed { 0 } else { ceil_millis(decision.retry_after) },
            cost: check.cost,
            store: self.store,
            store_latency_us: timing.store_ns / 1_000,
            status: 0,
            shadow: info.is_some_and(|p| p.shadow),
            error: None,
        }
    }
}
