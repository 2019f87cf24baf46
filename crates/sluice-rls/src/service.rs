//! The rate-limit service: a request's descriptors matched, decided through sluice's pipeline,
//! answered as envoyproxy/ratelimit answers.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use http::HeaderMap;
use sluice_config::{Config, RlsCharge};
use sluice_core::{AlgorithmKind, Clock, Decision, NANOS_PER_SEC, Nanos, Policy};
use sluice_gateway::observe::{LimitCounts, Observer, PendingLine, Reload};
use sluice_gateway::stores::StoreBuilder;
use sluice_http::headers::{LimitView, quota_window, write_denied, write_rate_limit_headers};
use sluice_http::pipeline::{Checks, Ruling};
use sluice_store::{Check, KeyHasher, StoreError};
use thiserror::Error;
use tonic::Status;

use crate::descriptors::Limit;
use crate::error::RlsConfigError;
use crate::json::status_of;
use crate::loader::{DirStamp, load_dir_stamped};
use crate::metrics::{Metrics, Result as Outcome};
use crate::rate_limit::{Rule, Unit, policy};
use crate::snapshot::{Env, MAX_OVERRIDE_POLICIES, Snapshot};

/// `limit_remaining` of an unlimited descriptor.
pub const UNLIMITED_REMAINING: u32 = u32::MAX;

/// Why the service could not start or reload.
#[derive(Debug, Error)]
pub enum RlsError {
    /// A descriptor file is wrong.
    #[error("{0}")]
    Config(#[from] RlsConfigError),
    /// The configuration has no `[rls]` section.
    #[error("the configuration has no [rls] section")]
    NotConfigured,
    /// The store could not be built.
    #[error("{0}")]
    Store(String),
}

/// Envoy's rate-limit service over a directory of envoyproxy/ratelimit descriptor files.
pub struct Rls {
    /// The load in use.
    current: ArcSwap<Snapshot>,
    /// What loads are built from.
    env: Env,
    /// The descriptor directory, read again on reload.
    dir: PathBuf,
    /// How a request's descriptors are charged.
    charge: RlsCharge,
    /// Time for `duration_until_reset` of fixed windows (the memory store's own clock).
    clock: Arc<dyn Clock>,
    /// Serialises reloads and override registration.
    rebuilding: Mutex<()>,
    /// The bytes of the descriptor files the load in use was parsed from: the watcher reloads
    /// when the directory holds anything else.
    loaded_from: Mutex<DirStamp>,
    /// Counters per domain and descriptor (envoyproxy/ratelimit's, on the service's port).
    metrics: Metrics,
}

impl std::fmt::Debug for Rls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rls").field("dir", &self.dir).field("charge", &self.charge).finish_non_exhaustive()
    }
}

/// How one request descriptor is answered.
enum Slot {
    /// Nothing matched (or its limit was replaced): OK, no `current_limit`.
    NoLimit,
    /// `unlimited`: OK, `limit_remaining` 4294967295.
    Unlimited,
    /// Over the limit without asking the store (`requests_per_unit: 0`, or a cost no window
    /// could ever admit); OK when it costs nothing.
    Over,
    /// Decided by the store: the index of its check.
    Store(usize),
}

/// What a descriptor with a limit reports.
struct Report {
    /// `current_limit`.
    limit: PbLimit,
    /// The limit's period (fixed windows report the time to the window's end).
    period: Nanos,
    /// `w` of the `ietf` fields: the time the whole quota takes to come back, as the gateway
    /// states it for the same policy ([`quota_window`]: a bucket's time to refill whole, not the
    /// period its rate is given per); the period for a limit without a policy.
    window: Nanos,
    /// True when the policy is a fixed window (or there is none).
    fixed: bool,
    /// `shadow_mode`: never over the limit.
    shadow: bool,
    /// The policy name (headers).
    name: String,
}

impl Rls {
    /// The service of `config.rls` (its descriptor directory and charging) under `config`'s
    /// `[store]` (built by `builder`), `[server]` key secret and header styles and
    /// `[decision_log]`; `clock` gives the time for `duration_until_reset` (the clock the store
    /// reads, for the memory store). Its decisions are counted in an [`Observer`] of its own.
    pub fn new(config: &Config, builder: Box<dyn StoreBuilder>, clock: Arc<dyn Clock>) -> Result<Rls, RlsError> {
        Rls::with_observer(config, builder, clock, Arc::new(Observer::new()))
    }

    /// Like [`Rls::new`], counting decisions into `observer`'s families (the gateway's, beside
    /// it: one scrape of its admin listener shows both) under the gateway's metric names, the
    /// `route` of a domain being `rls:<domain>`, and logging them through its decision log.
    pub fn with_observer(
        config: &Config,
        builder: Box<dyn StoreBuilder>,
        clock: Arc<dyn Clock>,
        observer: Arc<Observer>,
    ) -> Result<Rls, RlsError> {
        let rls = config.rls.as_ref().ok_or(RlsError::NotConfigured)?;
        let hasher = match &config.server.key_secret {
            Some(s) => KeyHasher::from_secret(s.expose().as_bytes()),
            None => KeyHasher::random(),
        };
        let env = Env { base: config.clone(), builder, hasher, styles: config.server.headers.clone(), observer };
        let (descriptors, loaded_from) = load_dir_stamped(&rls.descriptors)?;
        let snapshot = Snapshot::build(&env, descriptors, Vec::new(), None).map_err(RlsError::Store)?;
        let metrics = Metrics::new();
        metrics.loaded(&snapshot.descriptors);
        Ok(Rls {
            current: ArcSwap::from_pointee(snapshot),
            env,
            dir: rls.descriptors.clone(),
            charge: rls.charge,
            clock,
            rebuilding: Mutex::new(()),
            loaded_from: Mutex::new(loaded_from),
            metrics,
        })
    }

    /// The service of `config.rls` on the store `config.store` asks for, on the system clock.
    pub fn from_config(config: &Config) -> Result<Rls, RlsError> {
        Rls::new(config, sluice_gateway::stores::for_config(config), Arc::new(sluice_core::SystemClock::new()))
    }

    /// Reads the descriptor directory again; on an error the running descriptors stay. Policies
    /// that did not change keep their state. Counted and logged either way, as the gateway's
    /// reloads are: a `reload` event (`of` `rls_descriptors`, `result` `ok`, or `refused` with the
    /// error naming file, line and field) and `sluice_config_reloads_total` in the observer's
    /// families, and `sluice_rls_config_loads_total` on the service's port.
    pub fn reload(&self) -> Result<(), RlsError> {
        let mut parsed = None;
        let result = self.rebuild(|old| {
            let (descriptors, stamp) = load_dir_stamped(&self.dir)?;
            parsed = Some(stamp);
            Ok((descriptors, old.overrides.clone()))
        });
        if let (Ok(()), Some(stamp)) = (&result, parsed) {
            *self.loaded_from.lock().unwrap_or_else(|p| p.into_inner()) = stamp;
        }
        self.metrics.reloaded(result.is_ok());
        self.env.observer.reloaded_of(Reload::Descriptors, &result);
        result
    }

    /// True when `stamp` is what the load in use was parsed from.
    pub(crate) fn loaded_from(&self, stamp: &DirStamp) -> bool {
        *self.loaded_from.lock().unwrap_or_else(|p| p.into_inner()) == *stamp
    }

    /// The descriptor directory it reads on reload.
    pub fn descriptors_dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The `sluice_rls_*` metrics (envoyproxy/ratelimit's kind), in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.metrics.encode()
    }

    /// The observer its decisions are counted into.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.env.observer
    }

    /// Each loaded domain's route, policy by policy: its decisions so far (the status page's
    /// rows).
    pub fn counts(&self) -> Vec<LimitCounts> {
        self.current.load().observed.counts()
    }

    /// Names of the loaded domains.
    pub fn domains(&self) -> Vec<String> {
        self.current.load().descriptors.domain_names().into_iter().map(String::from).collect()
    }

    fn rebuild(
        &self,
        next: impl FnOnce(&Snapshot) -> Result<(crate::descriptors::Descriptors, Vec<Policy>), RlsError>,
    ) -> Result<(), RlsError> {
        // A poisoned lock only means a panic elsewhere mid-build; the snapshot in use is whole.
        let _guard = self.rebuilding.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.current.load_full();
        let (descriptors, overrides) = next(&old)?;
        let snapshot = Snapshot::build(&self.env, descriptors, overrides, Some(&old)).map_err(RlsError::Store)?;
        self.metrics.loaded(&snapshot.descriptors);
        self.current.store(Arc::new(snapshot));
        Ok(())
    }

    /// Adds the override policies `wanted` that the load in use lacks.
    fn register(&self, wanted: &[Policy]) -> Result<(), Status> {
        self.rebuild(|old| {
            let mut overrides = old.overrides.clone();
            for p in wanted {
                if old.policy_index(p).is_none() && !overrides.contains(p) {
                    overrides.push(*p);
                }
            }
            if overrides.len() > MAX_OVERRIDE_POLICIES {
                return Err(RlsError::Store(format!("more than {MAX_OVERRIDE_POLICIES} distinct limit overrides")));
            }
            Ok((old.descriptors.clone(), overrides))
        })
        .map_err(|e| Status::resource_exhausted(e.to_string()))
    }

    /// Answers one `ShouldRateLimit` request.
    pub async fn should_rate_limit(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let result = self.decide(request).await;
        self.metrics.request(match &result {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => Outcome::OverLimit,
            Ok(_) => Outcome::Ok,
            Err(_) => Outcome::Error,
        });
        result
    }

    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument("rate limit domain must not be empty"));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument("rate limit descriptor list must not be empty"));
        }
        let overrides = request
            .descriptors
            .iter()
            .filter_map(|d| d.limit.as_ref().map(override_limit))
            .collect::<Result<Vec<_>, _>>()?;
        let wanted: Vec<Policy> = overrides.iter().filter_map(|(_, p)| *p).collect();
        let mut snap = self.current.load_full();
        if wanted.iter().any(|p| snap.policy_index(p).is_none()) {
            self.register(&wanted)?;
            snap = self.current.load_full();
        }
        let domain = request.domain.as_str();
        let known_domain = snap.descriptors.domain(domain).is_some();
        let default_cost = u64::from(request.hits_addend.max(1));

        // Match every descriptor.
        let n = request.descriptors.len();
        let mut slots = Vec::with_capacity(n);
        let mut reports: Vec<Option<Report>> = Vec::with_capacity(n);
        let mut costs = Vec::with_capacity(n);
        let mut checks = Vec::new();
        let mut labels = Vec::with_capacity(n);
        let mut replaced: HashSet<&str> = HashSet::new();
        let mut matched_limits: Vec<Option<&Limit>> = Vec::with_capacity(n);
        let mut overrides = overrides.into_iter();
        for d in &request.descriptors {
            let cost = descriptor_cost(d, default_cost);
            costs.push(cost);
            let entries: Vec<(&str, &str)> = d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())).collect();
            if d.limit.is_some() {
                let (limit, policy) = overrides.next().expect("one override per descriptor with a limit");
                let path = d.entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>().join(".");
                labels.push((domain_label(known_domain, domain), path));
                matched_limits.push(None);
                let period = Unit::from_proto(limit.unit).map_or(NANOS_PER_SEC, |u| u.seconds() * NANOS_PER_SEC);
                let report = Report {
                    limit,
                    period,
                    window: policy.as_ref().map_or(period, quota_window),
                    fixed: true,
                    shadow: false,
                    name: String::new(),
                };
                match policy.and_then(|p| snap.policy_index(&p)) {
                    None => slots.push(Slot::Over),
                    Some(pi) => {
                        let key = snap.key(pi, domain, &entries);
                        slots.push(self.store_slot(&snap, pi, key, cost, &mut checks));
                    }
                }
                reports.push(Some(Report { name: snap_name(&snap, policy), ..report }));
                continue;
            }
            match snap.descriptors.lookup(domain, &entries) {
                None => {
                    labels.push((domain_label(known_domain, domain), "(none)".to_string()));
                    matched_limits.push(None);
                    slots.push(Slot::NoLimit);
                    reports.push(None);
                }
                Some(m) => {
                    replaced.extend(m.limit.rate.replaces.iter().map(String::as_str));
                    labels.push((domain.to_string(), m.metric.clone()));
                    matched_limits.push(Some(m.limit));
                    let rate = &m.limit.rate;
                    let pb = PbLimit {
                        name: rate.name.clone(),
                        requests_per_unit: rate.requests_per_unit,
                        unit: rate.unit.to_proto() as i32,
                    };
                    let mut report = Report {
                        limit: pb,
                        period: rate.period,
                        window: rate.period,
                        fixed: true,
                        shadow: m.limit.shadow,
                        name: String::new(),
                    };
                    let slot = match (rate.rule, snap.limit_policy[m.index]) {
                        (Rule::Unlimited, _) => Slot::Unlimited,
                        (Rule::Policy(p), Some(pi)) => {
                            report.fixed = p.kind() == AlgorithmKind::FixedWindow;
                            report.window = quota_window(&p);
                            report.name = snap.policies[pi].name.clone();
                            let counted: Vec<(&str, &str)> =
                                entries.iter().zip(&m.values).map(|(&(k, _), &v)| (k, v)).collect();
                            let key = snap.key(pi, domain, &counted);
                            self.store_slot(&snap, pi, key, cost, &mut checks)
                        }
                        _ => Slot::Over,
                    };
                    slots.push(slot);
                    reports.push((!matches!(rate.rule, Rule::Unlimited)).then_some(report));
                }
            }
        }
        // `replaces`: a limit named by another matched limit is dropped from this request.
        for (i, limit) in matched_limits.iter().enumerate() {
            if let Some(l) = limit
                && !l.rate.name.is_empty()
                && replaced.contains(l.rate.name.as_str())
            {
                slots[i] = Slot::NoLimit;
                reports[i] = None;
            }
        }

        // Decide the store's checks.
        let over_without_store = slots
            .iter()
            .zip(&reports)
            .zip(&costs)
            .any(|((s, r), &c)| matches!(s, Slot::Over) && c > 0 && r.as_ref().is_some_and(|r| !r.shadow));
        let live: Vec<usize> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Store(c) => Some(*c),
                _ => None,
            })
            .collect();
        let (ruling, decided) = self.decide_checks(&snap, &checks, &live, over_without_store).await;
        let line = record(&snap, domain, ruling, over_without_store);
        let decisions = match decided {
            Ok(d) => d,
            Err(s) => {
                // The status `POST /json` answers a store failure with.
                emit(line, http::StatusCode::INTERNAL_SERVER_ERROR.as_u16());
                return Err(s);
            }
        };

        // Answer.
        let now = self.clock.now();
        let mut statuses = Vec::with_capacity(n);
        let mut over = false;
        let mut describe: Option<(Decision, Nanos, String)> = None;
        for i in 0..n {
            let (status, decision) = match (&slots[i], &reports[i]) {
                (Slot::Unlimited, _) => {
                    self.metrics.descriptor(&labels[i], Outcome::Unlimited, costs[i]);
                    let s = DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: UNLIMITED_REMAINING,
                        ..Default::default()
                    };
                    (s, None)
                }
                (Slot::Over, Some(r)) => {
                    let until = r.period - now % r.period;
                    let allowed = costs[i] == 0;
                    let d = Decision {
                        allowed,
                        limit: u64::from(r.limit.requests_per_unit),
                        remaining: 0,
                        reset_after: until,
                        retry_after: if allowed { 0 } else { until },
                        delay: 0,
                    };
                    (self.status(r, &d, until, &labels[i], costs[i]), Some(d))
                }
                (Slot::Store(c), Some(r)) => {
                    let d = decisions[*c].expect("every live check is decided");
                    let until = match (r.fixed, d.allowed) {
                        (true, _) => r.period - now % r.period,
                        (false, true) => d.reset_after,
                        (false, false) => d.retry_after,
                    };
                    (self.status(r, &d, until, &labels[i], costs[i]), Some(d))
                }
                // Nothing matched, or the limit was replaced.
                _ => {
                    self.metrics.descriptor(&labels[i], Outcome::NoLimit, 0);
                    (DescriptorStatus { code: Code::Ok as i32, ..Default::default() }, None)
                }
            };
            if let (Some(d), Some(r)) = (decision, &reports[i])
                && !r.shadow
            {
                over |= !d.allowed;
                let tighter = describe.as_ref().is_none_or(|(t, ..)| d.tighter(*t) == d && d != *t);
                if tighter {
                    describe = Some((d, r.window, r.name.clone()));
                }
            }
            statuses.push(status);
        }
        let headers = self.headers(describe.as_ref(), over, now);
        let response = RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add: headers,
            ..Default::default()
        };
        emit(line, status_of(&response).as_u16());
        Ok(response)
    }

    /// A slot for a check of policy `pi`: over the limit when the cost exceeds what the policy
    /// can ever admit (as envoyproxy/ratelimit answers it), else a check for the store.
    fn store_slot(
        &self,
        snap: &Snapshot,
        pi: usize,
        key: sluice_store::KeyHash,
        cost: u64,
        checks: &mut Vec<Check>,
    ) -> Slot {
        if snap.policies[pi].policy.check_charge(cost).is_err() {
            return Slot::Over;
        }
        checks.push(Check { policy: pi, key, cost });
        Slot::Store(checks.len() - 1)
    }

    /// Decides `checks` (those in `live`) as configured; returns the ruling that is the
    /// request's decision (to be counted and logged: the store's decisions at the descriptors'
    /// costs, none when the store was only asked what is left) and one decision per check.
    async fn decide_checks<'s>(
        &self,
        snap: &'s Snapshot,
        checks: &[Check],
        live: &[usize],
        denied_already: bool,
    ) -> (Option<Ruling<'s>>, Result<Vec<Option<Decision>>, Status>) {
        let mut out = vec![None; checks.len()];
        if live.is_empty() {
            return (None, Ok(out));
        }
        let pick = |idx: &[usize], cost: Option<u64>| -> Vec<Check> {
            idx.iter().map(|&i| Check { cost: cost.unwrap_or(checks[i].cost), ..checks[i] }).collect()
        };
        let independent = self.charge == RlsCharge::Independent;
        if independent && !denied_already {
            let mut decided: Option<Ruling<'s>> = None;
            for &i in live {
                let ruling = rule(snap, vec![checks[i]]).await;
                let d = ruling.outcome.as_ref().map(|o| o.decisions[0]).map_err(store_status);
                decided = Some(match decided {
                    None => ruling,
                    Some(r) => r.then(ruling),
                });
                match d {
                    Ok(d) => out[i] = Some(d),
                    Err(s) => return (decided, Err(s)),
                }
            }
            return (decided, Ok(out));
        }
        if denied_already {
            // Another descriptor is over the limit whatever the store says: charge nothing
            // (all-or-nothing: the store is only asked what is left, which decides nothing, but
            // its failure, or a failure mode's answer, is counted), or, as envoyproxy/ratelimit
            // does, each descriptor on its own.
            let ruling = rule(snap, pick(live, if independent { None } else { Some(0) })).await;
            let decided = ruling.outcome.as_ref().map(|o| o.decisions.clone()).map_err(store_status);
            let failed = ruling.outcome.as_ref().map_or(true, |o| o.degraded.is_some());
            let recorded = (independent || failed).then_some(ruling);
            let decided = decided.map(|d| {
                for (&i, d) in live.iter().zip(d) {
                    out[i] = Some(d);
                }
                out
            });
            return (recorded, decided);
        }
        let mut ruling = rule(snap, pick(live, None)).await;
        let outcome = match &ruling.outcome {
            Ok(o) => o,
            Err(e) => {
                let status = store_status(e);
                return (Some(ruling), Err(status));
            }
        };
        // Of a denied request, the checks that admitted were charged nothing (and a store may
        // not even have consulted them: Redis's deny cache), nor were shadow checks: ask what
        // they hold, at no cost.
        let mut peek = Vec::new();
        for (j, &i) in live.iter().enumerate() {
            let d = outcome.decisions[j];
            let shadow = snap.policies[checks[i].policy].shadow;
            if outcome.not_evaluated.contains(&j) || (!outcome.allowed && d.allowed && !shadow) {
                peek.push(i);
            } else {
                out[i] = Some(d);
            }
        }
        if !peek.is_empty() {
            let peeked = rule(snap, pick(&peek, Some(0))).await;
            match peeked.outcome {
                Ok(o) => {
                    for (&i, d) in peek.iter().zip(o.decisions) {
                        out[i] = Some(d);
                    }
                }
                // The answer fails: so does the request's decision, counted as the store's error.
                Err(e) => {
                    let status = store_status(&e);
                    ruling.outcome = Err(e);
                    return (Some(ruling), Err(status));
                }
            }
        }
        (Some(ruling), Ok(out))
    }

    fn status(&self, r: &Report, d: &Decision, until: Nanos, label: &(String, String), cost: u64) -> DescriptorStatus {
        let over = !d.allowed;
        let outcome = match (over, r.shadow) {
            (false, _) => Outcome::Ok,
            (true, false) => Outcome::OverLimit,
            (true, true) => Outcome::ShadowOverLimit,
        };
        self.metrics.descriptor(label, outcome, cost);
        DescriptorStatus {
            code: if over && !r.shadow { Code::OverLimit } else { Code::Ok } as i32,
            current_limit: Some(r.limit.clone()),
            limit_remaining: if over { 0 } else { u32::try_from(d.remaining).unwrap_or(u32::MAX) },
            duration_until_reset: Some(duration(until)),
            ..Default::default()
        }
    }

    /// `response_headers_to_add`: the rate-limit headers of the limit that denied, or of the one
    /// closest to denying, in the configured styles (sluice's header writer).
    fn headers(&self, describe: Option<&(Decision, Nanos, String)>, over: bool, now: Nanos) -> Vec<HeaderValue> {
        let Some((decision, window, name)) = describe else { return Vec::new() };
        let view = LimitView { name, window: *window, decision: *decision, partition_key: None };
        let views = std::slice::from_ref(&view);
        let mut map = HeaderMap::new();
        let unix = now / NANOS_PER_SEC;
        if over {
            write_denied(&mut map, &self.env.styles, views, Some(0), unix);
        } else {
            write_rate_limit_headers(&mut map, &self.env.styles, views, 0, unix);
        }
        map.iter()
            .map(|(k, v)| HeaderValue {
                key: k.as_str().to_string(),
                value: v.to_str().unwrap_or_default().to_string(),
                ..Default::default()
            })
            .collect()
    }
}

/// A descriptor's cost: its own `hits_addend` (0 checks without charging), else the request's,
/// where 0 means 1 (the protocol cannot tell 0 from unset).
fn descriptor_cost(d: &RateLimitDescriptor, default: u64) -> u64 {
    if d.is_negative_hits {
        // Refunds are not supported: a negative descriptor is checked, never charged.
        return 0;
    }
    d.hits_addend.as_ref().map_or(default, |h| h.value)
}

/// The `current_limit` and policy of a `limit` override (a fixed window of the unit; none for
/// `requests_per_unit: 0`).
fn override_limit(
    o: &envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride,
) -> Result<(PbLimit, Option<Policy>), Status> {
    let unit = Unit::from_proto(o.unit).ok_or_else(|| Status::invalid_argument("limit override has no unit"))?;
    let limit = PbLimit { name: String::new(), requests_per_unit: o.requests_per_unit, unit: unit.to_proto() as i32 };
    if o.requests_per_unit == 0 {
        return Ok((limit, None));
    }
    let p = policy(AlgorithmKind::FixedWindow, u64::from(o.requests_per_unit), unit.seconds() * NANOS_PER_SEC, None)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((limit, Some(p)))
}

fn snap_name(snap: &Snapshot, policy: Option<Policy>) -> String {
    policy.and_then(|p| snap.policy_index(&p)).map_or_else(String::new, |i| snap.policies[i].name.clone())
}

fn domain_label(known: bool, domain: &str) -> String {
    if known { domain.to_string() } else { "(unknown)".to_string() }
}

fn duration(n: Nanos) -> PbDuration {
    PbDuration { seconds: (n / NANOS_PER_SEC) as i64, nanos: (n % NANOS_PER_SEC) as i32 }
}

fn store_status(e: &StoreError) -> Status {
    Status::unavailable(format!("the store could not decide: {e}"))
}

/// One pipeline call for `checks`.
async fn rule(snap: &Snapshot, checks: Vec<Check>) -> Ruling<'_> {
    let n = checks.len();
    snap.limiter.decide(Checks::new(checks, vec!["rls"; n])).await
}

/// Counts a request's decision in the route of its `domain`, as the gateway counts its own, and
/// picks its decision line. `ruling` is what the store decided at the descriptors' costs; none
/// when it decided nothing: a request no limit applied to counts as `unmatched`, one over a
/// limit the store never sees (`requests_per_unit: 0`, a cost above the limit) only in
/// `sluice_rls_descriptors_total`. Such a descriptor denies the request whatever the store
/// decided (`over_without_store`): the request counts as denied, and gets a decision line only
/// when a store check denied too.
fn record<'s>(
    snap: &'s Snapshot,
    domain: &str,
    ruling: Option<Ruling<'_>>,
    over_without_store: bool,
) -> Option<PendingLine<'s>> {
    let Some(mut ruling) = ruling else {
        if !over_without_store {
            snap.observed.unmatched();
        }
        return None;
    };
    if over_without_store && let Ok(o) = &mut ruling.outcome {
        o.allowed = false;
        o.describe = o.describe.filter(|&i| !o.decisions[i].allowed);
    }
    let route = snap.route(domain);
    Some(route.record(&ruling.checks, &ruling.kinds, snap.limiter.policies(), &ruling.outcome, ruling.timing))
}

/// Writes a request's decision line, if it has one, with the HTTP status of its answer (what
/// `POST /json` answers; gRPC carries the same code in its message).
fn emit(line: Option<PendingLine<'_>>, status: u16) {
    if let Some(line) = line {
        line.emit(status);
    }
}
