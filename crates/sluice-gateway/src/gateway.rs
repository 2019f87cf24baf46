//! The gateway: routes, body reading, decisions, shaping, proxying; reloadable.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use http::header::HeaderValue;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Either;
use hyper::body::Incoming;
use sluice_config::{Config, KeySource, OnDeny, PlanChoice, Route, TimeoutsOverride, TokenSource};
use sluice_http::body_key::BodyRefusal;
use sluice_http::headers::write_denial_headers;
use sluice_http::identity::Client;
use sluice_http::lifecycle::{BodyPrefix, Counted, Face, Lifecycle};
use sluice_http::meter::Meter;
use sluice_http::pipeline::{Limiter, Ruling};
use sluice_http::response::Answer;
use sluice_store::{KeyHasher, Store};

use crate::access_log::{AccessLog, Ending, Entry, LoggedClient, Noted, Outcome, Watching};
use crate::body::{BodyWatch, ClientBodyError, ReplayBody, read_prefix};
use crate::client_slots::ClientSlots;
use crate::decision_api;
use crate::error::GatewayError;
use crate::forward_auth;
use crate::observe::{Observed, Observer};
use crate::proxy::Forwarding;
use crate::request_id::{self, RequestId};
use crate::reservations::Reservations;
use crate::respond::{self, Body};
use crate::serve::{Dropped, Handler};
use crate::stores::StoreBuilder;
use crate::tunnel::{ClientUpgrade, Tunnel};
use crate::upstreams::health::HealthBook;
use crate::upstreams::{Group, Upstreams};

/// One loaded configuration and everything derived from it.
pub struct InForce {
    /// The configuration.
    pub config: Config,
    /// The decision pipeline over this configuration's policies and store.
    pub limiter: Limiter,
    /// Where admitted requests go (none: the gateway answers them itself).
    pub(crate) upstreams: Upstreams,
    /// How the upstream is told who the client is (identity headers from untrusted peers go).
    forwarding: Forwarding,
    /// Body reads in progress per client, capped.
    body_reads: Arc<ClientSlots>,
    /// Every request body's idle timeout, and the counters of bodies cut.
    body_watch: BodyWatch,
    /// Whether `POST /v1/check` is served (by default only when there is no upstream).
    decision_api: bool,
    /// The decision API's open reservations, under this configuration's policies.
    reservations: Reservations,
    /// Metric handles and decision log policy resolved for this configuration.
    pub observed: Observed,
    /// Where each request's line goes (`[access_log]`); `None`: no access log.
    access_log: Option<Arc<AccessLog>>,
    /// Whether CORS is configured (the server's or a route's): only then is `Origin` read.
    cors: bool,
}

impl InForce {
    /// Derives the gateway's working state from `config` and a store for it, counting and
    /// logging through `observer`.
    pub fn new(
        config: Config,
        store: Arc<dyn Store>,
        hasher: KeyHasher,
        observer: &Arc<Observer>,
        health: &HealthBook,
    ) -> Result<Self, GatewayError> {
        let metrics = observer.metrics();
        let upstreams = Upstreams::of_config(&config, health, &metrics.upstream_tls_errors(), metrics.upstreams())?;
        health.retain(|name, url| upstreams.in_use().any(|(n, u)| n == name && u == url));
        let decision_api = config.decision_api.enabled.unwrap_or(!upstreams.any());
        let observed = Observed::resolve(observer, &config, store.kind());
        let limiter = Limiter::of_config(&config, store, hasher);
        let s = &config.server;
        // The user header and every header a plan is read from: a client must not hand the
        // upstream a plan (or a user) of its choosing.
        let plan_headers = config.routes.iter().flat_map(|r| &r.limits).filter_map(|l| match &l.plan {
            Some(PlanChoice { by: KeySource::Header(h), .. }) => Some(h.as_str()),
            _ => None,
        });
        let forwarding =
            Forwarding::with_identity(s.forwarded_header, s.user_header.as_deref().into_iter().chain(plan_headers));
        // Headers sluice reads for keys and tokens: never forwarded spelled with `_`.
        let keyed = config.routes.iter().flat_map(|r| &r.limits).flat_map(|l| l.key.parts.iter().flatten());
        let keyed = keyed.filter_map(|p| match p.base() {
            KeySource::Header(h) => Some(h.as_str()),
            _ => None,
        });
        let token = config.identity.jwt.as_ref().and_then(|j| match &j.token {
            TokenSource::Header(h) => Some(h.as_str()),
            TokenSource::Cookie(_) => None,
        });
        let forwarding = forwarding.with_underscores(s.underscore_headers, keyed.chain(token));
        let body_reads = Arc::new(ClientSlots::new());
        let body_watch = BodyWatch::new(Duration::from_nanos(s.body_idle_timeout), Arc::clone(observed.body_errors()));
        forward_auth::warn_undecidable(&config);
        let reservations = Reservations::new(decision_api::MAX_RESERVATIONS, decision_api::RESERVATION_TTL);
        let access_log = config
            .access_log
            .as_ref()
            .map(|a| {
                AccessLog::open(a).map(Arc::new).map_err(|e| GatewayError::AccessLog {
                    path: match &a.to {
                        sluice_config::LogDestination::File(p) => p.clone(),
                        sluice_config::LogDestination::Stdout => "-".into(),
                    },
                    reason: e.to_string(),
                })
            })
            .transpose()?;
        let cors = crate::cors::configured(&config);
        Ok(Self {
            cors,
            limiter,
            upstreams,
            forwarding,
            body_reads,
            body_watch,
            decision_api,
            reservations,
            config,
            observed,
            access_log,
        })
    }

    /// Where admitted requests go.
    pub fn upstreams(&self) -> &Upstreams {
        &self.upstreams
    }

    /// The access log, if there is one (SIGUSR1 reopens its file).
    pub fn access_log(&self) -> Option<&Arc<AccessLog>> {
        self.access_log.as_ref()
    }

    /// The store in use.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.limiter.enforcer().store()
    }

    /// Whether the route `req` goes to relays WebSockets (and there is an upstream to relay to).
    fn relays_websocket<B>(&self, req: &Request<B>) -> bool {
        let Ok(path) = sluice_http::pipeline::route_path(req.uri().path()) else { return false };
        let route = sluice_config::find_route(&self.config.routes, req.method().as_str(), &path);
        route.is_some_and(|(_, r)| r.websocket && self.upstreams.for_route(Some(r)).is_some())
    }
}

/// The gateway's request handler. Cheap to share; [`Gateway::reload`] swaps its configuration
/// atomically while requests are in flight.
pub struct Gateway {
    /// The configuration in force; requests take a snapshot of it when they start.
    current: ArcSwap<InForce>,
    /// Builds the store of each configuration (keeping unchanged policies' state on reload).
    stores: Box<dyn StoreBuilder>,
    /// The key hash, fixed for the process: a reload must not move every client to a new key.
    hasher: KeyHasher,
    /// Requests being handled now, in all (`max_in_flight`, the metrics) and per client
    /// (`max_in_flight_per_client`); kept across reloads, like the requests.
    in_flight: Arc<ClientSlots>,
    /// Metric families and decision log sources, kept across reloads.
    observer: Arc<Observer>,
    /// Every upstream target's health, kept across reloads for targets that stay.
    health: HealthBook,
}

impl Gateway {
    /// A gateway for `config`, with stores from `stores`. The key secret comes from the
    /// config; without one, a random secret is drawn (right for a single instance).
    pub fn new(config: Config, stores: Box<dyn StoreBuilder>) -> Result<Self, GatewayError> {
        Self::with_observer(config, stores, Arc::new(Observer::new()))
    }

    /// Like [`Gateway::new`], counting and logging through `observer` (kept across reloads).
    pub fn with_observer(
        config: Config,
        stores: Box<dyn StoreBuilder>,
        observer: Arc<Observer>,
    ) -> Result<Self, GatewayError> {
        let hasher = match &config.server.key_secret {
            Some(s) => KeyHasher::from_secret(s.expose().as_bytes()),
            None => KeyHasher::random(),
        };
        let store = stores.build(&config, None)?;
        let health = HealthBook::default();
        let loaded = InForce::new(config, store, hasher.clone(), &observer, &health)?;
        let in_flight = Arc::new(ClientSlots::new());
        Ok(Self { current: ArcSwap::from_pointee(loaded), stores, hasher, in_flight, observer, health })
    }

    /// Replaces the configuration. A configuration whose store cannot be built is refused and
    /// the current one keeps serving. Policies that did not change keep their state. Counted and
    /// logged either way.
    pub fn reload(&self, config: Config) -> Result<(), GatewayError> {
        let result = self.try_reload(config);
        self.observer.reloaded(&result);
        result
    }

    /// Loads `path` and reloads with it; a file that does not load is refused like a bad
    /// configuration.
    pub fn reload_file(&self, path: &Path) -> Result<(), GatewayError> {
        match sluice_config::load(path) {
            Ok(config) => self.reload(config),
            Err(e) => {
                let refused = Err(GatewayError::from(e));
                self.observer.reloaded(&refused);
                refused
            }
        }
    }

    fn try_reload(&self, config: Config) -> Result<(), GatewayError> {
        let running = self.current.load();
        if config.server.key_secret != running.config.server.key_secret {
            return Err(GatewayError::NeedsRestart("server.key_secret"));
        }
        if config.server.listen != running.config.server.listen {
            return Err(GatewayError::NeedsRestart("server.listen"));
        }
        if config.server.h2c != running.config.server.h2c {
            return Err(GatewayError::NeedsRestart("server.h2c"));
        }
        if config.server.http2 != running.config.server.http2 {
            return Err(GatewayError::NeedsRestart("server.http2"));
        }
        // The worker threads are started with the listeners.
        if config.server.workers != running.config.server.workers {
            return Err(GatewayError::NeedsRestart("server.workers"));
        }
        let store = self.stores.build(&config, Some(running.store()))?;
        let loaded = InForce::new(config, store, self.hasher.clone(), &self.observer, &self.health)?;
        self.current.store(Arc::new(loaded));
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<InForce> {
        self.current.load_full()
    }

    /// The metrics and decision log sources, shared by every configuration this gateway loads.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    /// Requests being handled now (until their responses end).
    pub fn in_flight(&self) -> usize {
        self.in_flight.total()
    }

    async fn route(
        &self,
        loaded: &InForce,
        peer: SocketAddr,
        client: Client,
        req: Request<Incoming>,
        watching: &Watching<'_>,
    ) -> Result<Response<Body>, Dropped> {
        if loaded.decision_api && decision_api::PATHS.contains(&req.uri().path()) {
            if req.method() != Method::POST {
                let mut res = respond::error(405, "method_not_allowed", "Use POST.");
                res.headers_mut().insert(http::header::ALLOW, HeaderValue::from_static("POST"));
                return Ok(res);
            }
            let access = &loaded.config.decision_api;
            let (limiter, observed, reservations) = (&loaded.limiter, &loaded.observed, &loaded.reservations);
            return Ok(decision_api::handle(limiter, observed, access, reservations, peer.ip(), req).await);
        }
        if let Some(fa) = &loaded.config.forward_auth
            && req.uri().path() == fa.path
        {
            let (limiter, observed, config) = (&loaded.limiter, &loaded.observed, &loaded.config);
            return Ok(forward_auth::handle(limiter, observed, config, peer.ip(), req.headers()).await);
        }
        let (head, body) = req.into_parts();
        // Every body is cut when it stalls, read for keys or streamed upstream.
        let mut body = Some(ReplayBody::untouched(loaded.body_watch.watch(body)));
        let face = Proxied { loaded, client: &client, body: &mut body, noted: watching.noted };
        Lifecycle::new(&loaded.limiter, watching).routed(&loaded.config.routes, &client, head, face).await
    }
}

/// The gateway's face: an admitted request is proxied to the upstream (or answered 200 when
/// there is none), a request no route matches is proxied unlimited (404 without an upstream),
/// a denial is answered or its connection dropped (`on_deny`), and the body is read when a
/// limit keys on it.
struct Proxied<'l> {
    /// The configuration in force when the request started.
    loaded: &'l InForce,
    /// Who sent it (the upstream is told).
    client: &'l Client,
    /// The request body, watched for stalls; replayable once a prefix was read. `None` only
    /// while it is being read. Borrowed from [`Gateway::route`]'s future rather than held: the
    /// face is moved at each step of the lifecycle, and the body is over 200 bytes.
    body: &'l mut Option<ReplayBody>,
    /// Where the upstream and its latency are noted for the access log, when there is one.
    noted: Option<&'l std::sync::Mutex<Noted>>,
}

impl Proxied<'_> {
    /// Notes the target that answered and its latency for the access log.
    fn note_target(&self, target: Option<(String, Duration)>) {
        if let (Some(noted), Some(target)) = (self.noted, target) {
            noted.lock().unwrap_or_else(|p| p.into_inner()).upstream = Some(target);
        }
    }

    /// What a request is balanced by in `group` (0 unless it balances by hash).
    fn balance_hash(&self, group: &Group, method: &str, path: &str, headers: &http::HeaderMap, route: &str) -> u64 {
        if group.hash_key().is_none() {
            return 0;
        }
        let facts = sluice_http::keys::RequestFacts {
            method,
            path,
            route,
            client: self.client,
            headers,
            tls: None,
            body: None,
        };
        crate::upstreams::request_hash(group, self.loaded.limiter.keys(), &facts)
    }

    /// The route counted as `at` in `loaded`, if it is one.
    fn route<'a>(loaded: &'a InForce, at: Counted<'_>) -> Option<&'a Route> {
        match at {
            Counted::Route(i, _) => loaded.config.routes.get(i),
            Counted::Named(_) => None,
        }
    }

    /// The group of the route counted as `at` in `loaded` (`[upstream]` for anything else).
    fn group<'a>(loaded: &'a InForce, at: Counted<'_>) -> Option<&'a Group> {
        loaded.upstreams.for_route(Self::route(loaded, at))
    }
}

impl Face for Proxied<'_> {
    type Request = http::request::Parts;
    type Response = Response<Body>;
    type Error = Dropped;

    respond::server_responses!();

    fn request_headers(request: &mut http::request::Parts) -> Option<&mut http::HeaderMap> {
        Some(&mut request.headers)
    }

    /// The upstream's body is metered; sluice's own answer (no upstream, a 502) is not what a
    /// limit's cost is read from: the reservation stands.
    fn meter(mut response: Response<Body>, meter: Meter) -> Response<Body> {
        // A relayed WebSocket's concurrency slots are held until the relay ends.
        if let Some(tunnel) = response.extensions().get::<Tunnel>() {
            tunnel.hold(meter);
            return response;
        }
        match response.body_mut() {
            Either::Right(body) => body.attach(meter),
            Either::Left(_) => meter.unmetered(),
        }
        response
    }

    async fn pass_on(
        self,
        head: http::request::Parts,
        at: Counted<'_>,
        _: &Ruling<'_>,
    ) -> Result<Response<Body>, Dropped> {
        let loaded = self.loaded;
        let mut head = head;
        let group = Self::group(loaded, at);
        if let (Some(group), Some(upgrade)) = (group, head.extensions.remove::<ClientUpgrade>()) {
            let idle = Duration::from_nanos(loaded.config.server.tunnel_idle_timeout);
            let hash = self.balance_hash(group, head.method.as_str(), head.uri.path(), &head.headers, at.name());
            return Ok(match group.tunnel_target(hash) {
                Some(up) => up.tunnel(head, upgrade, self.client, &loaded.forwarding, idle).await,
                None => group.none_up(),
            });
        }
        Ok(match (group, self.body.take()) {
            (Some(group), Some(body)) => {
                let hash = self.balance_hash(group, head.method.as_str(), head.uri.path(), &head.headers, at.name());
                let req = Request::from_parts(head, body);
                let timeouts = Self::route(loaded, at).map_or(&TimeoutsOverride::NONE, |r| &r.timeouts);
                let (res, target) =
                    group.forward(req, self.client, &loaded.forwarding, hash, timeouts, self.noted.is_some()).await;
                self.note_target(target);
                res
            }
            (Some(_), None) => respond::answer(Answer::bad_request(&BodyRefusal::Unreadable.to_string())),
            (None, _) => respond::json(200, &respond::Allowed { status: "allowed", route: at.name() }),
        })
    }

    fn deny(self, _: Counted<'_>, ruling: &Ruling<'_>) -> Result<Response<Body>, Dropped> {
        match self.loaded.config.server.on_deny {
            OnDeny::Drop => Err(Dropped),
            _ => Ok(respond::answer(ruling.denial())),
        }
    }

    async fn unmatched(self, mut head: http::request::Parts) -> Result<Response<Body>, Dropped> {
        // No limit decided it: it is over no soft limit, whatever its client says.
        sluice_http::headers::mark_soft_limited(&mut head.headers, []);
        Ok(match (self.loaded.upstreams.for_route(None), self.body.take()) {
            (Some(group), Some(body)) => {
                let hash = self.balance_hash(group, head.method.as_str(), head.uri.path(), &head.headers, "");
                let req = Request::from_parts(head, body);
                let (res, target) = group
                    .forward(
                        req,
                        self.client,
                        &self.loaded.forwarding,
                        hash,
                        &TimeoutsOverride::NONE,
                        self.noted.is_some(),
                    )
                    .await;
                self.note_target(target);
                res
            }
            _ => respond::error(404, "not_found", "No such route."),
        })
    }

    fn reads_body(&self) -> bool {
        true
    }

    /// At most `max_body_bytes` are read, within `body_timeout` and with no pause longer than
    /// `body_idle_timeout` (408 otherwise), and no more than `max_body_reads_per_client` bodies
    /// at once for one client (429 beyond). The body is kept whole for the upstream.
    async fn read_body(&mut self) -> Result<BodyPrefix, Answer> {
        let s = &self.loaded.config.server;
        let Some(_reading) = self.loaded.body_reads.start(self.client.grouped, s.max_body_reads_per_client) else {
            return Err(Answer::error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_uploads",
                "Too many request bodies are being sent from this address at once.",
            ));
        };
        let Some(incoming) = self.body.take().and_then(ReplayBody::into_untouched) else {
            return Err(Answer::bad_request(&BodyRefusal::Unreadable.to_string()));
        };
        let read = read_prefix(incoming, s.max_body_bytes);
        match tokio::time::timeout(Duration::from_nanos(s.body_timeout), read).await {
            Ok(Ok(prefix)) => {
                *self.body = Some(prefix.body);
                Ok(BodyPrefix { bytes: prefix.bytes, complete: prefix.complete })
            }
            Ok(Err(cut)) => Err(cut.answer()),
            // The whole body did not come within `body_timeout`: too slow, like a stall.
            Err(_) => Err(ClientBodyError::Stalled.answer()),
        }
    }
}

/// The answer to a request whose client already has `max_in_flight_per_client` in flight: 429
/// rather than 503, since it is this client's doing and not the server's state (a 503 would tell
/// a load balancer in front that the instance is failing); `Retry-After: 1`, as a shed request.
fn too_many_in_flight() -> Answer {
    let mut a = Answer::error(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_in_flight",
        "Too many requests from this address are in progress at once; retry when one has ended.",
    );
    write_denial_headers(&mut a.headers, 1);
    a
}

/// What a request's `Upgrade` asks for. A request that asks anything is relayed (a WebSocket,
/// where its route says so) or refused: passing it on without its `Upgrade` would answer the
/// client as if the upstream had refused it. `Upgrade: h2c` (curl's `--http2` on `http://`) is
/// served as the HTTP/1.1 request it also is, its `Upgrade` and `HTTP2-Settings` never passed on
/// (h2c smuggling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    /// No upgrade (or only `h2c`).
    Nothing,
    /// WebSocket, and nothing else.
    WebSocket,
    /// Anything else, or WebSocket with something else (a version, another protocol).
    Other,
}

fn upgrade_asked(headers: &http::HeaderMap) -> Asked {
    let mut asked = Asked::Nothing;
    for v in headers.get_all(http::header::UPGRADE) {
        for token in v.as_bytes().split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.is_empty() || token.eq_ignore_ascii_case(b"h2c") {
                continue;
            }
            if !token.eq_ignore_ascii_case(b"websocket") {
                return Asked::Other;
            }
            asked = Asked::WebSocket;
        }
    }
    asked
}

/// Gives `req` one host: the one its target names (HTTP/2's `:authority`, an HTTP/1.1 target in
/// absolute form) written as its `Host` when it has none, so that keys, routes and the upstream
/// read the same host whichever version the client spoke. Refused when the request names two
/// hosts (the target's and another `Host`, or `Host` twice) or user info (`user@host`, which
/// HTTP/2 forbids in `:authority`).
fn one_host<B>(req: &mut Request<B>) -> Result<(), sluice_http::keys::KeyRefusal> {
    let refused = sluice_http::keys::KeyRefusal::Authority;
    let mut hosts = req.headers().get_all(http::header::HOST).iter();
    if hosts.next().is_some() && hosts.next().is_some() {
        return Err(refused);
    }
    if req.uri().authority().is_none() {
        return Ok(()); // origin form, the usual case: nothing to compare
    }
    // The target's authority is borrowed from the request while its headers change: a clone of
    // the URI (reference counts) only on this path.
    let uri = req.uri().clone();
    let headers = req.headers_mut();
    let Some(authority) = uri.authority() else { return Ok(()) };
    if authority.as_str().contains('@') {
        return Err(refused);
    }
    match headers.get(http::header::HOST) {
        Some(host) if !host.as_bytes().eq_ignore_ascii_case(authority.as_str().as_bytes()) => Err(refused),
        Some(_) => Ok(()),
        None => {
            let host = HeaderValue::from_str(authority.as_str()).map_err(|_| refused)?;
            headers.insert(http::header::HOST, host);
            Ok(())
        }
    }
}

impl Handler for Gateway {
    async fn handle(self: Arc<Self>, peer: SocketAddr, req: Request<Incoming>) -> Result<Response<Body>, Dropped> {
        let loaded = self.current.load_full();
        // Counted from here until the response ends (what it holds at its end holds the slot).
        let (mut slot, before) = self.in_flight.enter();
        let s = &loaded.config.server;
        if before >= s.max_in_flight {
            tracing::debug!(target: "sluice::shed", in_flight = before, "shed");
            loaded.observed.shed();
            let begun = Begun::new(&loaded, peer, &req, None);
            return begun.ended(Ok(respond::answer(Answer::overloaded())), slot, Outcome::Shed);
        }
        // Who sent it, once: the per-client count and the limits read the same client. Refused
        // before any limit is decided, so nothing is charged.
        let client = loaded.limiter.client(peer.ip(), req.headers());
        let mut req = req;
        let begun = Begun::new(&loaded, peer, &req, Some(&client));
        // The upstream is told the request's id (a client's own is never passed on).
        req.headers_mut().insert(request_id::HEADER, begun.id.header().clone());
        if !self.in_flight.claim(&mut slot, client.grouped, s.max_in_flight_per_client) {
            tracing::debug!(target: "sluice::shed", "shed: the client's requests in flight");
            loaded.observed.shed_per_client();
            return begun.ended(Ok(respond::answer(too_many_in_flight())), slot, Outcome::Shed);
        }
        match upgrade_asked(req.headers()) {
            Asked::Nothing => {}
            Asked::WebSocket if req.version() == http::Version::HTTP_11 && loaded.relays_websocket(&req) => {
                let upgrade = hyper::upgrade::on(&mut req);
                req.extensions_mut().insert(ClientUpgrade(upgrade));
            }
            Asked::WebSocket | Asked::Other => {
                tracing::debug!(target: "sluice::refused", "a protocol upgrade this route does not relay");
                loaded.observed.upgrade_refused();
                let refused = respond::answer(Answer::error(
                    http::StatusCode::NOT_IMPLEMENTED,
                    "upgrade_not_supported",
                    "This route does not relay protocol upgrades (a WebSocket is relayed only where its route \
                     says `upgrades = [\"websocket\"]`): the request is refused, not passed on without its Upgrade",
                ));
                return begun.ended(Ok(refused), slot, Outcome::Refused);
            }
        }
        if let Err(refused) = one_host(&mut req) {
            tracing::debug!(target: "sluice::refused", "{refused}");
            let answer = Answer::bad_request(&refused.to_string());
            sluice_http::lifecycle::Observe::refused(&loaded.observed, None, &refused.into());
            return begun.ended(Ok(respond::answer(answer)), slot, Outcome::Refused);
        }
        if let Some(cors) = begun.cors.as_ref().filter(|c| c.uncharged_preflight()) {
            // A CORS preflight asks what the page may send; it is not charged (its route does
            // not list OPTIONS): answered here, or passed on unlimited.
            let route = cors.route().and_then(|i| loaded.config.routes.get(i));
            let res = match loaded.upstreams.for_route(route) {
                Some(group) if !crate::cors::Asked::answered_here(&loaded.config) => {
                    let (head, body) = req.into_parts();
                    let body = ReplayBody::untouched(loaded.body_watch.watch(body));
                    let timeouts = route.map_or(&TimeoutsOverride::NONE, |r| &r.timeouts);
                    let req = Request::from_parts(head, body);
                    group.forward(req, &client, &loaded.forwarding, 0, timeouts, false).await.0
                }
                _ => cors.preflight_answer(&loaded.config),
            };
            return begun.ended(Ok(res), slot, Outcome::Preflight);
        }
        let watching = Watching { observed: &loaded.observed, request_id: &begun.id, noted: begun.noted.as_ref() };
        let res = self.route(&loaded, peer, client, req, &watching).await;
        begun.ended(res, slot, Outcome::None)
    }
}

/// What is known of a request from its start, for what is written at its end: its id (echoed
/// to the client) and, with an access log, its line begun and what the lifecycle notes.
struct Begun {
    /// The request's id.
    id: RequestId,
    /// The line and its log, when there is an access log.
    line: Option<(Box<Entry>, Arc<AccessLog>)>,
    /// What the lifecycle and the proxy note as the request goes, when there is an access log.
    noted: Option<std::sync::Mutex<Noted>>,
    /// What it asks of CORS, when CORS is configured and it has an `Origin`.
    cors: Option<crate::cors::Asked>,
}

impl Begun {
    /// `req` from `peer` begins; `client` is who sent it as resolved (`None`: not resolved, the
    /// request was shed before: its id is a new one and the peer is its client).
    fn new<B>(loaded: &InForce, peer: SocketAddr, req: &Request<B>, client: Option<&Client>) -> Self {
        let trusted = client.is_some_and(|c| c.peer_trusted);
        let id = RequestId::of(req.headers(), trusted);
        let cors = if loaded.cors { crate::cors::Asked::of(&loaded.config, req) } else { None };
        let Some(log) = &loaded.access_log else { return Self { id, line: None, noted: None, cors } };
        let resolved = client.map_or(peer.ip(), |c| c.ip);
        let logged = match log.client() {
            sluice_config::ClientInLog::Address => LoggedClient::Address {
                peer: peer.ip(),
                forwarded_for: req.headers().get("x-forwarded-for").cloned(),
                client: resolved,
            },
            sluice_config::ClientInLog::Hash => {
                LoggedClient::Hash(crate::access_log::pseudonym(loaded.limiter.keys().hasher(), resolved))
            }
        };
        let entry = Entry {
            time: std::time::SystemTime::now(),
            started: std::time::Instant::now(),
            request_id: id.clone(),
            client: logged,
            method: req.method().clone(),
            target: req.uri().path_and_query().map_or_else(|| req.uri().path().to_string(), |p| p.to_string()),
            version: req.version(),
            referer: req.headers().get(http::header::REFERER).cloned(),
            user_agent: req.headers().get(http::header::USER_AGENT).cloned(),
            route: None,
            outcome: Outcome::None,
            policy: None,
            upstream: None,
            status: 0,
            bytes: 0,
            duration: Duration::ZERO,
        };
        Self { id, line: Some((Box::new(entry), Arc::clone(log))), noted: Some(Default::default()), cors }
    }

    /// The request ends with `res` (`outcome` unless the lifecycle said another): its id echoed,
    /// and its slot in flight — and its access log line — held by what the response holds until
    /// it ends (a proxied body, a relayed WebSocket), else given back (and written) now.
    fn ended(
        self,
        res: Result<Response<Body>, Dropped>,
        slot: crate::client_slots::Slot,
        outcome: Outcome,
    ) -> Result<Response<Body>, Dropped> {
        let line = self.line.map(|(mut entry, log)| {
            let noted = self.noted.map(|n| n.into_inner().unwrap_or_else(|p| p.into_inner())).unwrap_or_default();
            entry.route = noted.route;
            entry.outcome = noted.outcome.unwrap_or(outcome);
            entry.policy = noted.policy;
            entry.upstream = noted.upstream;
            if let Ok(res) = &res {
                entry.status = res.status().as_u16();
                if let Either::Left(own) = res.body() {
                    entry.bytes = http_body::Body::size_hint(own).exact().unwrap_or(0);
                }
            }
            (entry, log)
        });
        let ending = Ending::new(slot, line);
        let mut res = res?;
        res.headers_mut().insert(request_id::HEADER, self.id.header().clone());
        if let Some(cors) = &self.cors {
            match res.body() {
                Either::Left(_) => cors.own_answer(res.headers_mut()),
                Either::Right(_) => cors.upstream_answer(res.headers_mut()),
            }
        }
        if let Some(tunnel) = res.extensions().get::<Tunnel>() {
            // A relayed WebSocket is one request in flight for as long as it lives.
            tunnel.hold(ending);
        } else if let Either::Right(body) = res.body_mut() {
            body.get_mut().hold(ending);
        }
        Ok(res)
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;

    use super::{Asked, one_host, upgrade_asked};

    /// Whether a request asking `headers`' upgrade is refused on a route that relays nothing.
    fn upgrade_refused(headers: &HeaderMap) -> bool {
        upgrade_asked(headers) != Asked::Nothing
    }

    /// One `Upgrade` token as clients and attackers write it: h2c in any case, WebSocket in any
    /// case, a version after a slash, empty, or anything else but a comma (the separator).
    fn token() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("h2c".to_string()),
            Just("H2C".to_string()),
            Just("websocket".to_string()),
            Just("WebSocket".to_string()),
            Just("h2c/1".to_string()),
            Just(String::new()),
            "[!-+\\--~]{1,12}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        /// Asks an upgrade exactly when some comma-separated token of some `Upgrade` line, spaces
        /// and tabs around it dropped, names anything but h2c (any case): what Go's, Node's and
        /// Python's WebSocket servers would take as an upgrade is never passed on silently; a
        /// WebSocket when every such token is `websocket`, in any case.
        #[test]
        fn every_upgrade_but_h2c_is_refused(
            lines in proptest::collection::vec(proptest::collection::vec((token(), "[ \t]{0,2}", "[ \t]{0,2}"), 1..4), 1..3),
        ) {
            let mut headers = HeaderMap::new();
            let (mut refuse, mut other) = (false, false);
            for line in &lines {
                let text: Vec<String> = line.iter().map(|(t, before, after)| format!("{before}{t}{after}")).collect();
                let Ok(value) = HeaderValue::from_str(&text.join(",")) else { continue };
                headers.append(http::header::UPGRADE, value);
                for (t, _, _) in line {
                    let t = t.trim_matches([' ', '\t']);
                    let asked = !t.is_empty() && !t.eq_ignore_ascii_case("h2c");
                    refuse |= asked;
                    other |= asked && !t.eq_ignore_ascii_case("websocket");
                }
            }
            prop_assert_eq!(upgrade_refused(&headers), refuse);
            // A WebSocket (relayed where its route says so) when that is all it asks for.
            let want = match (refuse, other) {
                (false, _) => Asked::Nothing,
                (true, false) => Asked::WebSocket,
                (true, true) => Asked::Other,
            };
            prop_assert_eq!(upgrade_asked(&headers), want);
        }

        /// Any bytes a header value may hold: an answer, never a panic.
        #[test]
        fn any_upgrade_value_is_read(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(value) = HeaderValue::from_bytes(&bytes) {
                let mut headers = HeaderMap::new();
                headers.insert(http::header::UPGRADE, value);
                let _ = upgrade_refused(&headers);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(2_000)))]

        /// A request's host, from a target with an authority (HTTP/2's `:authority`, an
        /// absolute-form target) and `Host` lines of any bytes: refused exactly when the lines
        /// are several, user info is given, or a line names another host than the target (in
        /// any case); otherwise one `Host`, the target's when it has one.
        #[test]
        fn a_request_has_one_host_or_is_refused(
            target in proptest::option::of("[a-zA-Z0-9.@:-]{1,12}"),
            hosts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..14), 0..3),
            same in any::<bool>(),
        ) {
            let uri: http::Uri = match &target {
                Some(a) => match format!("http://{a}/x").parse() { Ok(u) => u, Err(_) => return Ok(()) },
                None => "/x".parse().unwrap(),
            };
            let mut headers = HeaderMap::new();
            for (i, h) in hosts.iter().enumerate() {
                let value = match (&target, i, same) {
                    (Some(a), 0, true) => HeaderValue::from_str(&a.to_ascii_uppercase()).ok(),
                    _ => HeaderValue::from_bytes(h).ok(),
                };
                if let Some(v) = value {
                    headers.append(http::header::HOST, v);
                }
            }
            let lines: Vec<Vec<u8>> = headers.get_all(http::header::HOST).iter().map(|v| v.as_bytes().to_vec()).collect();
            let authority = uri.authority().map(|a| a.as_str().to_string());
            let want_ok = lines.len() <= 1
                && match &authority {
                    None => true,
                    Some(a) => !a.contains('@') && lines.first().is_none_or(|l| l.eq_ignore_ascii_case(a.as_bytes())),
                };
            let mut req = http::Request::new(());
            *req.uri_mut() = uri.clone();
            *req.headers_mut() = headers;
            let got = one_host(&mut req);
            let headers = req.headers();
            prop_assert_eq!(got.is_ok(), want_ok, "{:?} {:?}", authority, lines);
            if let (Ok(()), Some(a)) = (got, &authority) {
                let host = headers.get(http::header::HOST).map(|v| v.as_bytes().to_ascii_lowercase());
                prop_assert_eq!(host, Some(a.to_ascii_lowercase().into_bytes()));
            }
        }
    }
}
