//! Metric handles and the decision log of one loaded configuration, resolved once; and the
//! same counting for faces without a configuration (the tower layer, the seed service).

use std::sync::{Arc, RwLock};

use prometheus_client::metrics::counter::Counter;
use sluice_config::Config;
use sluice_core::{Decision, ceil_millis};
use sluice_http::enforce::{Outcome, PolicyInfo};
use sluice_http::keys::KeyKind;
use sluice_http::lifecycle::{Counted, Observe};
use sluice_http::pipeline::{Refusal, Ruling, Timing};
use sluice_store::{Check, Store, StoreError};

use super::Observer;
use super::decision_log::{DecisionLine, DecisionLog};
use super::histogram::LatencyHistogram;
use super::metrics::{
    BodyErrors, DECISION_OUTCOMES, DecisionLabels, Metrics, REQUEST_OUTCOMES, RefusedLabels, RequestLabels,
    StoreLabels, error_kind,
};

/// The `route` label (and log field) of decisions made through the decision API; it is also the
/// API's path.
pub const CHECK_API_ROUTE: &str = "/v1/check";
/// The `route` label of requests that matched no configured route.
pub const UNMATCHED_ROUTE: &str = "unmatched";
/// The failure mode that admits without a decision ([`sluice_store::Degraded::mode`]).
pub const FAIL_OPEN: &str = "fail-open";

const ALLOWED: usize = 0;
const DENIED: usize = 1;
const SHADOW_DENIED: usize = 2;
const ERROR: usize = 3;
const ALLOWED_DEGRADED: usize = 4;
const SOFT_OVER: usize = 5;
// Positions in a route's request counters ([`REQUEST_OUTCOMES`]).
const REQUEST_ALLOWED: usize = 0;
const REQUEST_DENIED: usize = 1;
const REQUEST_ERROR: usize = 2;
const REQUEST_ALLOWED_DEGRADED: usize = 3;

/// The counters of one route: per limit one per decision outcome, and one per request outcome.
#[derive(Debug, Clone)]
struct RouteHandles {
    /// Per limit (a route's limits in order, or a store's policies): one counter per outcome of
    /// [`DECISION_OUTCOMES`].
    limits: Vec<[Counter; 6]>,
    /// Per request: one counter per outcome of [`REQUEST_OUTCOMES`].
    requests: [Counter; 4],
}

impl RouteHandles {
    /// The counters of `route` for limits under `policies` (name, algorithm), in order.
    fn resolve<'p>(m: &Metrics, route: &str, policies: impl Iterator<Item = (&'p str, &'static str)>) -> Self {
        Self {
            limits: policies
                .map(|(policy, algorithm)| {
                    DECISION_OUTCOMES.map(|outcome| {
                        m.decisions.get_or_create_owned(&DecisionLabels {
                            route: route.to_owned(),
                            policy: policy.to_owned(),
                            algorithm,
                            outcome,
                        })
                    })
                })
                .collect(),
            requests: REQUEST_OUTCOMES
                .map(|outcome| m.requests.get_or_create_owned(&RequestLabels { route: route.to_owned(), outcome })),
        }
    }
}

/// How a decided check finds its counters among a route's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slots {
    /// By the position of its limit among the route's limits (configured routes).
    Positions,
    /// By its policy (the decision API, faces whose limits are a store's policies).
    Policies,
}

/// One limit's counts so far, for the status page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LimitCounts {
    /// The route's name (or `/v1/check`).
    pub route: String,
    /// The policy's name.
    pub policy: String,
    /// Its algorithm.
    pub algorithm: &'static str,
    /// Decisions that admitted.
    pub allowed: u64,
    /// Decisions that denied.
    pub denied: u64,
    /// Shadow decisions that would have denied.
    pub shadow_denied: u64,
    /// Decisions the store could not make.
    pub error: u64,
    /// Admissions by `fail-open`, without a decision.
    pub allowed_degraded: u64,
    /// Soft decisions over the limit: passed on, marked.
    pub soft_over: u64,
}

impl LimitCounts {
    fn of(route: &str, policy: &PolicyInfo, c: &[Counter; 6]) -> Self {
        Self {
            route: route.to_owned(),
            policy: policy.name.clone(),
            algorithm: policy.policy.name(),
            allowed: c[ALLOWED].get(),
            denied: c[DENIED].get(),
            shadow_denied: c[SHADOW_DENIED].get(),
            error: c[ERROR].get(),
            allowed_degraded: c[ALLOWED_DEGRADED].get(),
            soft_over: c[SOFT_OVER].get(),
        }
    }

    fn any(&self) -> bool {
        self.allowed + self.denied + self.shadow_denied + self.error + self.allowed_degraded + self.soft_over > 0
    }
}

/// A request's decision line, if it gets one, waiting for the response status.
#[derive(Debug)]
#[must_use = "a pending line is written by `emit`"]
pub struct PendingLine<'a>(Option<DecisionLine<'a>>);

impl PendingLine<'_> {
    /// Writes the line, if any, with the response's `status` (0: the connection was dropped).
    pub fn emit(self, status: u16) {
        self.emit_for(status, None);
    }

    /// [`PendingLine::emit`] for the request `request_id` names, written in the line.
    pub fn emit_for(self, status: u16, request_id: Option<&crate::request_id::RequestId>) {
        if let Some(mut line) = self.0 {
            line.status = status;
            line.emit_with(request_id.map(|id| id.as_str()));
        }
    }
}

/// Counts and logs decisions on one store under one `[decision_log]` policy: what every face
/// shares, whichever way it finds a route's counters.
#[derive(Debug, Clone)]
struct Recorder {
    /// The families and log sources, shared across reloads.
    observer: Arc<Observer>,
    /// The `[decision_log]` policy.
    log: Arc<DecisionLog>,
    /// Decision latency, key building included.
    decision_duration: LatencyHistogram,
    /// Store latency.
    store_latency: LatencyHistogram,
    /// The store's kind, for labels and log lines.
    store: &'static str,
}

/// What one request brought to be counted: the parts of a [`Ruling`].
struct Decided<'a, 'r> {
    checks: &'r [Check],
    kinds: &'r [KeyKind],
    positions: &'r [usize],
    policies: &'a [PolicyInfo],
    outcome: &'r Result<Outcome, StoreError>,
    timing: Timing,
}

impl<'x> Decided<'x, 'x> {
    fn of(ruling: &'x Ruling<'_>) -> Self {
        Decided {
            checks: &ruling.checks,
            kinds: &ruling.kinds,
            positions: &ruling.positions,
            policies: ruling.policies(),
            outcome: &ruling.outcome,
            timing: ruling.timing,
        }
    }
}

impl Recorder {
    fn new(observer: &Arc<Observer>, store: &'static str, log: &sluice_config::DecisionLog) -> Self {
        let m = observer.metrics();
        m.expect_store(store);
        let labels = StoreLabels { store };
        Self {
            log: Arc::new(observer.decision_log(log)),
            observer: Arc::clone(observer),
            decision_duration: m.decision_duration.get_or_create_owned(&labels),
            store_latency: m.store_latency.get_or_create_owned(&labels),
            store,
        }
    }

    /// Counts a decided request on the counters `h` and picks its decision line.
    fn record<'a>(
        &self,
        h: Option<&RouteHandles>,
        slots: Slots,
        route: &'a str,
        d: &Decided<'a, '_>,
    ) -> PendingLine<'a> {
        match d.outcome {
            Ok(outcome) => {
                self.decided(h, slots, d.checks, d.positions, d.policies, outcome, d.timing);
                PendingLine(self.pick(outcome).map(|(i, verdict)| {
                    let kind = d.kinds.get(i).copied().unwrap_or("absent");
                    let mut line =
                        self.line(route, d.policies, &d.checks[i], &outcome.decisions[i], verdict, kind, d.timing);
                    if let Some(degraded) = &outcome.degraded {
                        line.degraded = Some(degraded.mode);
                        line.error = Some(error_kind(&degraded.error));
                    }
                    line
                }))
            }
            Err(e) => {
                let kind = d.kinds.first().copied().unwrap_or("absent");
                PendingLine(self.failed(h, slots, route, d.checks, d.positions, d.policies, e, d.timing, kind))
            }
        }
    }

    /// The counter slot of check `i` among a route's limits.
    fn slot(slots: Slots, check: &Check, positions: &[usize], i: usize) -> usize {
        match slots {
            Slots::Positions => positions.get(i).copied().unwrap_or(i),
            Slots::Policies => check.policy,
        }
    }

    /// Counts a decided request: every limit's own decision, the request's outcome, the
    /// durations; a failure mode's verdict also counts its store error. Denials feed the
    /// status page's most denied keys.
    #[allow(clippy::too_many_arguments)]
    fn decided(
        &self,
        h: Option<&RouteHandles>,
        slots: Slots,
        checks: &[Check],
        positions: &[usize],
        policies: &[PolicyInfo],
        outcome: &Outcome,
        timing: Timing,
    ) {
        self.times(timing);
        let m = self.observer.metrics();
        match &outcome.degraded {
            Some(d) => {
                m.store_error(self.store, &d.error);
                m.degraded(self.store, d.mode);
                self.observer.store_failed(self.store, &d.error);
            }
            // Only the store's own answer ends a failure: a deny cache's repeated denial
            // during an outage is no recovery.
            None if outcome.store_answered => self.observer.store_ok(),
            None => {}
        }
        if !outcome.allowed
            && let Some(check) = outcome.describe.and_then(|i| checks.get(i))
            && let Some(p) = policies.get(check.policy)
        {
            self.observer.top_denied().record(check.key, &p.name);
        }
        let Some(h) = h else { return };
        let unchecked = outcome.degraded.as_ref().is_some_and(|d| d.mode == FAIL_OPEN);
        for (i, (check, d)) in checks.iter().zip(&outcome.decisions).enumerate() {
            if outcome.not_evaluated.contains(&i) {
                continue;
            }
            let apart = policies.get(check.policy).map(|p| (p.shadow, p.soft));
            let which = match (d.allowed, apart) {
                (true, _) if unchecked => ALLOWED_DEGRADED,
                (true, _) => ALLOWED,
                (false, Some((true, _))) => SHADOW_DENIED,
                (false, Some((_, true))) => SOFT_OVER,
                (false, _) => DENIED,
            };
            if let Some(c) = h.limits.get(Self::slot(slots, check, positions, i)) {
                c[which].inc();
            }
        }
        let request = match (outcome.allowed, unchecked) {
            (false, _) => REQUEST_DENIED,
            (true, true) => REQUEST_ALLOWED_DEGRADED,
            (true, false) => REQUEST_ALLOWED,
        };
        h.requests[request].inc();
    }

    /// Counts a request its store could not decide, logs the failure as a service event when
    /// the store starts failing, and gives its decision line when under the denial cap.
    #[allow(clippy::too_many_arguments)]
    fn failed<'a>(
        &self,
        h: Option<&RouteHandles>,
        slots: Slots,
        route: &'a str,
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
        if let Some(h) = h {
            for (i, check) in checks.iter().enumerate() {
                if let Some(c) = h.limits.get(Self::slot(slots, check, positions, i)) {
                    c[ERROR].inc();
                }
            }
            h.requests[REQUEST_ERROR].inc();
        }
        let first = checks.first()?;
        if !self.log.admit_denial() {
            return None;
        }
        let info = policies.get(first.policy);
        Some(DecisionLine {
            route,
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
            degraded: None,
        })
    }

    fn times(&self, timing: Timing) {
        self.decision_duration.observe_nanos(timing.decision_ns);
        self.store_latency.observe_nanos(timing.store_ns);
    }

    /// Which check of a decided request gets a log line, if any: the limit that denied (under
    /// the denial cap), else a shadow limit that would have denied, else a soft limit over
    /// (both under the cap), else, for a failure mode's verdict, the limit closest to denying (under the cap), else that limit,
    /// sampled. The sampling draw and the cap are taken here.
    fn pick(&self, outcome: &Outcome) -> Option<(usize, &'static str)> {
        if !outcome.allowed {
            let i = outcome.describe?;
            return self.log.admit_denial().then_some((i, "denied"));
        }
        if let Some(&i) = outcome.shadow_denied.first() {
            return self.log.admit_denial().then_some((i, "shadow_denied"));
        }
        if let Some(&i) = outcome.soft_over.first() {
            return self.log.admit_denial().then_some((i, "soft_over"));
        }
        if outcome.decisions.is_empty() {
            return None;
        }
        let logged = match outcome.degraded {
            Some(_) => self.log.admit_denial(),
            None => self.log.sample_admitted(),
        };
        logged.then_some((outcome.describe.unwrap_or(0), "allowed"))
    }

    /// The line for check `i` of a decided request (see [`Recorder::pick`]), its status still 0.
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
            degraded: None,
        }
    }
}

/// Everything a request needs to be counted and logged under one configuration: counter and
/// histogram handles resolved from their label sets when the configuration was loaded, and the
/// decision log policy of its `[decision_log]`.
#[derive(Debug, Clone)]
pub struct Observed {
    /// Counting and logging on this configuration's store and `[decision_log]`.
    recorder: Recorder,
    /// Per configured route (same order), its counters.
    routes: Vec<RouteHandles>,
    /// `/v1/check`, one entry per policy.
    api: RouteHandles,
    /// Requests that matched no route.
    unmatched: Counter,
    /// Request bodies cut, by reason.
    body_errors: Arc<BodyErrors>,
    /// Per configured route (same order), then one for requests refused before a route was
    /// found (their path): one counter per reason of [`Refusal::REASONS`].
    refused: Vec<[Counter; 6]>,
}

impl Observed {
    /// Resolves the label sets of `config` (its routes and policies) on a store of kind `store`.
    pub fn resolve(observer: &Arc<Observer>, config: &Config, store: &'static str) -> Self {
        let m = observer.metrics();
        let named = |p: usize| (config.policies[p].name.as_str(), config.policies[p].policy.name());
        let routes = config
            .routes
            .iter()
            .map(|r| RouteHandles::resolve(m, &r.name, r.limits.iter().map(|l| named(l.policy))))
            .collect();
        let api = RouteHandles::resolve(m, CHECK_API_ROUTE, (0..config.policies.len()).map(named));
        let unmatched =
            m.requests.get_or_create_owned(&RequestLabels { route: UNMATCHED_ROUTE.into(), outcome: "unlimited" });
        let body_errors = Arc::new(m.body_errors());
        let refused_of = |route: &str| {
            Refusal::REASONS
                .map(|reason| m.refused.get_or_create_owned(&RefusedLabels { route: route.to_owned(), reason }))
        };
        let refused = config.routes.iter().map(|r| refused_of(&r.name)).chain([refused_of(UNMATCHED_ROUTE)]).collect();
        let recorder = Recorder::new(observer, store, &config.decision_log);
        Self { recorder, routes, api, unmatched, body_errors, refused }
    }

    /// Counts a request refused before any limit decided it: under its route, or `unmatched`
    /// when it was refused before a route was found (its path) or by a face without routes.
    fn count_refused(&self, at: Option<Counted<'_>>, why: &Refusal) {
        let last = self.refused.len() - 1;
        let at = match at {
            Some(Counted::Route(i, _)) => i.min(last),
            _ => last,
        };
        self.refused[at][why.reason()].inc();
    }

    /// The observer these handles report to.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.recorder.observer
    }

    /// The decision log policy of this configuration.
    pub fn log(&self) -> &DecisionLog {
        &self.recorder.log
    }

    /// Counts a request that matched no route.
    pub fn unmatched(&self) {
        self.unmatched.inc();
    }

    /// Counts a request shed for overload.
    pub fn shed(&self) {
        self.observer().metrics().shed.inc();
    }

    /// Counts a request refused because its client had `max_in_flight_per_client` in flight.
    pub fn shed_per_client(&self) {
        self.observer().metrics().shed_per_client.inc();
    }

    /// Counts a request refused because it asked for a protocol upgrade (WebSocket).
    pub fn upgrade_refused(&self) {
        self.observer().metrics().upgrades_refused.inc();
    }

    /// The counters of request bodies cut (shared by the bodies being read).
    pub fn body_errors(&self) -> &Arc<BodyErrors> {
        &self.body_errors
    }

    fn handles(&self, at: Counted<'_>) -> (Option<&RouteHandles>, Slots) {
        match at {
            Counted::Route(i, _) => (self.routes.get(i), Slots::Positions),
            Counted::Named(_) => (Some(&self.api), Slots::Policies),
        }
    }

    /// Counts a decided request under `at` (a configured route, or the decision API, whose
    /// checks name policies) and picks its decision line, written by [`PendingLine::emit`] once
    /// the status is known.
    pub fn record<'a>(&self, at: Counted<'a>, ruling: &'a Ruling<'_>) -> PendingLine<'a> {
        let (h, slots) = self.handles(at);
        self.recorder.record(h, slots, at.name(), &Decided::of(ruling))
    }

    /// Counts the decision under `at` (a route's limits are indexed by position, the decision
    /// API's by policy) for `checks` (each at `positions[i]` among the route's limits): every
    /// limit's own decision, the request's outcome, the durations. `policies` tells shadow
    /// policies apart.
    pub fn decided(
        &self,
        at: Counted<'_>,
        checks: &[Check],
        positions: &[usize],
        policies: &[PolicyInfo],
        outcome: &Outcome,
        timing: Timing,
    ) {
        let (h, slots) = self.handles(at);
        self.recorder.decided(h, slots, checks, positions, policies, outcome, timing);
    }

    /// Which check of a decided request gets a log line, if any: the limit that denied (under
    /// the denial cap), else a shadow limit that would have denied, else a soft limit over
    /// (both under the cap), else, for a failure mode's verdict, the limit closest to denying (under the cap), else that limit,
    /// sampled. The sampling draw and the cap are taken here.
    pub fn pick(&self, outcome: &Outcome) -> Option<(usize, &'static str)> {
        self.recorder.pick(outcome)
    }

    /// Every configured limit's counts, route by route, then the decision API's policies that
    /// decided anything.
    pub fn counts(&self, config: &Config) -> Vec<LimitCounts> {
        let info = |p: usize| PolicyInfo::of_config(&config.policies[p]);
        let mut out = Vec::new();
        for (route, h) in config.routes.iter().zip(&self.routes) {
            for (limit, c) in route.limits.iter().zip(&h.limits) {
                out.push(LimitCounts::of(&route.name, &info(limit.policy), c));
            }
        }
        for (p, c) in self.api.limits.iter().enumerate() {
            let counts = LimitCounts::of(CHECK_API_ROUTE, &info(p), c);
            if counts.any() {
                out.push(counts);
            }
        }
        out
    }
}

/// Counts and logs the decisions of a face without a configuration — the tower layer (it is a
/// [`sluice_http::lifecycle::Observe`]), the seed service — in an [`Observer`]'s families, under the
/// same names and labels as the gateway: a route's counters (one per policy of the store) are
/// resolved the first time its name is seen ([`FaceObserver::route`] resolves one for good, and
/// [`FaceObserver::route_among`] one that decides on some of the store's policies only); route
/// names come from code, never from requests.
///
/// ```
/// use std::sync::Arc;
/// use sluice_config::{KeySource, KeySpec};
/// use sluice_core::{SystemClock, TokenBucket};
/// use sluice_gateway::observe::{FaceObserver, Observer};
/// use sluice_http::layer::RateLimitLayer;
/// use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy, Store};
///
/// let policy = NamedPolicy { name: "per-ip".into(), policy: TokenBucket::new(10, 1.0).unwrap().into() };
/// let store: Arc<dyn Store> = Arc::new(MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new())));
/// let observer = Arc::new(Observer::new());
/// let log = sluice_config::DecisionLog { sample: 0.0, denials_per_second: 100.0 };
/// let layer = RateLimitLayer::builder(store.clone())
///     .limit("per-ip", KeySpec { parts: vec![vec![KeySource::Ip]] })
///     .route_name("api")
///     .observe(Arc::new(FaceObserver::new(&observer, store.as_ref(), &log)))
///     .build()
///     .unwrap();
/// # let _ = layer;
/// // Serve `observer.metrics().render(Scrape::of(store.as_ref(), 0))` on the app's /metrics.
/// ```
#[derive(Debug)]
pub struct FaceObserver {
    /// Counting and logging on the face's store.
    recorder: Recorder,
    /// The store's policies, for the status page's counts.
    policies: Vec<PolicyInfo>,
    /// Each route name seen, with its counters.
    routes: RwLock<Vec<(Box<str>, Arc<FaceHandles>)>>,
    /// Requests that matched no limited route.
    unmatched: Counter,
}

impl FaceObserver {
    /// Counts into `observer`'s families the decisions made on `store`, logging them as `log`
    /// says.
    pub fn new(observer: &Arc<Observer>, store: &dyn Store, log: &sluice_config::DecisionLog) -> Self {
        let m = observer.metrics();
        let unmatched =
            m.requests.get_or_create_owned(&RequestLabels { route: UNMATCHED_ROUTE.into(), outcome: "unlimited" });
        let policies = store.policies().iter().map(|p| PolicyInfo::enforced(&p.name, p.policy)).collect();
        Self { recorder: Recorder::new(observer, store.kind(), log), policies, routes: RwLock::default(), unmatched }
    }

    /// The observer counted into.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.recorder.observer
    }

    /// The counters of `route`, resolved on first use: one per store policy, or, for a route
    /// first resolved by [`FaceObserver::route_among`], one per policy of `among`. A name keeps
    /// the counters it was first resolved with.
    fn handles(&self, route: &str, among: Option<&[usize]>) -> Arc<FaceHandles> {
        let found = |routes: &[(Box<str>, Arc<FaceHandles>)]| {
            routes.iter().find(|(name, _)| &**name == route).map(|(_, h)| Arc::clone(h))
        };
        if let Some(h) = found(&self.routes.read().unwrap_or_else(|p| p.into_inner())) {
            return h;
        }
        let mut routes = self.routes.write().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = found(&routes) {
            return h;
        }
        let among: Option<Box<[usize]>> =
            among.map(|a| a.iter().copied().filter(|&p| p < self.policies.len()).collect());
        let named = |p: usize| (self.policies[p].name.as_str(), self.policies[p].policy.name());
        let m = self.recorder.observer.metrics();
        let handles = match &among {
            None => RouteHandles::resolve(m, route, (0..self.policies.len()).map(named)),
            Some(a) => RouteHandles::resolve(m, route, a.iter().copied().map(named)),
        };
        let h = Arc::new(FaceHandles { handles, among });
        routes.push((route.into(), Arc::clone(&h)));
        h
    }

    /// `route`, resolved now (its counters show at zero from now on): recording on it takes no
    /// lock, for a face whose route is fixed (the seed service).
    pub fn route(&self, route: &str) -> FaceRoute {
        FaceRoute { recorder: self.recorder.clone(), handles: self.handles(route, None), name: route.into() }
    }

    /// Like [`FaceObserver::route`], for a route that decides on the store policies `among`
    /// only (indices into the store's policies; the rate-limit service's domain): it has
    /// counters for those alone, so the policies it never uses make no series. A check of any
    /// other policy counts for the request, not for a limit.
    pub fn route_among(&self, route: &str, among: &[usize]) -> FaceRoute {
        FaceRoute { recorder: self.recorder.clone(), handles: self.handles(route, Some(among)), name: route.into() }
    }

    /// Counts a request that no limit applies to.
    pub fn unmatched(&self) {
        self.unmatched.inc();
    }

    /// Every route seen, policy by policy: its counts so far.
    pub fn counts(&self) -> Vec<LimitCounts> {
        let routes = self.routes.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for (route, h) in routes.iter() {
            let among: Vec<usize> = match &h.among {
                Some(a) => a.to_vec(),
                None => (0..self.policies.len()).collect(),
            };
            let counted = h.handles.limits.iter().zip(among);
            out.extend(counted.map(|(c, p)| LimitCounts::of(route, &self.policies[p], c)));
        }
        out
    }
}

/// A face's route: its counters, and which store policies they count.
#[derive(Debug)]
struct FaceHandles {
    /// One counter set per policy counted.
    handles: RouteHandles,
    /// The store policies counted, in the counters' order; `None`: every one, by index.
    among: Option<Box<[usize]>>,
}

impl FaceHandles {
    /// Counts `d`, a decided request of `route`, and picks its decision line.
    fn record<'a>(&self, recorder: &Recorder, route: &'a str, d: Decided<'a, '_>) -> PendingLine<'a> {
        let Some(among) = &self.among else {
            return recorder.record(Some(&self.handles), Slots::Policies, route, &d);
        };
        // A check of a policy the route does not count finds no counter (`usize::MAX`).
        let positions: Vec<usize> =
            d.checks.iter().map(|c| among.iter().position(|&p| p == c.policy).unwrap_or(usize::MAX)).collect();
        recorder.record(Some(&self.handles), Slots::Positions, route, &Decided { positions: &positions, ..d })
    }
}

/// One route of a [`FaceObserver`], its counters resolved ([`FaceObserver::route`],
/// [`FaceObserver::route_among`]).
#[derive(Debug, Clone)]
pub struct FaceRoute {
    /// Counting and logging on the face's store.
    recorder: Recorder,
    /// The route's counters.
    handles: Arc<FaceHandles>,
    /// The route's name.
    name: Arc<str>,
}

impl FaceRoute {
    /// Counts a decided request of this route (its checks name the store's policies, described
    /// by `policies`) and picks its decision line, written by [`PendingLine::emit`].
    pub fn record<'a>(
        &'a self,
        checks: &[Check],
        kinds: &[KeyKind],
        policies: &'a [PolicyInfo],
        outcome: &Result<Outcome, StoreError>,
        timing: Timing,
    ) -> PendingLine<'a> {
        let decided = Decided { checks, kinds, positions: &[], policies, outcome, timing };
        self.handles.record(&self.recorder, &self.name, decided)
    }
}

impl Observe for FaceObserver {
    fn decided(&self, at: Counted<'_>, ruling: &Ruling<'_>, status: u16) {
        let route = at.name();
        self.handles(route, None).record(&self.recorder, route, Decided::of(ruling)).emit(status);
    }

    fn unmatched(&self) {
        FaceObserver::unmatched(self);
    }
}

impl Observe for Observed {
    fn decided(&self, at: Counted<'_>, ruling: &Ruling<'_>, status: u16) {
        self.record(at, ruling).emit(status);
    }

    fn refused(&self, at: Option<Counted<'_>>, why: &Refusal) {
        self.count_refused(at, why);
    }

    fn unmatched(&self) {
        Observed::unmatched(self);
    }
}
