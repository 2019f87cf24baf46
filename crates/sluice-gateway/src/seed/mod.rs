//! The default service: the seed tutorial's server, response for response.
//!
//! `GET /api/hello` is limited per client IP by a token bucket, `GET /health` answers
//! `{"status":"ok"}`, and everything else is a JSON 404. A non-GET on `/api/hello` is 405 with
//! `Allow: GET`, counted against the limit as in the tutorial (the limit is checked first).
//!
//! It decides through the request lifecycle every face drives ([`sluice_http::lifecycle`]):
//! [`SEED_ROUTE`] is its one route, so a path is normalised (or refused) as the gateway's are:
//! `/API/Hello/` is the limited route too (Express, the tutorial's server, routes it there), and
//! a path applications read differently (`/api%2Fhello`) is refused with 400.
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

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_LENGTH, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{Value, json};
use sluice_config::{KeySource, KeySpec, Loosen, PathPattern, PathShape, Route, RouteLimit};
use sluice_core::Decision;
use sluice_store::{KeyHasher, MemoryStore, Store};

use sluice_http::enforce::{Enforcer, PolicyInfo};
use sluice_http::headers::{RATELIMIT_LIMIT, RATELIMIT_REMAINING, number, retry_after_secs, write_denial_headers};
use sluice_http::identity::ClientIdentity;
use sluice_http::keys::KeyBuilder;
use sluice_http::lifecycle::{Asked, Asks, Counted, Face, Lifecycle, Observe};
use sluice_http::pipeline::{Limiter, Ruling};
use sluice_http::response::{Answer, JsonTemplate};

use crate::admin::{Inspect, Status};
use crate::client_slots::ClientSlots;
use crate::observe::{FaceObserver, FaceRoute, Observer, Scrape, policy_json};
use crate::respond::{self, Body};
use crate::serve::{Dropped, Handler};

mod config;

pub use config::{EnvError, SeedConfig};

/// The route name of the seed service's limited route, in metrics and decision lines.
pub const SEED_ROUTE: &str = "/api/hello";

/// The decision log of the seed service: the gateway's defaults (1% of admissions, denials up
/// to 100 lines a second).
pub const SEED_DECISION_LOG: sluice_config::DecisionLog =
    sluice_config::DecisionLog { sample: 0.01, denials_per_second: 100.0 };

/// The default service. Its store must hold one policy: the seed token bucket.
pub struct SeedService {
    /// The bucket per client address (policy 0): for readiness and metrics scrapes.
    store: Arc<MemoryStore>,
    /// Decides: the socket peer as the client (trusts nobody: the tutorial keys on the peer,
    /// IPv6 grouped by /56), keyed as the gateway keys `key = "ip"`.
    limiter: Limiter,
    /// One route, [`SEED_ROUTE`], limited per client address by the seed bucket.
    routes: [Route; 1],
    /// The bucket's capacity, as `RateLimit-Limit` says it (written once).
    limit: HeaderValue,
    /// Counts and logs decisions under the gateway's metric names.
    observed: SeedObserved,
    /// Requests being handled now (`sluice_in_flight`).
    in_flight: Arc<ClientSlots>,
    /// The headers of a denial, built once ([`denial_headers`]).
    denial_headers: HeaderMap,
    /// Tells this service's denials from another's in a worker thread's last one
    /// ([`SeedService::denial`]); never reused.
    id: u64,
    /// The 200's body, serialised once around the client's address ([`AllowedBody`]).
    allowed: AllowedBody,
}

/// The seed service's observer: its one route's counters, resolved once (a request takes no
/// lock to be counted).
struct SeedObserved {
    /// Every route's counters (only [`SEED_ROUTE`] is ever decided) and the unmatched count.
    face: FaceObserver,
    /// [`SEED_ROUTE`]'s counters.
    hello: FaceRoute,
}

impl Observe for SeedObserved {
    fn decided(&self, _: Counted<'_>, ruling: &Ruling<'_>, status: u16) {
        self.hello
            .record(&ruling.checks, &ruling.kinds, ruling.policies(), &ruling.outcome, ruling.timing)
            .emit(status);
    }

    fn unmatched(&self) {
        self.face.unmatched();
    }
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

/// The 200's body ([`SeedAllowed`]) split where the client's address goes: the message is
/// escaped once, at start-up, and each request writes only its address (whose text, digits,
/// dots, colons and hex letters, needs no escaping in JSON).
struct AllowedBody {
    /// Up to the address's opening quote.
    before: Box<[u8]>,
    /// From its closing quote.
    after: Box<[u8]>,
}

impl AllowedBody {
    fn new() -> Self {
        let text = serde_json::to_vec(&SeedAllowed { message: ALLOWED_MESSAGE, client: Ipv4Addr::UNSPECIFIED.into() })
            .unwrap_or_default();
        // The address is the last field: its text is the last occurrence of it.
        let placeholder = b"\"0.0.0.0\"";
        let at = text.windows(placeholder.len()).rposition(|w| w == placeholder).unwrap_or(0);
        Self { before: text[..at + 1].into(), after: text[at + placeholder.len() - 1..].into() }
    }

    /// The body for `client`, as `serde_json` writes [`SeedAllowed`].
    fn render(&self, client: IpAddr) -> Bytes {
        use std::io::Write;
        // The longest address text (IPv6 with an IPv4 tail) is 45 bytes.
        let mut out = Vec::with_capacity(self.before.len() + 45 + self.after.len());
        out.extend_from_slice(&self.before);
        match client {
            // Four octets written directly: the formatting machinery costs more than the rest
            // of the body.
            IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push(b'.');
                    }
                    let mut buf = [0u8; 20];
                    out.extend_from_slice(sluice_core::decimal(u64::from(octet), &mut buf));
                }
            }
            IpAddr::V6(_) => {
                let _ = write!(out, "{client}");
            }
        }
        out.extend_from_slice(&self.after);
        Bytes::from(out)
    }
}

/// The tutorial's message of an admitted request.
const ALLOWED_MESSAGE: &str = "Запит дозволено.";

#[derive(serde::Serialize)]
struct Health {
    status: &'static str,
}

impl SeedService {
    /// The service over `store` (whose policy 0 is the seed bucket of `capacity`).
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
        let face = FaceObserver::new(&observer, store.as_ref(), log);
        let hello = face.route(SEED_ROUTE);
        let shared: Arc<dyn Store> = store.clone();
        let limiter = Limiter::new(
            Enforcer::of_store(shared),
            KeyBuilder::new(KeyHasher::random(), None),
            ClientIdentity::new(Vec::new(), sluice_config::DEFAULT_IPV6_PREFIX),
            // The tutorial's two headers are written by the face itself (`Seeded`).
            Vec::new(),
            StatusCode::TOO_MANY_REQUESTS,
        );
        Self {
            store,
            limiter,
            routes: [seed_route()],
            limit: number(capacity),
            observed: SeedObserved { face, hello },
            in_flight: Arc::new(ClientSlots::new()),
            denial_headers: denial_headers(capacity),
            allowed: AllowedBody::new(),
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
        }
    }

    /// The metrics and decision log sources it counts into.
    pub fn observer(&self) -> &Arc<Observer> {
        self.observed.face.observer()
    }

    /// The policies of its store as the faces describe them.
    fn policies(&self) -> &[PolicyInfo] {
        self.limiter.policies()
    }
}

/// [`SEED_ROUTE`], exactly, any method, one token of policy 0 per request, keyed on the
/// client address.
fn seed_route() -> Route {
    Route {
        name: SEED_ROUTE.into(),
        path: PathPattern { shape: PathShape::Path(SEED_ROUTE.into()), exact: true },
        methods: None,
        limits: vec![RouteLimit {
            policy: 0,
            key: KeySpec { parts: vec![vec![KeySource::Ip]] },
            cost: 1,
            cost_from: None,
            plan: None,
        }],
        loosen: Loosen::default(),
        cors: None,
        upstream: None,
        timeouts: Default::default(),
        websocket: false,
    }
}

/// The seed service's face: an admitted `GET /api/hello` is answered 200 with the client's
/// address, any other method 405 (the limit is checked first, as in the tutorial); a denial
/// is the tutorial's 429; `GET /health` is the only other path answered.
struct Seeded<'s> {
    /// The service (its capacity, its denial headers).
    service: &'s SeedService,
    /// The client's address, for the 200's body.
    client: IpAddr,
}

impl Seeded<'_> {
    /// The decision of the seed's one limit.
    fn decision(ruling: &Ruling<'_>) -> Option<Decision> {
        ruling.outcome.as_ref().ok()?.decisions.first().copied()
    }

    /// The tutorial's two rate-limit headers.
    fn quota(&self, res: &mut Response<Body>, decision: Decision) {
        res.headers_mut().insert(RATELIMIT_LIMIT.clone(), self.service.limit.clone());
        res.headers_mut().insert(RATELIMIT_REMAINING.clone(), number(decision.remaining));
    }
}

// The request stays where hyper handed it over: the lifecycle is given what it asks (a few
// references), not the request itself, so no future holds a copy of it.
impl<'a> Face for Seeded<'a> {
    type Request = Asked<'a>;
    type Response = Response<Body>;
    type Error = Infallible;

    fn answer(&self, answer: Answer) -> Response<Body> {
        respond::answer(answer)
    }

    fn status(response: &Response<Body>) -> u16 {
        response.status().as_u16()
    }

    // Answered at once, not from an `async fn`: no future is made for it.
    fn pass_on(
        self,
        asked: Asked<'a>,
        _: Counted<'_>,
        ruling: &Ruling<'_>,
    ) -> impl Future<Output = Result<Response<Body>, Infallible>> {
        let mut res = if asked.method != Method::GET.as_str() {
            let mut res = respond::error(405, "method_not_allowed", "Підтримується лише метод GET.");
            res.headers_mut().insert(ALLOW, HeaderValue::from_static("GET"));
            res
        } else {
            let body = self.service.allowed.render(self.client);
            respond::answer(Answer::json_bytes(StatusCode::OK, body, 4))
        };
        if let Some(decision) = Self::decision(ruling) {
            self.quota(&mut res, decision);
        }
        std::future::ready(Ok(res))
    }

    fn deny(self, _: Counted<'_>, ruling: &Ruling<'_>) -> Result<Response<Body>, Infallible> {
        let Some(decision) = Self::decision(ruling) else { return Ok(respond::answer(ruling.denial())) };
        let (body, headers) = self.service.denial(retry_after_secs(&decision), decision.remaining);
        let mut res = Response::new(respond::full(body));
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        *res.headers_mut() = headers;
        Ok(res)
    }

    fn unmatched(self, asked: Asked<'a>) -> impl Future<Output = Result<Response<Body>, Infallible>> {
        let res = match asked.method == Method::GET.as_str() && asked.path == "/health" {
            true => respond::json(200, &Health { status: "ok" }),
            false => respond::error(404, "not_found", "Маршрут не знайдено."),
        };
        std::future::ready(Ok(res))
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

impl SeedService {
    /// The body and headers of a denial `secs` seconds long with `remaining` left. Denials of
    /// one service differ only in those two: the body is serialised once and filled per second,
    /// the headers copied from the ones built at start-up with the three that vary set in place,
    /// and the last denial made is kept by each worker thread (under load, most denials of a
    /// second share it; one map is copied, no header hashed).
    fn denial(&self, secs: u64, remaining: u64) -> (Bytes, HeaderMap) {
        static DENIAL: LazyLock<JsonTemplate> = LazyLock::new(|| {
            JsonTemplate::new(|secs| SeedDenial {
                error: "rate_limit_exceeded",
                message: "Перевищено частоту запитів.",
                retry_after_camel: secs,
                retry_after_seconds: secs,
            })
        });
        /// Which service, how many seconds, how many left: what a denial was made for.
        type Made = (u64, u64, u64);
        thread_local! {
            static LAST: RefCell<Option<(Made, Bytes, HeaderMap)>> = const { RefCell::new(None) };
        }
        let made = (self.id, secs, remaining);
        LAST.with_borrow_mut(|last| match last {
            Some((m, body, headers)) if *m == made => (body.clone(), headers.clone()),
            _ => {
                let body = DENIAL.render(secs);
                let mut headers = self.denial_headers.clone();
                for (name, value) in headers.iter_mut() {
                    if name == CONTENT_LENGTH {
                        *value = number(body.len() as u64);
                    } else if name == RETRY_AFTER {
                        *value = number(secs);
                    } else if name == RATELIMIT_REMAINING {
                        *value = number(remaining);
                    }
                }
                *last = Some((made, body.clone(), headers.clone()));
                (body, headers)
            }
        })
    }
}

impl Handler for SeedService {
    async fn handle(self: Arc<Self>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
        // Counted until the answer is made (the seed answers from memory, never streams).
        let _slot = self.in_flight.enter();
        let client = self.limiter.client(peer.ip(), req.headers());
        let face = Seeded { service: &self, client: client.ip };
        let lifecycle = Lifecycle::new(&self.limiter, &self.observed);
        match lifecycle.routed(&self.routes, &client, req.asked(), face).await {
            Ok(res) => Ok(res),
            Err(never) => match never {},
        }
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
        let policies: Vec<Value> =
            self.policies().iter().map(|p| policy_json(&PolicyInfo::enforced(&p.name, p.policy))).collect();
        json!({
            "service": "seed",
            "policies": policies,
            "routes": [{
                "name": SEED_ROUTE,
                "path": SEED_ROUTE,
                "exact": true,
                "methods": [],
                "limits": [{ "policy": self.policies().first().map(|p| p.name.as_str()), "key": "ip", "cost": 1 }],
            }],
            "store": { "kind": self.store.kind() },
        })
    }

    fn status(&self) -> Status {
        let scrape = Scrape::of(self.store.as_ref(), self.in_flight.total());
        Status::new("seed", &scrape, self.observer(), self.observed.face.counts(), &self.config_json())
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::{ManualClock, Policy, TokenBucket};
    use sluice_store::{MemoryOptions, NamedPolicy};

    use super::*;

    fn service(capacity: u64) -> SeedService {
        let policy =
            NamedPolicy { name: "per-ip".into(), policy: Policy::from(TokenBucket::new(capacity, 1.0).unwrap()) };
        let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(ManualClock::new(0)));
        SeedService::new(Arc::new(store), capacity)
    }

    #[test]
    fn the_admitted_body_is_what_serde_json_writes_for_every_kind_of_address() {
        let body = AllowedBody::new();
        for client in
            ["203.0.113.9", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::", "::ffff:192.0.2.1", "fe80::1:2:3:4"]
        {
            let client: IpAddr = client.parse().unwrap();
            let expected = serde_json::to_vec(&SeedAllowed { message: ALLOWED_MESSAGE, client }).unwrap();
            assert_eq!(body.render(client), expected, "{client}");
        }
    }

    #[test]
    fn a_thread_s_last_denial_is_never_another_service_s_or_another_second_s() {
        let (two, seven) = (service(2), service(7));
        let header = |h: &HeaderMap, name: &str| h.get(name).map(|v| v.to_str().unwrap().to_string());
        for (s, secs, limit) in [(&two, 3, "2"), (&two, 3, "2"), (&seven, 3, "7"), (&two, 4, "2"), (&seven, 4, "7")] {
            let (body, headers) = s.denial(secs, 0);
            assert_eq!(header(&headers, "ratelimit-limit").as_deref(), Some(limit));
            assert_eq!(header(&headers, "retry-after"), Some(secs.to_string()));
            assert_eq!(header(&headers, "content-length"), Some(body.len().to_string()));
            let json: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["retryAfterSeconds"], secs);
        }
    }
}
