//! The gateway: routes, keys, decisions, denials, shaping, proxying; reloadable.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::header::HeaderValue;
use http::{Method, Request, Response};
use hyper::body::Incoming;
use sluice_config::{Config, KeySource, OnDeny, Route, normalize_path};
use sluice_core::{Clock, SystemClock};
use sluice_store::{Check, KeyHasher, Store, StoreError};

use crate::body::{Prefix, ReplayBody, read_prefix};
use crate::check_api;
use crate::enforce::{Enforcer, PolicyInfo};
use crate::headers::{retry_after_secs, write_denial_headers, write_denied, write_rate_limit_headers};
use crate::identity::ClientIdentity;
use crate::keys::{RequestFacts, key_for};
use crate::observe::{Observed, Observer, Timing};
use crate::proxy::Upstream;
use crate::respond::{self, Body};
use crate::serve::{Dropped, Handler};

/// How long a client may take to send the part of a body that a `json:` key needs.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the store for a configuration; on reload it is given the store in use, so that
/// policies that did not change keep their state.
pub trait StoreFactory: Send + Sync + 'static {
    /// The store for `config` (its policies in config order).
    fn build(&self, config: &Config, previous: Option<&Arc<dyn Store>>) -> Result<Arc<dyn Store>, String>;
}

/// One loaded configuration and everything derived from it.
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Decides checks.
    pub enforcer: Enforcer,
    identity: ClientIdentity,
    upstream: Option<Upstream>,
    decision_api: bool,
    /// Metric handles and decision log policy resolved for this configuration.
    pub observed: Observed,
}

impl Loaded {
    /// Derives the gateway's working state from `config` and a store for it (with metrics of
    /// its own; see [`Loaded::observed_by`]).
    pub fn new(config: Config, store: Arc<dyn Store>, hasher: KeyHasher) -> Result<Self, String> {
        Self::observed_by(config, store, hasher, &Arc::new(Observer::new()))
    }

    /// Like [`Loaded::new`], counting and logging through `observer`.
    pub fn observed_by(
        config: Config,
        store: Arc<dyn Store>,
        hasher: KeyHasher,
        observer: &Arc<Observer>,
    ) -> Result<Self, String> {
        let policies = config
            .policies
            .iter()
            .map(|p| PolicyInfo { name: p.name.clone(), policy: p.policy, shadow: p.shadow })
            .collect();
        let identity = ClientIdentity::new(config.server.trusted_proxies.clone(), config.server.ipv6_prefix)
            .with_header(config.server.forwarded_header);
        let upstream =
            config.upstream.as_ref().map(|u| Upstream::new(&u.url, Duration::from_nanos(u.timeout))).transpose()?;
        let decision_api = config.server.decision_api.unwrap_or(config.upstream.is_none());
        let observed = Observed::resolve(observer, &config, store.kind());
        Ok(Self {
            enforcer: Enforcer::new(store, hasher, policies),
            identity,
            upstream,
            decision_api,
            config,
            observed,
        })
    }
}

/// The gateway's request handler. Cheap to share; [`Gateway::reload`] swaps its configuration
/// atomically while requests are in flight.
pub struct Gateway {
    current: ArcSwap<Loaded>,
    factory: Box<dyn StoreFactory>,
    hasher: KeyHasher,
    clock: SystemClock,
    in_flight: AtomicUsize,
    observer: Arc<Observer>,
}

impl Gateway {
    /// A gateway for `config`, with stores from `factory`. The key secret comes from the
    /// config; without one, a random secret is drawn (right for a single instance).
    pub fn new(config: Config, factory: Box<dyn StoreFactory>) -> Result<Self, String> {
        Self::with_observer(config, factory, Arc::new(Observer::new()))
    }

    /// Like [`Gateway::new`], counting and logging through `observer` (kept across reloads).
    pub fn with_observer(
        config: Config,
        factory: Box<dyn StoreFactory>,
        observer: Arc<Observer>,
    ) -> Result<Self, String> {
        let hasher = match &config.server.key_secret {
            Some(s) => KeyHasher::from_secret(s.as_bytes()),
            None => KeyHasher::random(),
        };
        let store = factory.build(&config, None)?;
        let loaded = Loaded::observed_by(config, store, hasher.clone(), &observer)?;
        Ok(Self {
            current: ArcSwap::from_pointee(loaded),
            factory,
            hasher,
            clock: SystemClock::new(),
            in_flight: AtomicUsize::new(0),
            observer,
        })
    }

    /// Replaces the configuration. A configuration whose store cannot be built is refused and
    /// the current one keeps serving. Policies that did not change keep their state.
    pub fn reload(&self, config: Config) -> Result<(), String> {
        let result = self.try_reload(config);
        self.observer.reloaded(&result);
        result
    }

    fn try_reload(&self, config: Config) -> Result<(), String> {
        if config.server.key_secret != self.current.load().config.server.key_secret {
            return Err("server.key_secret cannot change on reload: restart to change it".into());
        }
        if config.server.listen != self.current.load().config.server.listen {
            return Err("server.listen cannot change on reload: restart to change it".into());
        }
        let previous = self.current.load().enforcer.store().clone();
        let store = self.factory.build(&config, Some(&previous))?;
        let loaded = Loaded::observed_by(config, store, self.hasher.clone(), &self.observer)?;
        self.current.store(Arc::new(loaded));
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// The metrics and decision log sources, shared by every configuration this gateway loads.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    fn unix_now(&self) -> u64 {
        self.clock.now() / 1_000_000_000
    }

    async fn route(
        &self,
        loaded: &Loaded,
        peer: SocketAddr,
        req: Request<Incoming>,
    ) -> Result<Response<Body>, Dropped> {
        if loaded.decision_api && req.uri().path() == check_api::PATH {
            if req.method() != Method::POST {
                let mut res = respond::error(405, "method_not_allowed", "Use POST.");
                res.headers_mut().insert(http::header::ALLOW, HeaderValue::from_static("POST"));
                return Ok(res);
            }
            return Ok(
                check_api::handle(&loaded.enforcer, &loaded.config, &loaded.observed, req, self.unix_now()).await
            );
        }
        let method = req.method().as_str().to_owned();
        // Routes match, and the `path` key part reads, the normalised path: spellings of one
        // resource share one route and one key. Normalised once per request.
        let path = normalize_path(req.uri().path()).into_owned();
        let route = loaded.config.routes.iter().enumerate().find(|(_, r)| r.matches_normal(&method, &path));
        let peer_ip = peer.ip();
        let client = loaded.identity.client_ip(peer_ip, req.headers());
        let Some((route_idx, route)) = route else {
            loaded.observed.unmatched();
            return Ok(match &loaded.upstream {
                Some(up) => {
                    let (parts, body) = req.into_parts();
                    up.forward(Request::from_parts(parts, ReplayBody::untouched(body)), client).await
                }
                None => respond::error(404, "not_found", "No such route."),
            });
        };

        // A JSON key part needs the body: read a bounded prefix and keep it for forwarding.
        let needs_body = route.limits.iter().any(|l| l.key.needs_body());
        let (parts, body) = req.into_parts();
        let (json, body) = if needs_body {
            // A client trickling its body must not hold a slot in `max_in_flight` for long.
            match tokio::time::timeout(BODY_READ_TIMEOUT, read_prefix(body, loaded.config.server.max_body_bytes)).await
            {
                Ok(Ok(prefix)) => match json_key_source(route, &prefix) {
                    Ok(json) => (json, prefix.body),
                    Err(why) => return Ok(respond::error(400, "bad_request", why)),
                },
                Ok(Err(_)) => return Ok(respond::error(400, "bad_request", "The request body could not be read.")),
                Err(_) => return Ok(respond::error(408, "request_timeout", "The request body came too slowly.")),
            }
        } else {
            (None, ReplayBody::untouched(body))
        };

        let started = Instant::now();
        let facts = RequestFacts {
            method: &method,
            path: &path,
            route: &route.name,
            client: loaded.identity.group(client),
            peer_trusted: loaded.identity.is_trusted(peer_ip),
            headers: &parts.headers,
            user_header: loaded.config.server.user_header.as_deref(),
            json: json.as_ref(),
        };
        let enforcer = &loaded.enforcer;
        let checks: Vec<Check> = route
            .limits
            .iter()
            .map(|l| {
                let (key, _kind) = key_for(enforcer.hasher(), &enforcer.policies()[l.policy].name, &l.key, &facts);
                Check { policy: l.policy, key, cost: l.cost }
            })
            .collect();
        let asked = Instant::now();
        let result = enforcer.decide(&checks).await;
        let timing = Timing::since(started, asked);
        let obs = &loaded.observed;
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                let kind = route.limits.first().map_or("none", |l| l.key.kind());
                obs.failed(Some(route_idx), &route.name, &checks, enforcer.policies(), &e, timing, kind, 503);
                return Ok(store_failure(&e));
            }
        };
        obs.decided(Some(route_idx), &checks, enforcer.policies(), &outcome, timing);
        // The decision log line, if this decision gets one; the key type is found again only then.
        let logged = obs.pick(&outcome).map(|(i, verdict)| {
            let kind =
                key_for(enforcer.hasher(), &enforcer.policies()[checks[i].policy].name, &route.limits[i].key, &facts).1;
            (i, verdict, kind)
        });
        let log = |status: u16| {
            if let Some((i, verdict, kind)) = logged {
                let d = &outcome.decisions[i];
                obs.line(&route.name, enforcer.policies(), &checks[i], d, verdict, kind, timing, status).emit();
            }
        };
        let view = enforcer.view(&checks, &outcome);
        if !outcome.allowed {
            if loaded.config.server.on_deny == OnDeny::Drop {
                log(0);
                return Err(Dropped);
            }
            let secs = view.map_or(1, |v| retry_after_secs(&v.decision));
            let mut res = respond::denial(loaded.config.server.deny_status, secs);
            write_denied(res.headers_mut(), &loaded.config.server.headers, view.as_ref(), self.unix_now());
            log(res.status().as_u16());
            return Ok(res);
        }
        let delay = outcome.delay();
        if delay > 0 {
            tokio::time::sleep(Duration::from_nanos(delay)).await;
        }
        let mut res = match &loaded.upstream {
            Some(up) => up.forward(Request::from_parts(parts, body), client).await,
            None => respond::json(200, &respond::Allowed { status: "allowed", route: &route.name }),
        };
        if let Some(v) = &view {
            write_rate_limit_headers(res.headers_mut(), &loaded.config.server.headers, v, self.unix_now());
        }
        log(res.status().as_u16());
        Ok(res)
    }
}

/// The JSON a route's `json:` key parts read, or the answer refusing the request when its body
/// is readable but cannot be keyed: not JSON (400), or naming the account with an array or an
/// object (400) that an upstream might still coerce. A body larger than `max_body_bytes` is
/// forwarded intact, and like an empty body or a missing field it has no key: such requests share
/// one "absent" key, so together they get one account's allowance, never one each.
fn json_key_source(route: &Route, prefix: &Prefix) -> Result<Option<serde_json::Value>, &'static str> {
    if !prefix.complete || prefix.bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(&prefix.bytes) else {
        return Err("This route needs a JSON request body.");
    };
    let pointers = route.limits.iter().flat_map(|l| l.key.parts.iter().flatten()).filter_map(|s| match s {
        KeySource::Json(p) => Some(p.as_str()),
        _ => None,
    });
    for p in pointers {
        if matches!(json.pointer(p), Some(serde_json::Value::Array(_) | serde_json::Value::Object(_))) {
            return Err("A field this route is limited by must be a string or a number.");
        }
    }
    Ok(Some(json))
}

/// A store that cannot decide (fail-closed, or full and refusing): 503, the limiter is
/// unavailable, not the client's quota.
pub(crate) fn store_failure(e: &StoreError) -> Response<Body> {
    // Logged by the observer: an event when failures start, capped decision lines after.
    tracing::debug!(target: "sluice::store", error = %e, "store could not decide");
    let mut res = respond::error(503, "limiter_unavailable", "The rate limiter is unavailable; retry shortly.");
    write_denial_headers(res.headers_mut(), 1);
    res
}

/// Guard that counts a request in flight.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Handler for Gateway {
    async fn handle(self: Arc<Self>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
        let loaded = self.current.load_full();
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        let _guard = InFlight(&self.in_flight);
        if before >= loaded.config.server.max_in_flight {
            tracing::debug!(target: "sluice::shed", in_flight = before, "shed");
            loaded.observed.shed();
            let mut res = respond::error(503, "overloaded", "The service is overloaded; retry shortly.");
            write_denial_headers(res.headers_mut(), 1);
            return Ok(res);
        }
        self.route(&loaded, peer, req).await
    }
}
