//! The default service: the seed tutorial's server, response for response.
//!
//! `GET /api/hello` is limited per client IP by a token bucket, `GET /health` answers
//! `{"status":"ok"}`, and everything else is a JSON 404. A non-GET on `/api/hello` is 405 with
//! `Allow: GET`, counted against the limit as in the tutorial (the limit is checked first).
//!
//! Its decisions are counted and logged as the gateway's are (route [`SEED_ROUTE`], policy
//! `per-ip`), and it can be inspected on an admin listener ([`crate::admin::Inspect`]):
//! `ADMIN_PORT` turns one on, on the loopback interface.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::{ManualClock, Policy};
//! use sluice_gateway::admin::Inspect;
//! use sluice_gateway::seed::{SeedConfig, SeedService};
//! use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
//!
//! let cfg = SeedConfig::from_lookup(|k| (k == "ADMIN_PORT").then(|| "9100".to_string())).unwrap();
//! assert_eq!(cfg.admin_port, Some(9100));
//! let policy = NamedPolicy { name: "per-ip".into(), policy: Policy::from(cfg.policy().unwrap()) };
//! let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(ManualClock::new(0)));
//! let seed = SeedService::new(Arc::new(store), cfg.capacity);
//! assert!(seed.metrics_text().contains("route=\"/api/hello\""));
//! assert_eq!(seed.status().decisions[0].policy, "per-ip");
//! ```

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};
use sluice_core::{Decision, ParamError, TokenBucket};
use sluice_store::{Check, KeyHash, KeyHasher, MemoryStore, Store, StoreError};

use sluice_http::enforce::{Outcome, PolicyInfo};
use sluice_http::headers::{RATELIMIT_LIMIT, RATELIMIT_REMAINING, number, retry_after_secs, write_denial_headers};
use sluice_http::identity::ClientIdentity;
use sluice_http::keys::KeyBuilder;
use sluice_http::pipeline::Timing;
use sluice_http::response::{Answer, JsonTemplate};

use crate::admin::{Inspect, Status};
use crate::client_slots::ClientSlots;
use crate::observe::{FaceObserver, FaceRoute, Observer, Scrape, policy_json};
use crate::respond::{self, Body};
use crate::serve::{Dropped, Handler};

/// The route name of the seed service's limited route, in metrics and decision lines.
pub const SEED_ROUTE: &str = "/api/hello";

/// The decision log of the seed service: the gateway's defaults (1% of admissions, denials up
/// to 100 lines a second).
pub const SEED_DECISION_LOG: sluice_config::DecisionLog =
    sluice_config::DecisionLog { sample: 0.01, denials_per_second: 100.0 };

/// The default service's settings, from `PORT`, `RATE_LIMIT_CAPACITY` and
/// `RATE_LIMIT_REFILL_PER_SECOND`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeedConfig {
    /// Port to listen on (0: any free port).
    pub port: u16,
    /// Bucket capacity.
    pub capacity: u64,
    /// Tokens added per second.
    pub refill_per_second: f64,
    /// The admin listener's port on the loopback interface (`ADMIN_PORT`; 0: any free port);
    /// `None`: no admin listener (the default).
    pub admin_port: Option<u16>,
}

impl Default for SeedConfig {
    fn default() -> Self {
        Self { port: 3000, capacity: 5, refill_per_second: 1.0, admin_port: None }
    }
}

/// A variable whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is invalid: {expected}")]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What it should be.
    pub expected: &'static str,
}

impl SeedConfig {
    /// Reads the settings through `lookup` (e.g. `|k| std::env::var(k).ok()`). Unset or empty
    /// variables take their defaults; anything malformed is an error naming the variable.
    ///
    /// ```
    /// use sluice_gateway::seed::SeedConfig;
    /// let env = |k: &str| (k == "RATE_LIMIT_CAPACITY").then(|| "abc".to_string());
    /// let err = SeedConfig::from_lookup(env).unwrap_err();
    /// assert_eq!(err.name, "RATE_LIMIT_CAPACITY");
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let mut cfg = Self::default();
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = get("PORT") {
            cfg.port = v.trim().parse().map_err(|_| EnvError {
                name: "PORT",
                value: v.clone(),
                expected: "a port number from 0 to 65535",
            })?;
        }
        if let Some(v) = get("ADMIN_PORT") {
            cfg.admin_port = Some(v.trim().parse().map_err(|_| EnvError {
                name: "ADMIN_PORT",
                value: v.clone(),
                expected: "a port number from 0 to 65535 (the admin listener, on 127.0.0.1)",
            })?);
        }
        if let Some(v) = get("RATE_LIMIT_CAPACITY") {
            cfg.capacity = v.trim().parse::<u64>().ok().filter(|&c| c > 0).ok_or(EnvError {
                name: "RATE_LIMIT_CAPACITY",
                value: v.clone(),
                expected: "a whole number of tokens, at least 1",
            })?;
        }
        if let Some(v) = get("RATE_LIMIT_REFILL_PER_SECOND") {
            cfg.refill_per_second =
                v.trim().parse::<f64>().ok().filter(|r| r.is_finite() && *r > 0.0).ok_or(EnvError {
                    name: "RATE_LIMIT_REFILL_PER_SECOND",
                    value: v.clone(),
                    expected: "a positive number of tokens per second, like 1 or 0.5",
                })?;
        }
        // Values that parse can still describe a bucket that cannot exist (its refill time
        // overflows 64-bit nanoseconds): name the variable at fault, not the core's field.
        if let Err(e) = cfg.policy() {
            let capacity_at_fault = match e {
                ParamError::Zero { field } | ParamError::TooLarge { field } | ParamError::BadRate { field, .. } => {
                    field == "capacity"
                }
                ParamError::DelayTooLarge { .. } => false,
            };
            let (name, value) = if capacity_at_fault {
                ("RATE_LIMIT_CAPACITY", get("RATE_LIMIT_CAPACITY").unwrap_or_else(|| cfg.capacity.to_string()))
            } else {
                let v = get("RATE_LIMIT_REFILL_PER_SECOND").unwrap_or_else(|| cfg.refill_per_second.to_string());
                ("RATE_LIMIT_REFILL_PER_SECOND", v)
            };
            return Err(EnvError {
                name,
                value,
                expected: "small enough that an empty bucket refills (capacity / rate) within about 584 years",
            });
        }
        Ok(cfg)
    }

    /// The token bucket these settings describe.
    pub fn policy(&self) -> Result<TokenBucket, ParamError> {
        TokenBucket::new(self.capacity, self.refill_per_second)
    }
}

/// The default service. Its store must hold one policy: the seed token bucket.
pub struct SeedService {
    /// The bucket per client address (policy 0); the memory store's single-check path.
    store: Arc<MemoryStore>,
    /// Hashes client addresses before they reach the store (a random secret per process), as
    /// the gateway keys `key = "ip"`.
    keys: KeyBuilder,
    /// Trusts nobody: the tutorial keys on the socket peer, IPv6 grouped by /56.
    identity: ClientIdentity,
    /// The bucket's capacity, for `RateLimit-Limit`.
    capacity: u64,
    /// The store's policies as the faces describe them (names in metrics and log lines).
    policies: Vec<PolicyInfo>,
    /// Counts and logs decisions under the gateway's metric names.
    observed: FaceObserver,
    /// [`SEED_ROUTE`]'s counters, resolved once: a request takes no lock to be counted.
    hello: FaceRoute,
    /// Requests being handled now (`sluice_in_flight`).
    in_flight: Arc<ClientSlots>,
    /// The headers of a denial, built once ([`denial_headers`]).
    denial_headers: HeaderMap,
    /// Tells this service's keys from another's in a thread's last key ([`SeedService::key_of`]).
    id: u64,
}

/// The tutorial's 429 body (`retryAfterSeconds`), with the snake-case field sluice uses elsewhere.
#[derive(serde::Serialize)]
struct SeedDenial {
    error: &'static str,
    message: &'static str,
    #[serde(rename = "retryAfterSeconds")]
    retry_after_camel: u64,
    retry_after_seconds: u64,
}

#[derive(serde::Serialize)]
struct SeedAllowed {
    message: &'static str,
    client: IpAddr,
}

#[derive(serde::Serialize)]
struct Health {
    status: &'static str,
}

impl SeedService {
    /// The service over `store` (whose policy 0 is the seed bucket of `capacity`). The seed
    /// service is one process with one limit: it decides on the memory store's single-check path.
    /// Its metrics go to a new [`Observer`], its decision lines follow [`SEED_DECISION_LOG`].
    pub fn new(store: Arc<MemoryStore>, capacity: u64) -> Self {
        Self::with_observer(store, capacity, Arc::new(Observer::new()), &SEED_DECISION_LOG)
    }

    /// Like [`SeedService::new`], counting into `observer` and logging decisions as `log` says.
    pub fn with_observer(
        store: Arc<MemoryStore>,
        capacity: u64,
        observer: Arc<Observer>,
        log: &sluice_config::DecisionLog,
    ) -> Self {
        let policies = store
            .policies()
            .iter()
            .map(|p| PolicyInfo { name: p.name.clone(), policy: p.policy, shadow: false })
            .collect();
        let observed = FaceObserver::new(&observer, store.as_ref(), log);
        let hello = observed.route(SEED_ROUTE);
        Self {
            store,
            keys: KeyBuilder::new(KeyHasher::random(), None),
            identity: ClientIdentity::new(Vec::new(), sluice_config::DEFAULT_IPV6_PREFIX),
            capacity,
            policies,
            observed,
            hello,
            in_flight: Arc::new(ClientSlots::new()),
            denial_headers: denial_headers(capacity),
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
        }
    }

    /// The metrics and decision log sources it counts into.
    pub fn observer(&self) -> &Arc<Observer> {
        self.observed.observer()
    }

    fn hello(&self, peer: SocketAddr, method: &Method) -> Response<Body> {
        let started = Instant::now();
        let ip = self.identity.client_ip(peer.ip(), &http::HeaderMap::new());
        let grouped = self.identity.group(ip);
        let check = Check { policy: 0, key: self.key_of(grouped), cost: 1 };
        let asked = Instant::now();
        let decided = self.store.decide_one_now(&check);
        let timing = Timing::since(started, asked);
        let outcome = decided.map(one_outcome);
        let checks = std::slice::from_ref(&check);
        let line = self.hello.record(checks, &["ip"], &self.policies, &outcome, timing);
        let res = self.answer(ip, method, &outcome);
        line.emit(res.status().as_u16());
        res
    }

    /// The keyed hash of a client address. The requests of one connection come from one
    /// address: each worker thread keeps the last one it hashed, for this service.
    fn key_of(&self, grouped: IpAddr) -> KeyHash {
        thread_local! {
            static LAST: Cell<Option<(u64, IpAddr, KeyHash)>> = const { Cell::new(None) };
        }
        LAST.with(|last| match last.get() {
            Some((id, ip, key)) if id == self.id && ip == grouped => key,
            _ => {
                let policy = self.policies.first().map_or("", |p| p.name.as_str());
                let key = self.keys.ip_key(policy, grouped);
                last.set(Some((self.id, grouped, key)));
                key
            }
        })
    }

    fn answer(&self, ip: IpAddr, method: &Method, outcome: &Result<Outcome, StoreError>) -> Response<Body> {
        let decision = match outcome {
            Ok(o) => o.decisions[0],
            Err(_) => return respond::answer(Answer::limiter_unavailable()),
        };
        let quota = |res: &mut Response<Body>| {
            res.headers_mut().insert(RATELIMIT_LIMIT.clone(), number(self.capacity));
            res.headers_mut().insert(RATELIMIT_REMAINING.clone(), number(decision.remaining));
        };
        if !decision.allowed {
            let secs = retry_after_secs(&decision);
            let (body, retry_after) = denial_of(secs);
            // The denial's headers, copied from the ones built at start-up, the three that vary
            // set in place: no header is hashed, one map allocated.
            let mut headers = self.denial_headers.clone();
            for (name, value) in headers.iter_mut() {
                if name == CONTENT_LENGTH {
                    *value = number(body.len() as u64);
                } else if name == RETRY_AFTER {
                    *value = retry_after.clone();
                } else if name == RATELIMIT_REMAINING {
                    *value = number(decision.remaining);
                }
            }
            let mut res = Response::new(respond::full(body));
            *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            *res.headers_mut() = headers;
            return res;
        }
        if method != Method::GET {
            let mut res = respond::error(405, "method_not_allowed", "Підтримується лише метод GET.");
            quota(&mut res);
            res.headers_mut().insert(ALLOW, HeaderValue::from_static("GET"));
            return res;
        }
        let mut res = respond::json(200, &SeedAllowed { message: "Запит дозволено.", client: ip });
        quota(&mut res);
        res
    }
}

/// A denial's headers as they are written for every denial of a bucket of `capacity`: its
/// `Content-Length`, `RateLimit-Remaining` and `Retry-After` are set per response.
fn denial_headers(capacity: u64) -> HeaderMap {
    let mut res = respond::answer(Answer::json_bytes(StatusCode::TOO_MANY_REQUESTS, Bytes::new(), 8));
    let headers = res.headers_mut();
    headers.insert(RATELIMIT_LIMIT.clone(), number(capacity));
    headers.insert(RATELIMIT_REMAINING.clone(), number(0));
    write_denial_headers(headers, 1);
    std::mem::take(headers)
}

/// The body and the `Retry-After` value of a denial `secs` seconds long. Denials differ only in
/// their seconds: the body is serialised once, filled per second, and the last one written is
/// kept by each worker thread (under load, most denials of a second share it).
fn denial_of(secs: u64) -> (Bytes, HeaderValue) {
    static DENIAL: LazyLock<JsonTemplate> = LazyLock::new(|| {
        JsonTemplate::new(|secs| SeedDenial {
            error: "rate_limit_exceeded",
            message: "Перевищено частоту запитів.",
            retry_after_camel: secs,
            retry_after_seconds: secs,
        })
    });
    thread_local! {
        static LAST: RefCell<Option<(u64, Bytes, HeaderValue)>> = const { RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((s, body, value)) if *s == secs => (body.clone(), value.clone()),
        _ => {
            let (body, value) = (DENIAL.render(secs), number(secs));
            *last = Some((secs, body.clone(), value.clone()));
            (body, value)
        }
    })
}

/// The outcome of the seed's one check, as the faces count outcomes.
fn one_outcome(d: Decision) -> Outcome {
    Outcome {
        allowed: d.allowed,
        decisions: vec![d],
        describe: Some(0),
        shadow_denied: Vec::new(),
        not_evaluated: Vec::new(),
        degraded: None,
        store_answered: true,
    }
}

impl Handler for SeedService {
    async fn handle(self: Arc<Self>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
        // Counted until the answer is made (the seed answers from memory, never streams).
        let _slot = self.in_flight.enter();
        let path = req.uri().path();
        if path == SEED_ROUTE {
            return Ok(self.hello(peer, req.method()));
        }
        self.observed.unmatched();
        if req.method() == Method::GET && path == "/health" {
            return Ok(respond::json(200, &Health { status: "ok" }));
        }
        Ok(respond::error(404, "not_found", "Маршрут не знайдено."))
    }
}

impl Inspect for SeedService {
    fn metrics_text(&self) -> String {
        let scrape = Scrape::of(self.store.as_ref(), self.in_flight.total());
        self.observer().metrics().render(scrape)
    }

    fn readiness(&self) -> (bool, &'static str) {
        (self.store.ready(), self.store.kind())
    }

    /// The seed service as a gateway configuration would describe it: one route, one policy.
    fn config_json(&self) -> Value {
        let policies: Vec<Value> = self.policies.iter().map(|p| policy_json(&p.name, &p.policy, false)).collect();
        json!({
            "service": "seed",
            "policies": policies,
            "routes": [{
                "name": SEED_ROUTE,
                "path": SEED_ROUTE,
                "exact": true,
                "methods": [],
                "limits": [{ "policy": self.policies.first().map(|p| p.name.as_str()), "key": "ip", "cost": 1 }],
            }],
            "store": { "kind": self.store.kind() },
        })
    }

    fn status(&self) -> Status {
        let scrape = Scrape::of(self.store.as_ref(), self.in_flight.total());
        Status::new("seed", &scrape, self.observer(), self.observed.counts(), &self.config_json())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(SeedConfig::from_lookup(env(&[])).unwrap(), SeedConfig::default());
        let c = SeedConfig::from_lookup(env(&[
            ("PORT", "8080"),
            ("RATE_LIMIT_CAPACITY", "20"),
            ("RATE_LIMIT_REFILL_PER_SECOND", "2"),
        ]))
        .unwrap();
        assert_eq!(c, SeedConfig { port: 8080, capacity: 20, refill_per_second: 2.0, admin_port: None });
    }

    #[test]
    fn malformed_values_name_the_variable_and_value() {
        for (pairs, name) in [
            (&[("RATE_LIMIT_CAPACITY", "abc")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_CAPACITY", "0")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_CAPACITY", "-1")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_CAPACITY", "2.5")][..], "RATE_LIMIT_CAPACITY"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "0")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "NaN")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "inf")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("PORT", "70000")][..], "PORT"),
            (&[("PORT", "http")][..], "PORT"),
            (&[("ADMIN_PORT", "65536")][..], "ADMIN_PORT"),
            (&[("ADMIN_PORT", "127.0.0.1:9090")][..], "ADMIN_PORT"),
            (&[("RATE_LIMIT_REFILL_PER_SECOND", "1e-300")][..], "RATE_LIMIT_REFILL_PER_SECOND"),
            (&[("RATE_LIMIT_CAPACITY", "18446744073709551615")][..], "RATE_LIMIT_CAPACITY"),
        ] {
            let pairs: &'static [(&str, &str)] = Box::leak(pairs.to_vec().into_boxed_slice());
            let e = SeedConfig::from_lookup(env(pairs)).unwrap_err();
            assert_eq!(e.name, name);
            assert_eq!(e.value, pairs[0].1);
            assert!(e.to_string().starts_with(&format!("{name}=")), "{e}");
        }
    }
}
