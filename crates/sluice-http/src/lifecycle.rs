//! The one request lifecycle every face drives. A face brings the request's facts and says what
//! "pass it on" means; the lifecycle does everything else, in this order, the same way for all:
//!
//! ```text
//! route path ─▶ route ─▶ body kind ─▶ decide what needs no body ─▶ read the body, decide again
//!     │ refused: counted, 400       │ no route: Face::unmatched
//!     ▼
//! act: Deny ─▶ Face::deny │ Unavailable ─▶ 503 │ Admit { delay } ─▶ sleep ─▶ Face::pass_on
//!     ▼                                                                  ▼ rate-limit headers
//! observe once (Observe::decided, with the response's status)
//! ```
//!
//! The faces: the gateway (pass on = proxy, or answer 200 itself), forward-auth (answer 200 to
//! the proxy that asked), the tower layer (call the inner service), the decision API (answer the
//! decision in JSON; its checks are named by the caller, [`Lifecycle::checked`]), the seed
//! service (answer the tutorial's JSON), Envoy's rate-limit service (answer Envoy; it decides
//! its descriptors itself, [`Lifecycle::ruled`]) and the simulator's judge (record the
//! decision). Each differs only in its [`Face`].
//!
//! ```
//! use std::sync::Arc;
//! use http::HeaderMap;
//! use sluice_http::lifecycle::{Counted, Face, Lifecycle, Unobserved};
//! use sluice_http::pipeline::{Limiter, Ruling};
//! use sluice_http::response::Answer;
//! use sluice_store::{KeyHasher, MemoryOptions, MemoryStore, NamedPolicy, Store};
//!
//! let config = sluice_config::parse("example.toml", r#"
//! [[policy]]
//! name = "per-ip"
//! algorithm = "fixed-window"
//! limit = 1
//! window = "1m"
//! [[route]]
//! path = "/api/*"
//! limits = [{ policy = "per-ip", key = "ip" }]
//! "#).unwrap();
//! let clock = Arc::new(sluice_core::ManualClock::new(0));
//! let policies = config.policies.iter().map(|p| NamedPolicy { name: p.name.clone(), policy: p.policy }).collect();
//! let store: Arc<dyn Store> = Arc::new(MemoryStore::new(policies, MemoryOptions::default(), clock));
//! let limiter = Limiter::of_config(&config, store, KeyHasher::random());
//!
//! /// A face that answers admitted requests with their status, and everything else with its own.
//! struct Status;
//! impl Face for Status {
//!     type Request = http::Request<()>;
//!     type Response = u16;
//!     type Error = std::convert::Infallible;
//!     fn answer(&self, answer: Answer) -> u16 { answer.status.as_u16() }
//!     fn status(response: &u16) -> u16 { *response }
//!     async fn pass_on(self, _: http::Request<()>, _: Counted<'_>, _: &Ruling<'_>) -> Result<u16, Self::Error> {
//!         Ok(200)
//!     }
//! }
//!
//! let client = limiter.client("203.0.113.9".parse().unwrap(), &HeaderMap::new());
//! let lifecycle = Lifecycle::new(&limiter, &Unobserved);
//! let run = |path: &str| {
//!     let request = http::Request::get(path).body(()).unwrap();
//!     let request = lifecycle.routed(&config.routes, &client, request, Status);
//!     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(request).unwrap()
//! };
//! assert_eq!(run("/api/items"), 200);
//! assert_eq!(run("/api/items"), 429, "the second in the same minute");
//! assert_eq!(run("/elsewhere"), 404, "no route: the default Face::unmatched");
//! assert_eq!(run("/api/a%2Fb"), 400, "a path applications read differently is refused");
//! ```

use std::future::Future;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sluice_config::{CostFrom, Loosen, Route, RouteLimit, find_route};
use sluice_store::Settle;

use crate::body_key::{BodyKind, body_kind, keyable_body, needs_body};
use crate::identity::{Client, PeerCertificate};
use crate::keys::RequestFacts;
use crate::meter::{Meter, Reading};
use crate::pipeline::{Action, Checks, Limiter, Refusal, Ruling, route_path};
use crate::response::Answer;

/// The whole number in the one field line of `name` in `headers`: ASCII digits only, no sign,
/// no spaces, no second line (which of two would be the cost?).
fn response_cost(headers: &HeaderMap, name: &str) -> Option<u64> {
    let mut lines = headers.get_all(name).iter();
    let value = lines.next()?.as_bytes();
    if lines.next().is_some() || value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// What a request says of itself before anything is decided: all the lifecycle reads of it.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'r> {
    /// The method, as sent (routes and keys read it whatever its case).
    pub method: &'r str,
    /// The path as sent (not yet normalised: the lifecycle normalises it, or refuses it).
    pub path: &'r str,
    /// The query string, if any (a keyed body's field must not also be in it).
    pub query: Option<&'r str>,
    /// The request's headers.
    pub headers: &'r HeaderMap,
    /// The client certificate its connection's TLS handshake verified, if any.
    pub tls: Option<&'r PeerCertificate>,
}

/// A request as a face holds it, able to say what it asks ([`Asked`]).
pub trait Asks {
    /// The method, path, query and headers the lifecycle reads.
    fn asked(&self) -> Asked<'_>;
}

impl Asks for http::request::Parts {
    fn asked(&self) -> Asked<'_> {
        Asked {
            method: self.method.as_str(),
            path: self.uri.path(),
            query: self.uri.query(),
            headers: &self.headers,
            tls: self.extensions.get(),
        }
    }
}

impl<B> Asks for http::Request<B> {
    fn asked(&self) -> Asked<'_> {
        let uri = self.uri();
        Asked {
            method: self.method().as_str(),
            path: uri.path(),
            query: uri.query(),
            headers: self.headers(),
            tls: self.extensions().get(),
        }
    }
}

impl Asks for Asked<'_> {
    fn asked(&self) -> Asked<'_> {
        *self
    }
}

/// Where a decision is counted: the metrics' `route` label and the counters of its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted<'a> {
    /// A configured route: its position among the configuration's routes, and its name. Its
    /// checks are counted by their position among the route's limits.
    Route(usize, &'a str),
    /// A face with a fixed name whose checks are counted by their policy (the tower layer, the
    /// decision API, the seed service, a rate-limit service domain).
    Named(&'a str),
}

impl<'a> Counted<'a> {
    /// The name the metrics and the decision log use.
    pub fn name(self) -> &'a str {
        match self {
            Counted::Route(_, name) | Counted::Named(name) => name,
        }
    }
}

/// Told of what becomes of every request a lifecycle runs: where a face plugs in metrics and
/// decision logs (`sluice-gateway`'s observers count them under the gateway's names), without
/// this crate depending on any of them.
pub trait Observe: Send + Sync {
    /// A request was decided under `at`; `status` is its response's (the deny status, 503 when
    /// the store could not decide, the status of what the face passed it on to; 0 when there is
    /// none: the connection was dropped, or the service failed). Called once per decided request.
    fn decided(&self, at: Counted<'_>, ruling: &Ruling<'_>, status: u16);

    /// A request was refused before any limit decided it: under `at`, or before a route was
    /// found (its path) when `None`.
    fn refused(&self, at: Option<Counted<'_>>, why: &Refusal) {
        let _ = (at, why);
    }

    /// A request matched no route: no limit applies to it.
    fn unmatched(&self) {}
}

/// An observer that is told nothing (a face without metrics: the simulator's judge).
#[derive(Debug, Clone, Copy, Default)]
pub struct Unobserved;

impl Observe for Unobserved {
    fn decided(&self, _: Counted<'_>, _: &Ruling<'_>, _: u16) {}
}

/// The first bytes of a request body a face read for the limits that key on it.
#[derive(Debug, Clone)]
pub struct BodyPrefix {
    /// At most the bound the face reads, plus the rest of the frame that crossed it.
    pub bytes: Bytes,
    /// True when the whole body fit in `bytes` (a larger body is never keyed: see
    /// [`keyable_body`]).
    pub complete: bool,
}

/// What a face brings to the lifecycle: how to answer, and what passing a request on means.
///
/// Every method but [`Face::pass_on`] has a default that suits a face answering HTTP itself.
pub trait Face: Sized {
    /// The request as the face holds it until it is passed on (its head, the whole request, a
    /// proxy's description of another request...).
    type Request;
    /// What the face answers with (an HTTP response, a judgement...).
    type Response;
    /// What can go wrong passing a request on that is no response (a dropped connection, an
    /// inner service's error).
    type Error;

    /// True when an admitted request is held for its shaping delay before it is passed on;
    /// false for a face that tells its caller the delay instead (the decision API).
    const HOLDS_DELAY: bool = true;

    /// One of sluice's own answers (a refusal, a denial, 503) as the face's response.
    fn answer(&self, answer: Answer) -> Self::Response;

    /// The status of a response, for the decision log (0 when it has none).
    fn status(response: &Self::Response) -> u16;

    /// Where the rate-limit headers of an admitted request go, if the response has headers.
    fn headers_mut(response: &mut Self::Response) -> Option<&mut HeaderMap> {
        let _ = response;
        None
    }

    /// The headers of a request about to be passed on, where what the limits found is told to
    /// what it is passed on to (the soft limits it is over: [`crate::headers::SOFT_LIMITED`]);
    /// `None` for a face that passes no request on (the default).
    fn request_headers(request: &mut Self::Request) -> Option<&mut HeaderMap> {
        let _ = request;
        None
    }

    /// What the service a request was passed on to says it cost, beside its response (the tower
    /// layer's inner service: [`crate::layer::UsedCost`]); `None` by default.
    fn reported_cost(response: &Self::Response) -> Option<u64> {
        let _ = response;
        None
    }

    /// Meters the body of `response`, a passed request's, for the limits whose cost it says
    /// (`cost_from = "response-bytes"`, `"response-json:..."`): the face wraps the body in a
    /// [`crate::meter::Metered`] and attaches `meter`. By default the body is not metered and
    /// those limits keep their reservations (a face whose response is not the upstream's).
    fn meter(response: Self::Response, meter: Meter) -> Self::Response {
        meter.unmetered();
        response
    }

    /// Passes an admitted `request`, decided under `at`, on (after its shaping delay): proxy it, call the inner
    /// service, answer the proxy that asked. The lifecycle adds the rate-limit headers.
    fn pass_on(
        self,
        request: Self::Request,
        at: Counted<'_>,
        ruling: &Ruling<'_>,
    ) -> impl Future<Output = Result<Self::Response, Self::Error>>;

    /// Answers a request denied under `at`; by default with [`Ruling::denial`] (the deny status,
    /// `Retry-After`, the rate-limit headers, the JSON body). A face may change the status, write
    /// its own body, or drop the connection.
    fn deny(self, at: Counted<'_>, ruling: &Ruling<'_>) -> Result<Self::Response, Self::Error> {
        let _ = at;
        Ok(self.answer(ruling.denial()))
    }

    /// Answers a request the store could not decide (and whose failure mode does not admit);
    /// by default with 503 ([`Answer::limiter_unavailable`]).
    fn unavailable(self, at: Counted<'_>, ruling: &Ruling<'_>) -> Result<Self::Response, Self::Error> {
        let _ = (at, ruling);
        Ok(self.answer(Answer::limiter_unavailable()))
    }

    /// Answers a request no route matches; by default a JSON 404.
    fn unmatched(self, request: Self::Request) -> impl Future<Output = Result<Self::Response, Self::Error>> {
        let _ = request;
        let answer = self.answer(Answer::error(StatusCode::NOT_FOUND, "not_found", "No such route."));
        async move { Ok(answer) }
    }

    /// True when the face can read the request's body for the limits that key on it.
    fn reads_body(&self) -> bool {
        false
    }

    /// Reads the first bytes of the body (at most the face's bound), keeping the body whole for
    /// [`Face::pass_on`]; or the answer when it cannot (too slow, too many at once, broken).
    /// Only called when [`Face::reads_body`].
    fn read_body(&mut self) -> impl Future<Output = Result<BodyPrefix, Answer>> {
        async { Err(Answer::bad_request("This request's body cannot be read here.")) }
    }

    /// Answers a request whose route (at `route` among the routes) keys a limit on the body, when
    /// the face cannot read bodies; nothing is decided. By default 500 `not_decidable`.
    fn body_unreadable(self, route: usize) -> Self::Response {
        let _ = route;
        let message = "This route keys a limit on the request body, which is not sent here.";
        self.answer(Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "not_decidable", message))
    }
}

/// `checks` decided by `limiter`: at once when the store needs nothing awaited, else awaited.
/// A macro, so that no future is made for a store that decides at once.
macro_rules! decided {
    ($limiter:expr, $checks:expr) => {{
        let limiter: &Limiter = $limiter;
        match limiter.decide_at_once($checks) {
            Ok(ruling) => ruling,
            Err(checks) => limiter.decide(checks).await,
        }
    }};
}

/// Decides a request's `limits` (in the async fn that acts on it): those that need no body
/// ([`Lifecycle::bodiless`]) then, only if they admit and a limit keys on the body,
/// [`Lifecycle::with_body`]. A macro for the reason `act!` is one: the ruling is moved from the
/// limiter's future once, into the caller's. A request that goes no further is answered by the
/// face: the macro returns from the async fn it is in.
macro_rules! decide {
    ($lifecycle:expr, $at:expr, $limits:expr, $loosen:expr, $path:expr, $client:expr, $asked:expr, $face:expr) => {{
        let (lifecycle, at, limits) = ($lifecycle, $at, $limits);
        let (first, deciding) = match lifecycle.bodiless(at, limits, $loosen, $path, $client, $asked) {
            Ok(first) => first,
            Err(answer) => return Ok($face.answer(answer)),
        };
        let ruling = decided!(lifecycle.limiter, first);
        match deciding.body {
            Some(kind) if ruling.allowed() => {
                match lifecycle.with_body(at, limits, (deciding.facts, kind), ruling, &mut $face).await {
                    Ok(ruling) => ruling,
                    Err(answer) => return Ok($face.answer(answer)),
                }
            }
            _ => ruling,
        }
    }};
}

/// What the checks of a request's limits that need no body were built from, for those that do.
struct Deciding<'r> {
    /// The request's facts, its body not yet read.
    facts: RequestFacts<'r>,
    /// `Some` when a limit keys on the body: its kind, as [`body_kind`] read it from the
    /// headers.
    body: Option<Option<BodyKind>>,
}

/// Carries out a decided request's action (in the async fn that decided it): the denial or 503
/// answered, or the shaping delay slept and the request passed on, its response given the
/// rate-limit headers; then observed, once, with the response's status.
///
/// Why a macro and not an async fn: every async fn a request goes through is one more future
/// its arguments and the futures it awaits are moved into (memcpy of their whole size). Passing
/// the request, the face and the ruling through an `act` future cost the proxied request about
/// 1,500 instructions (bench/instructions.sh); here the ruling stays where it was decided and
/// the request and face move once, into [`Face::pass_on`] (or the face into its denial). Used
/// last in an async fn: a denial returns from it.
macro_rules! act {
    ($lifecycle:expr, $face_type:ty, $at:expr, $ruling:expr, $request:expr, $face:expr, $limits:expr) => {{
        let (lifecycle, at, ruling) = ($lifecycle, $at, &$ruling);
        let delay = match ruling.action() {
            Action::Admit { delay } => delay,
            Action::Deny => {
                return lifecycle.answered::<$face_type>(at, ruling, $face.deny(at, ruling));
            }
            Action::Unavailable => {
                return lifecycle.answered::<$face_type>(at, ruling, $face.unavailable(at, ruling));
            }
        };
        if <$face_type as Face>::HOLDS_DELAY && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let mut request = $request;
        if let Some(headers) = <$face_type as Face>::request_headers(&mut request) {
            ruling.mark_soft_limited(headers);
        }
        // Only the response is held across the settlement: a face's error need not be `Send`.
        let mut response = match $face.pass_on(request, at, ruling).await {
            Ok(response) => response,
            Err(e) => {
                // No response: the request is over (its concurrency slots given back as the
                // meter drops; its costs keep their reservations).
                drop(lifecycle.response_costs($limits, ruling, (None, None)));
                return lifecycle.passed::<$face_type>(at, ruling, Err(e));
            }
        };
        // Limits whose cost the response says: their reservations settled to it, from its
        // head now, from its body when the body ends (and concurrency slots given back then).
        let reported = <$face_type as Face>::reported_cost(&response);
        let (now, meter) = lifecycle.response_costs(
            $limits,
            ruling,
            (<$face_type as Face>::headers_mut(&mut response).map(|h| &*h), reported),
        );
        if !now.is_empty() {
            lifecycle.limiter.settle(&now).await;
        }
        if let Some(meter) = meter {
            response = <$face_type as Face>::meter(response, meter);
        }
        lifecycle.passed::<$face_type>(at, ruling, Ok(response))
    }};
}

/// One face's way through the pipeline: its limiter, and who is told of each request.
pub struct Lifecycle<'a> {
    /// Decides: identity, keys, store, answers.
    limiter: &'a Limiter,
    /// Told of every request's end.
    observer: &'a dyn Observe,
}

impl<'a> Lifecycle<'a> {
    /// A lifecycle deciding with `limiter`, telling `observer`.
    pub fn new(limiter: &'a Limiter, observer: &'a dyn Observe) -> Self {
        Self { limiter, observer }
    }

    /// `request`, from `client`, routed by `routes`: its path normalised (or refused), the first
    /// route that matches its method and path, then decided by that route's limits, acted on,
    /// passed on and observed.
    pub async fn routed<F>(
        &self,
        routes: &[Route],
        client: &Client,
        request: F::Request,
        mut face: F,
    ) -> Result<F::Response, F::Error>
    where
        F: Face,
        F::Request: Asks,
    {
        let asked = request.asked();
        // Routes match, and the `path` key part reads, the normalised path: spellings of one
        // resource share one route and one key; a path upstreams read differently is refused,
        // never passed on unlimited.
        let path = match route_path(asked.path) {
            Ok(p) => p,
            Err(refused) => return Ok(self.refuse(None, &refused, &face)),
        };
        let Some((index, route)) = find_route(routes, asked.method, &path) else {
            self.observer.unmatched();
            drop(path);
            return face.unmatched(request).await;
        };
        if needs_body(&route.limits) && !face.reads_body() {
            return Ok(face.body_unreadable(index));
        }
        let at = Counted::Route(index, &route.name);
        let ruling = decide!(self, at, &route.limits, route.loosen, &path, client, asked, face);
        drop(path);
        act!(self, F, at, ruling, request, face, &route.limits)
    }

    /// `request`, from `client`, under every one of `limits` (the tower layer: no routes),
    /// counted under `name`. Its path is normalised (or refused) as a routed request's, and is
    /// its `route` key part.
    pub async fn limited<F>(
        &self,
        name: &str,
        limits: &[RouteLimit],
        client: &Client,
        request: F::Request,
        mut face: F,
    ) -> Result<F::Response, F::Error>
    where
        F: Face,
        F::Request: Asks,
    {
        let asked = request.asked();
        let path = match route_path(asked.path) {
            Ok(p) => p,
            Err(refused) => return Ok(self.refuse(None, &refused, &face)),
        };
        let at = Counted::Named(name);
        let ruling = decide!(self, at, limits, Loosen::default(), &path, client, asked, face);
        drop(path);
        act!(self, F, at, ruling, request, face, limits)
    }

    /// Checks the face built itself (the decision API names its keys): decided, acted on and
    /// observed under `at`.
    pub async fn checked<F: Face>(
        &self,
        at: Counted<'_>,
        checks: Checks,
        request: F::Request,
        face: F,
    ) -> Result<F::Response, F::Error> {
        let ruling = decided!(self.limiter, checks);
        act!(self, F, at, ruling, request, face, &[])
    }

    /// A ruling the face reached itself, acted on and observed under `at`: the rate-limit
    /// service decides a request's descriptors in one store call or several, as its charging
    /// says, and then answers through the lifecycle like every face.
    pub async fn ruled<F: Face>(
        &self,
        at: Counted<'_>,
        ruling: Ruling<'_>,
        request: F::Request,
        face: F,
    ) -> Result<F::Response, F::Error> {
        act!(self, F, at, ruling, request, face, &[])
    }

    /// The checks of `limits` that need no body (decided first: a client whose quota is spent is
    /// refused before its body is read, and each body read is charged to it), and what the rest
    /// is decided from. The answer, already counted, when the request goes no further.
    // The answer is as large as the checks beside it, and returned only when the request ends.
    #[allow(clippy::too_many_arguments, clippy::result_large_err)]
    fn bodiless<'r>(
        &self,
        at: Counted<'r>,
        limits: &[RouteLimit],
        loosen: Loosen,
        path: &'r str,
        client: &'r Client,
        asked: Asked<'r>,
    ) -> Result<(Checks, Deciding<'r>), Answer> {
        let facts = RequestFacts {
            method: asked.method,
            path,
            route: match at {
                Counted::Route(_, name) => name,
                Counted::Named(_) => path,
            },
            client,
            headers: asked.headers,
            tls: asked.tls,
            body: None,
        };
        // A body the route keys on must be read as the application will read it: its content
        // type and the query string are checked before anything is charged.
        let body = match needs_body(limits) {
            true => Some(
                body_kind(limits, loosen, asked.headers, asked.query)
                    .map_err(|why| self.refused(Some(at), &why.into()))?,
            ),
            false => None,
        };
        let first = self
            .limiter
            .checks_of(limits, &facts, |l| !l.key.needs_body())
            .map_err(|why| self.refused(Some(at), &why))?;
        Ok((first, Deciding { facts, body }))
    }

    /// Reads the body of a request the bodiless checks of `limits` admitted (`ruling`), and
    /// decides the limits that key on it. The answer, already counted, when the request goes no
    /// further.
    async fn with_body<F: Face>(
        &self,
        at: Counted<'_>,
        limits: &[RouteLimit],
        (facts, kind): (RequestFacts<'_>, Option<BodyKind>),
        ruling: Ruling<'a>,
        face: &mut F,
    ) -> Result<Ruling<'a>, Answer> {
        let prefix = match face.read_body().await {
            Ok(p) => p,
            Err(answer) => {
                self.observer.decided(at, &ruling, answer.status.as_u16());
                return Err(answer);
            }
        };
        let keyed = keyable_body(limits, kind, &prefix.bytes, prefix.complete)
            .map_err(|why| self.refused(Some(at), &why.into()))?;
        let facts = RequestFacts { body: keyed.as_ref(), ..facts };
        let later = self
            .limiter
            .checks_of(limits, &facts, |l| l.key.needs_body())
            .map_err(|why| self.refused(Some(at), &why))?;
        let later = decided!(self.limiter, later);
        // All or nothing across the phases: a request the body's limits deny (or the store
        // cannot decide) is not passed on, so what the bodiless limits charged is given back.
        // A body that could not be read or keyed (above) keeps those charges: reading it was
        // the work they limit.
        if !matches!(later.action(), Action::Admit { .. }) {
            self.limiter.refund(&ruling).await;
        }
        Ok(ruling.then(later))
    }

    /// The settlements a passed request's response asks for: each charged check whose limit
    /// (among `limits`, the face's list) reads its cost from the response, or holds a
    /// concurrency slot. Those read from the head (`response-header:NAME`, of `headers`: none
    /// when the face has no response), settled to what it says (a response that does not say —
    /// the header missing, repeated, or not a whole number — leaves the reservation as it was);
    /// and a meter for the others, settled when the body ends. Empty, without allocating, when
    /// no limit reads its cost from the response or counts requests in flight.
    fn response_costs(
        &self,
        limits: &[RouteLimit],
        ruling: &Ruling<'_>,
        (headers, reported): (Option<&HeaderMap>, Option<u64>),
    ) -> (Vec<Settle>, Option<Meter>) {
        let enforcer = self.limiter.enforcer();
        let held = |policy: usize| enforcer.policy(policy).is_some_and(|p| p.concurrency);
        if !limits.iter().any(|l| l.cost_from.is_some() || held(l.policy)) {
            return (Vec::new(), None);
        }
        let Ok(outcome) = &ruling.outcome else { return (Vec::new(), None) };
        let mut from_body = Vec::new();
        let now = enforcer
            .charged(&ruling.checks, outcome)
            .filter_map(|(i, settle)| {
                if held(settle.check.policy) {
                    // A concurrency limit is a sliding log of leases: its window is the lease.
                    let lease = enforcer.policy(settle.check.policy).map_or(0, |p| p.policy.window());
                    from_body.push((settle, Reading::Release { lease }));
                    return None;
                }
                let from = limits.get(ruling.positions[i])?.cost_from.as_ref()?;
                if *from == CostFrom::ResponseExtension {
                    return reported.map(|actual| Settle { actual, ..settle });
                }
                let CostFrom::ResponseHeader(name) = from else {
                    from_body.push((settle, Reading::of(from)?));
                    return None;
                };
                match headers.and_then(|h| response_cost(h, name)) {
                    Some(actual) => Some(Settle { actual, ..settle }),
                    None => {
                        tracing::debug!(target: "sluice::settle", header = %name, "the response does not say what it cost: the reservation stands");
                        None
                    }
                }
            })
            .collect();
        let none = HeaderMap::new();
        (now, Meter::new(enforcer.store().clone(), from_body, headers.unwrap_or(&none)))
    }

    /// A decided request's answer (a denial, a 503, or the response of what the face passed it
    /// on to), observed once with its status.
    fn answered<F: Face>(
        &self,
        at: Counted<'_>,
        ruling: &Ruling<'_>,
        answered: Result<F::Response, F::Error>,
    ) -> Result<F::Response, F::Error> {
        self.observer.decided(at, ruling, answered.as_ref().map_or(0, F::status));
        answered
    }

    /// [`Lifecycle::answered`], for what the face passed the request on to: its response gets
    /// the rate-limit headers first.
    fn passed<F: Face>(
        &self,
        at: Counted<'_>,
        ruling: &Ruling<'_>,
        passed: Result<F::Response, F::Error>,
    ) -> Result<F::Response, F::Error> {
        let passed = passed.map(|mut res| {
            if let Some(headers) = F::headers_mut(&mut res) {
                ruling.write_headers(headers);
            }
            res
        });
        self.answered::<F>(at, ruling, passed)
    }

    /// Counts a request refused before any limit decided it, and gives its answer.
    fn refused(&self, at: Option<Counted<'_>>, why: &Refusal) -> Answer {
        self.observer.refused(at, why);
        why.answer()
    }

    /// [`Lifecycle::refused`], answered by `face`.
    fn refuse<F: Face>(&self, at: Option<Counted<'_>>, why: &Refusal, face: &F) -> F::Response {
        face.answer(self.refused(at, why))
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;

    use super::response_cost;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        /// An upstream's usage header is read as a cost only when it is one field line of ASCII
        /// digits that fits in 64 bits; signs, spaces, decimals, hex, empty or repeated lines
        /// and anything else are no cost (the reservation stands), and nothing panics.
        #[test]
        fn a_response_cost_is_one_line_of_digits_or_none(
            lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..3),
            digits in "[0-9]{1,25}",
        ) {
            let mut h = HeaderMap::new();
            for line in lines.iter().filter_map(|l| HeaderValue::from_bytes(l).ok()) {
                h.append("x-usage", line);
            }
            let sent: Vec<&[u8]> = h.get_all("x-usage").iter().map(HeaderValue::as_bytes).collect();
            let expected = match sent.as_slice() {
                [one] if !one.is_empty() && one.iter().all(u8::is_ascii_digit) => {
                    std::str::from_utf8(one).unwrap().parse::<u64>().ok()
                }
                _ => None,
            };
            prop_assert_eq!(response_cost(&h, "x-usage"), expected);

            let mut h = HeaderMap::new();
            h.insert("x-usage", HeaderValue::from_str(&digits).unwrap());
            let fits = digits.parse::<u128>().unwrap() <= u128::from(u64::MAX);
            prop_assert_eq!(response_cost(&h, "x-usage").is_some(), fits);
            h.append("x-usage", HeaderValue::from_static("1"));
            prop_assert_eq!(response_cost(&h, "x-usage"), None);
        }
    }
}
