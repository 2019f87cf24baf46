//! The rate-limit service: a request's descriptors matched (`descriptor_match`), decided
//! through sluice's pipeline (`store_checks`), acted on and observed through the request
//! lifecycle (`face`), answered as envoyproxy/ratelimit answers (`answer`); reloads and `limit`
//! overrides' policies.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_config::{Config, RlsCharge};
use sluice_core::{Clock, Decision, Policy};
use sluice_gateway::observe::{LimitCounts, Observer, Reload};
use sluice_gateway::stores::StoreBuilder;
use sluice_http::lifecycle::{Counted, Lifecycle};
use sluice_http::pipeline::{Limiter, Ruling};
use sluice_store::{Check, KeyHasher, Settle};
use thiserror::Error;
use tonic::Status;

use crate::descriptor_match::{self, Decider, Override, ResolvedDescriptor};
use crate::error::RlsConfigError;
use crate::face::{self, Answering};
use crate::loader::{DirStamp, load_dir_stamped};
use crate::metrics::{Metrics, Result as Outcome};
use crate::snapshot::{Env, MAX_OVERRIDE_POLICIES, Snapshot};
use crate::store_checks::decide_checks;

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

    /// Decides one request: its descriptors resolved (overrides registered first), `replaces`
    /// applied, the store's checks decided; then acted on, answered, counted and logged through
    /// the request lifecycle ([`face`]).
    async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument("rate limit domain must not be empty"));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument("rate limit descriptor list must not be empty"));
        }
        let overrides = descriptor_match::overrides(request)?;
        let snap = self.with_overrides(&overrides)?;
        let mut checks = Vec::new();
        let mut descriptors = descriptor_match::resolve(&snap, request, overrides, &mut checks);
        descriptor_match::apply_replaces(&mut descriptors);

        // Usage Envoy reports when a stream is done: charged whatever is left (a debt the next
        // requests pay), never denied.
        let usage: Vec<Settle> = descriptors
            .iter()
            .filter_map(|d| match d.decider {
                Decider::Usage(c) => {
                    Some(Settle { check: Check { cost: 0, ..c }, charged_at: self.clock.now(), actual: c.cost })
                }
                _ => None,
            })
            .collect();
        if !usage.is_empty() {
            snap.limiter.settle(&usage).await;
        }
        let over_without_store = descriptors.iter().any(ResolvedDescriptor::over_without_store);
        let live: Vec<usize> = descriptors.iter().filter_map(ResolvedDescriptor::check).collect();
        let (mut ruling, mut decided) = decide_checks(&snap, self.charge, &checks, &live, over_without_store).await;
        if let (Some(r), Ok(decided)) = (&mut ruling, &mut decided) {
            self.spent_usage(&snap.limiter, (&descriptors, &live), r, decided).await;
        }
        let face = Answering {
            descriptors: &descriptors,
            decided,
            now: self.clock.now(),
            metrics: &self.metrics,
            styles: &self.env.styles,
        };
        let Some(mut ruling) = ruling else {
            // The store decided nothing: no limit applied (unmatched), or a descriptor is over a
            // limit the store never sees (counted only in `sluice_rls_descriptors_total`).
            if !over_without_store && usage.is_empty() {
                snap.observed.unmatched();
            }
            return face.answered();
        };
        if over_without_store {
            denied_whatever_the_store_said(&mut ruling);
        }
        let observed = face::Observed(&snap);
        let lifecycle = Lifecycle::new(&snap.limiter, &observed);
        match lifecycle.ruled(Counted::Named(&request.domain), ruling, (), face).await {
            Ok(answer) => answer,
            Err(never) => match never {},
        }
    }

    /// A `stream_done` limit asked without a report (the request path) checks at no cost: it is
    /// over when nothing is left of it (its usage is charged later, by the report). The
    /// request is then denied, and, charged all-or-nothing, the other descriptors' charges are
    /// given back.
    async fn spent_usage(
        &self,
        limiter: &Limiter,
        (descriptors, live): (&[ResolvedDescriptor<'_>], &[usize]),
        ruling: &mut Ruling<'_>,
        decided: &mut [Option<Decision>],
    ) {
        let spent: Vec<usize> = descriptors
            .iter()
            .filter(|d| d.cost == 0 && d.matched.is_some_and(|l| l.stream_done))
            .filter_map(ResolvedDescriptor::check)
            .filter(|&c| decided[c].is_some_and(|d| d.allowed && d.remaining == 0))
            .collect();
        if spent.is_empty() {
            return;
        }
        if self.charge != RlsCharge::Independent && ruling.allowed() {
            limiter.refund(ruling).await;
        }
        let Ok(outcome) = &mut ruling.outcome else { return };
        for c in spent {
            let over = |d: &mut Decision| {
                d.allowed = false;
                d.retry_after = d.reset_after.max(1);
            };
            if let Some(d) = &mut decided[c] {
                over(d);
            }
            if let Some(j) = live.iter().position(|&l| l == c).filter(|&j| j < outcome.decisions.len()) {
                over(&mut outcome.decisions[j]);
                outcome.describe = Some(j);
            }
        }
        outcome.allowed = false;
    }

    /// The load in use, with the policies of `overrides` it lacks registered first.
    fn with_overrides(&self, overrides: &[Option<Override>]) -> Result<Arc<Snapshot>, Status> {
        let wanted: Vec<Policy> = overrides.iter().flatten().filter_map(|(_, p)| *p).collect();
        let snap = self.current.load_full();
        if wanted.iter().all(|p| snap.policy_index(p).is_some()) {
            return Ok(snap);
        }
        self.register(&wanted)?;
        Ok(self.current.load_full())
    }
}

/// A request one of whose descriptors is over a limit the store never sees
/// (`requests_per_unit: 0`, a cost above the limit) is denied whatever the store decided: it
/// counts as denied, and its headers describe a limit that denied, if a store check did.
fn denied_whatever_the_store_said(ruling: &mut Ruling<'_>) {
    if let Ok(o) = &mut ruling.outcome {
        o.allowed = false;
        o.describe = o.describe.filter(|&i| !o.decisions[i].allowed);
    }
}
